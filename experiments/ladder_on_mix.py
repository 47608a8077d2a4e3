"""The efficiency ladder (dissertation Table 5.7) and the generator-size sweep (section 5.3.2)
with the CPU recipe, on the text where its pre-training pays (docs/experiments/cpu-recipe.md):
every objective pre-trained at the FLOPs of 9,000 `tiny-local` ELECTRA steps
(`context_study.py`'s ladder variants), then fine-tuned on CoLA, SST-2 and RTE against one
random-init baseline (`finetune_transfer.py`, layer-wise decay off), and tabulated.

The text is the recipe's mix: the demo's Wikipedia, `../shared/data/corpus/nltk` and the first
25,000 IMDB reviews of `../shared/data/corpus/aclImdb/unsup.jsonl.gz` (`<br />` made a line
break), one vocabulary and one set of shards for all runs.

Everything is cached per run, so the ladder fills over several invocations: a pre-training run
under WORK/pretrain/runs/VARIANT-b9000-sSEED (it resumes from its last checkpoint), its
fine-tuning under WORK/transfer/VARIANT-sSEED, the random baseline once under
WORK/transfer/baseline. One model is about 65 minutes of pre-training and 9 of fine-tuning on
2 CPU cores. `--table` trains nothing: it tabulates what has finished (WORK/results.md and
.json; with matplotlib WORK/ladder.png, the gains, and WORK/curves.png, each finished model's
held-out pre-training curves against training FLOPs).

    python -m experiments.ladder_on_mix --only mlm+alibi-steep --seeds 1    # one model
    python -m experiments.ladder_on_mix --only electra-15+alibi-steep,replace-mlm+alibi-steep
    python -m experiments.ladder_on_mix --table                              # what has finished
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
from pathlib import Path

from benchmarks.shared_data import SHARED, imdb_reviews
from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.runtime.plot import plot as plot_curves
from experiments import context_study, finetune_transfer
from experiments.common import (
    LADDER,
    LADDER_LABELS,
    PAPER_TABLE_5_7,
    passes_cell,
    run_main,
    seeds_cell,
)

BUDGET_STEPS = 9000  # the recipe's ELECTRA run: the budget every objective gets in FLOPs
TASKS = ("CoLA", "SST-2", "RTE")
# (variant, objective) of the ladder's rows, Table 5.7's order; the generator sweep's
# (variant, size)
OBJECTIVES = [(context_study.ladder_variant(o), o) for o in LADDER]
GENERATORS = [(context_study.generator_variant(s), s) for s in context_study.GENERATOR_SIZES]
VARIANTS = list(dict.fromkeys(v for v, _ in OBJECTIVES + GENERATORS))
# held-out probes against FLOPs: context use (ELECTRA family), the MLM's and the generator's
# accuracy on fresh masks (every other objective logs one of them)
CURVES = ("heldout_auc_unigram", "heldout_mlm_acc", "heldout_gen_acc")


def parse_args(argv: list[str] | None = None, variants: list[str] = VARIANTS,
               description: str = __doc__) -> argparse.Namespace:
    """The driver's options; `variants`: what --only may name (another study on this data,
    e.g. `modern_on_mix`, passes its own)."""
    p = argparse.ArgumentParser(description=description.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/ladder_mix"))
    p.add_argument("--only", help=f"comma-separated variants to train (default: all of "
                   f"{', '.join(variants)})")
    p.add_argument("--seeds", default="1", help="pre-training seeds (default: 1)")
    p.add_argument("--budget-steps", type=int, default=BUDGET_STEPS,
                   help="the budget: the training FLOPs of this many tiny-local ELECTRA steps "
                   f"(default {BUDGET_STEPS:,}, the recipe's; runs of another budget are kept "
                   "and tabulated apart)")
    p.add_argument("--finetune-seeds", type=int, default=3,
                   help="fine-tuning seeds per task and model (default: 3; medians)")
    p.add_argument("--table", action="store_true", help="train nothing: tabulate what finished")
    p.add_argument("--glue", type=Path, default=SHARED / "glue")
    p.add_argument("--corpus-dir", type=Path, default=SHARED / "corpus")
    args = p.parse_args(argv)
    args.variants = args.only.split(",") if args.only else variants
    unknown = [v for v in args.variants if v not in variants]
    if unknown:
        p.error(f"--only: unknown variants {unknown}; known: {', '.join(variants)}")
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        p.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
    return args


def mix_corpus(args: argparse.Namespace) -> list[str]:
    from electra.demo.corpus import fetch_wiki_corpus

    imdb = imdb_reviews(args.corpus_dir, args.work / "imdb_unsup_25k.jsonl")
    return [str(fetch_wiki_corpus()), str(args.corpus_dir / "nltk"), str(imdb)]


def run_dir(work: Path, variant: str, seed: int, budget: int = BUDGET_STEPS) -> Path:
    return work / "pretrain" / "runs" / f"{variant}-b{budget}-s{seed}"


def transfer_dir(work: Path, variant: str, seed: int, budget: int = BUDGET_STEPS) -> Path:
    """Where a model's fine-tuning goes (the recipe's budget untagged, as it always was)."""
    tag = "" if budget == BUDGET_STEPS else f"-b{budget}"
    return work / "transfer" / f"{variant}{tag}-s{seed}"


def exported_encoder(run: Path) -> Path:
    """The encoder a run exports: ELECTRA's discriminator, or an MLM objective's model."""
    for name in ("discriminator", "model"):
        if (run / "final" / name / "config.json").is_file():
            return run / "final" / name
    raise ElectraError(f"{run}: no final/discriminator or final/model (did it finish?)")


def baseline_dir(work: Path, variant: str) -> Path:
    """The random-init baseline a variant's model is compared with: one per architecture
    (`tiny-local`'s ALiBi encoder, every ladder variant's, is "baseline"; plain `tiny` and
    `tiny-modern` have their own)."""
    overrides = context_study.VARIANTS[variant][0]
    if overrides.get("model.architecture") == "modern":
        return work / "transfer" / "baseline-modern"
    if overrides.get("model.position_bias", "none") == "none":
        return work / "transfer" / "baseline-tiny"
    return work / "transfer" / "baseline"


def train_model(variant: str, seed: int, args: argparse.Namespace) -> None:
    """Pre-train (cached, resumable) and fine-tune (cached per task and seed) one model."""
    pretrain = args.work / "pretrain"
    built = (pretrain / "data" / "manifest.json").is_file()  # then the text is not read again
    data_dir = context_study.prepare_data(pretrain, None if built else mix_corpus(args))
    overrides, _ = context_study.VARIANTS[variant]
    context_study.run_variant(variant, overrides, data_dir, pretrain, seed, args.budget_steps)
    finetune_transfer.main([
        "--model", str(exported_encoder(run_dir(args.work, variant, seed, args.budget_steps))),
        "--work", str(transfer_dir(args.work, variant, seed, args.budget_steps)),
        "--baseline", str(baseline_dir(args.work, variant)), "--glue", str(args.glue),
        "--tasks", ",".join(TASKS), "--seeds", str(args.finetune_seeds),
        "--layerwise-decay", "1.0"])


def finished(work: Path, variants: list[str] = VARIANTS, budget: int = BUDGET_STEPS
             ) -> dict[str, list[dict]]:
    """Every model of `variants` at `budget` whose pre-training and fine-tuning both finished,
    by variant, seed order."""
    models: dict[str, list[dict]] = {}
    for variant in variants:
        seeds = sorted(int(m[1]) for t in (work / "transfer").glob(f"{glob.escape(variant)}*-s*")
                       if (m := re.fullmatch(r".+-s(\d+)", t.name)))
        for seed in seeds:
            results = transfer_dir(work, variant, seed, budget) / "results.json"
            summary = run_dir(work, variant, seed, budget) / "summary.json"
            if results.is_file() and summary.is_file():
                models.setdefault(variant, []).append(
                    {"seed": seed, **model_row(json.loads(results.read_text()),
                                               json.loads(summary.read_text()))})
    return models


def model_row(transfer: dict, pretrain: dict) -> dict:
    """One model: its pre-training cost and its fine-tuning medians (x100) by task, with the
    average over tasks of the difference to random init."""
    tasks = transfer["tasks"]
    return {"steps": pretrain["steps"], "flops": pretrain["flops"],
            "data_passes": pretrain.get("data_passes"),
            "pretrain_minutes": pretrain["train_seconds"] / 60,
            # a resumed run's minutes time only the steps after its last resume
            "timed_steps": pretrain.get("timed_steps", pretrain["steps"]),
            "scores": {t: 100 * tasks[t]["pretrained"]["median"] for t in tasks},
            "random": {t: 100 * tasks[t]["random"]["median"] for t in tasks},
            "avg_delta": 100 * statistics.fmean(tasks[t]["delta_median"] for t in tasks)}


def markdown(models: dict[str, list[dict]]) -> str:
    head = ("| objective (equal FLOPs) | seeds | pre-training steps | passes over the text | "
            + " | ".join(TASKS) + " | average Δ vs random init | paper (Table 5.7, GLUE) |\n"
            "|---|---|---|---|" + "---|" * len(TASKS) + "---|---|\n")
    lines = []
    random = None
    for variant, objective in OBJECTIVES:
        rows = models.get(variant, [])
        label, paper = LADDER_LABELS[objective], PAPER_TABLE_5_7[objective]
        if not rows:
            lines.append(f"| {label} | – | | | " + "| " * len(TASKS) + f"not run | {paper} |")
            continue
        random = random or rows[0]["random"]
        lines.append(
            f"| {label} | {', '.join(str(r['seed']) for r in rows)} | {rows[0]['steps']:,} | "
            f"{passes_cell(rows)} | "
            + " | ".join(seeds_cell([r["scores"][t] for r in rows]) for t in TASKS)
            + f" | {seeds_cell([r['avg_delta'] for r in rows], '{:+.1f}')} | {paper} |")
    if random is None:
        random = next((r[0]["random"] for r in models.values() if r), None)
    if random:
        lines.append("| no pre-training (random init) | | 0 | | "
                     + " | ".join(f"{random[t]:.1f}" for t in TASKS) + " | | |")
    sweep = ["| generator size (ELECTRA) | seeds | pre-training steps | average Δ vs random "
             "init |", "|---|---|---|---|"]
    for variant, size in GENERATORS:
        rows = models.get(variant, [])
        seeds = ", ".join(str(r["seed"]) for r in rows) or "–"
        cells = (f"{rows[0]['steps']:,} | {seeds_cell([r['avg_delta'] for r in rows], '{:+.1f}')}"
                 if rows else " | not run")
        sweep.append(f"| {size:g} | {seeds} | {cells} |")
    return head + "\n".join(lines) + "\n\n" + "\n".join(sweep) + "\n"


def plot(models: dict[str, list[dict]], out: Path) -> Path | None:
    """Average Δ over random init for each objective and each generator size, a dot per
    pre-training seed and a bar at the median."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(5, 4))
    objectives = [(v, LADDER_LABELS[o]) for v, o in OBJECTIVES]
    for ax, entries, xlabel in ((left, objectives, "objective, equal FLOPs (Table 5.7)"),
                                (right, [(v, f"{s:g}") for v, s in GENERATORS],
                                 "generator size, x the discriminator's width (5.3.2)")):
        for x, (variant, _) in enumerate(entries):
            deltas = [r["avg_delta"] for r in models.get(variant, [])]
            if deltas:
                ax.bar(x, statistics.median(deltas), color="#9ecae1", width=0.6)
                ax.plot([x] * len(deltas), deltas, "o", color="#08519c")
        ax.set_xticks(range(len(entries)), [label for _, label in entries], rotation=15)
        ax.set_xlim(-0.5, len(entries) - 0.5)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("average Δ vs random init (CoLA, SST-2, RTE)")
    fig.suptitle("Fine-tuning gain of each pre-training objective at equal training FLOPs "
                 f"(those of {BUDGET_STEPS:,} tiny-local ELECTRA steps)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def curves(work: Path, models: dict[str, list[dict]], out: Path, budget: int = BUDGET_STEPS
           ) -> Path | None:
    """The finished models' held-out curves (those of CURVES they log) against training FLOPs,
    overlaid."""
    runs = [run_dir(work, variant, r["seed"], budget) for variant, rows in models.items()
            for r in rows]
    try:
        return Path(plot_curves(runs, out, CURVES, x="flops", skip_missing=True)["out"])
    except ElectraError:  # no matplotlib, or no curve to draw: the table still stands
        return None


def tabulate(work: Path, budget: int = BUDGET_STEPS) -> dict:
    models = finished(work, VARIANTS, budget)
    table = markdown(models)
    gains = plot(models, work / "ladder.png") if models else None
    probes = curves(work, models, work / "curves.png", budget) if models else None
    result = {"budget_steps": budget, "tasks": list(TASKS), "models": models,
              "plot": gains and str(gains), "curves": probes and str(probes)}
    work.mkdir(parents=True, exist_ok=True)
    write_atomic(work / "results.json", json.dumps(result, indent=2) + "\n")
    write_atomic(work / "results.md", table)
    return result | {"markdown": table}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if not args.table:
        for variant in args.variants:
            for seed in args.seed_list:
                train_model(variant, seed, args)
    result = tabulate(args.work, args.budget_steps)
    print(json.dumps({k: v for k, v in result.items() if k != "markdown"}, indent=2))
    print(result["markdown"])
    return result


if __name__ == "__main__":
    run_main(main)

"""What makes replaced token detection pay on the modern architecture at the demo's scale?
(docs/experiments/modern.md, "RTD against MLM at the demo's scale")

Every variant pre-trains `tiny-modern` on the demo's Wikipedia text (its vocabulary and
128-token shards, `context_study.prepare_data`) at equal training FLOPs, by default those of 900
`tiny` ELECTRA steps at 32 x 128 (5.2e13, the FLOPs of 800 `tiny-modern` ELECTRA steps), then
fine-tunes on two token-tagging checks against a random initialisation of the same
architecture and tokenizer:

- chunk: CoNLL-2000, its first 2,000 training sentences, 3 epochs, test-set F1 (the demo's
  check, `electra.demo.check.CHECKS["chunk"]`);
- ner: WikiGold split by article (`electra.tasks.document_split.WIKIGOLD`), all 1,023 training
  sentences, 20 epochs, dev span F1.

Fine-tuning as the demo's check does it: lr 3e-4, no layer-wise decay, medians over 3 seeds.
Every pre-training run is cached and resumable (WORK/pretrain/runs/VARIANT-bBUDGET-sSEED),
every fine-tuning run cached (WORK/transfer/...). `--table` trains nothing and writes
WORK/results-bBUDGET.md and .json: per variant the probes at the end (unigram-fake AUC, token
cosine, generator accuracy, the discriminator's recall and precision on replaced tokens) and
the checks' F1.

    python -m experiments.rtd_modern --only electra,mlm --seeds 1
    python -m experiments.rtd_modern --table
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from benchmarks.shared_data import SHARED
from electra.demo.check import CHECKS, CheckSettings
from electra.fileutil import write_atomic
from electra.finetuning.baseline import random_init
from electra.finetuning.run import finetune
from electra.tasks.document_split import split_documents
from experiments import context_study
from experiments.common import run_main, seeds_cell
from experiments.ladder_on_mix import exported_encoder

BUDGET_STEPS = 900
MODERN = context_study.TINY_MODERN
# name -> (overrides of `tiny-modern` as --set gives them, what it tests)
VARIANTS: dict[str, tuple[dict, str]] = {
    "electra": ({}, "tiny-modern's ELECTRA as its preset has it: zero head bias, generator as "
                "wide and 3 layers deep sharing the embeddings, 15% masking"),
    "mlm": ({"objective.name": "mlm"}, "BERT's MLM, 15% masking"),
    "mlm-mask30": ({"objective.name": "mlm", "objective.mask_prob": 0.3},
                   "BERT's MLM, 30% masking (ModernBERT's rate)"),
    "base-rate": ({"objective.disc_bias_init": "base-rate"},
                  "discriminator head bias at the log-odds of the masking rate"),
    "gen1": ({"objective.generator_layers": 1}, "a generator of one layer (full width)"),
    "gen0.5": ({"objective.generator_multiplier": 0.5, "objective.sharing": "none"},
               "a generator half as wide, 3 layers, its own embeddings"),
    "gen0.25": ({"objective.generator_multiplier": 0.25, "objective.sharing": "none"},
                "a generator a quarter as wide, 3 layers, its own embeddings (section 5.3.2)"),
    "mask25": ({"objective.mask_prob": 0.25}, "25% masking (ELECTRA-Large's rate)"),
    "gdes": ({"objective.sharing": "gdes"}, "DeBERTa-V3's gradient-disentangled sharing"),
    "temp2": ({"objective.temperature": 2.0}, "sampling at temperature 2 (more replacements)"),
    "lr5e-4": ({"train.learning_rate": 5e-4}, "peak learning rate 5e-4 (1e-3 elsewhere)"),
    "lr2e-3": ({"train.learning_rate": 2e-3}, "peak learning rate 2e-3"),
    "disc-weight10": ({"objective.disc_weight": 10.0}, "discriminator loss weight 10 (50)"),
    "gen-own-embeddings": ({"objective.sharing": "none"},
                           "the generator's own token embeddings (no sharing)"),
    "dropout0.1": ({"model.hidden_dropout_prob": 0.1, "model.attention_probs_dropout_prob": 0.1},
                   "dropout 0.1 (ELECTRA's; ModernBERT's is 0)"),
    # A locality prior, as tiny-local's steep ALiBi head is for the BERT architecture: at 128
    # tokens ModernBERT's 128-token window (64 each side) lets every layer see every token.
    "window16": ({"model.local_attention": 16},
                 "local layers attend 8 tokens each side (ModernBERT's window: 64)"),
    "window16-base-rate": ({"model.local_attention": 16, "objective.disc_bias_init": "base-rate"},
                           "the 16-token window and the base-rate head bias"),
    "window16-gen0.25": ({"model.local_attention": 16, "objective.generator_multiplier": 0.25,
                          "objective.sharing": "none"},
                         "the 16-token window and a quarter-width generator"),
    "window16-gen0.125": ({"model.local_attention": 16, "objective.generator_multiplier": 0.125,
                           "objective.sharing": "none"},
                          "the 16-token window and an eighth-width generator (one 16-wide head)"),
    "window16-gen0.25-mask25": ({"model.local_attention": 16,
                                 "objective.generator_multiplier": 0.25,
                                 "objective.sharing": "none", "objective.mask_prob": 0.25},
                                "the 16-token window, a quarter-width generator, 25% masking"),
    "window16-gen0.0625": ({"model.local_attention": 16,
                            "objective.generator_multiplier": 0.0625,
                            "objective.sharing": "none"},
                           "the 16-token window and a sixteenth-width generator (one 8-wide "
                           "head)"),
    "window16-gen0.125-mask25": ({"model.local_attention": 16,
                                  "objective.generator_multiplier": 0.125,
                                  "objective.sharing": "none", "objective.mask_prob": 0.25},
                                 "the 16-token window, an eighth-width generator, 25% masking"),
    # TEAMS (Shen et al., 2021): the discriminator also picks the original token among the
    # generator's candidates at masked positions, a token-identity signal RTD alone lacks.
    "window16-teams": ({"model.local_attention": 16, "objective.name": "teams"},
                       "TEAMS (RTD plus multi-word selection, its paper's generator) with the "
                       "16-token window"),
    "mlm-window16": ({"objective.name": "mlm", "model.local_attention": 16},
                     "BERT's MLM with the 16-token window"),
    # Section 5.3.1's "tie all weights": one network is the generator (on the masked input)
    # and the discriminator (on the corrupted one), so MLM's gradient shapes every layer.
    "share-all": ({"objective.sharing": "all", "objective.generator_layers": None},
                  "one network for generator and discriminator (section 5.3.1, all tied)"),
    "gen1-mask25": ({"objective.generator_layers": 1, "objective.mask_prob": 0.25},
                    "a one-layer generator and 25% masking"),
    "gen0.5-mask25": ({"objective.generator_multiplier": 0.5, "objective.sharing": "none",
                       "objective.mask_prob": 0.25},
                      "a generator half as wide (its own embeddings) and 25% masking"),
}
PRETRAIN_SEEDS = (1, 2, 3)


@dataclasses.dataclass(frozen=True)
class Check:
    """A downstream check: a tagging task, its data folder under WORK or SHARED, its settings."""

    task: str
    settings: CheckSettings
    label: str


CHECK_RUNS = {
    "chunk": Check("chunk", CHECKS["chunk"], "CoNLL-2000 chunking, test F1"),
    # 20 epochs (640 steps): at 5, every model stayed below 0.2 F1
    "ner": Check("ner", CheckSettings(task="ner", train_examples=None, epochs=20.0),
                 "WikiGold NER, dev span F1"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/rtd_modern"))
    p.add_argument("--only", help=f"comma-separated variants (default: all of "
                   f"{', '.join(VARIANTS)})")
    p.add_argument("--seeds", default="1", help="pre-training seeds (default: 1)")
    p.add_argument("--budget-steps", type=int, default=BUDGET_STEPS,
                   help="the budget: the FLOPs of this many tiny ELECTRA steps at 32 x 128 "
                   f"(default {BUDGET_STEPS})")
    p.add_argument("--checks", default=",".join(CHECK_RUNS),
                   help="downstream checks (default: %(default)s)")
    p.add_argument("--table", action="store_true", help="train nothing: tabulate")
    p.add_argument("--pretrain-only", action="store_true", help="pre-train (and probe) only: "
                   "a quick screen of the probes' curves at a small --budget-steps")
    args = p.parse_args(argv)
    args.variants = args.only.split(",") if args.only else list(VARIANTS)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        p.error(f"--only: unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    args.seed_list = [int(s) for s in args.seeds.split(",") if s]
    args.check_list = args.checks.split(",")
    return args


def check_data(work: Path, check: str) -> Path:
    if check == "ner":
        out = work / "wikigold"
        if not (out / "split.json").is_file():
            split_documents("wikigold", SHARED / "wikigold", out)
        return out
    return SHARED / "conll2000"


def run_name(variant: str, seed: int, budget: int) -> str:
    return f"{variant}-b{budget}-s{seed}"


def finetune_check(model: Path, out: Path, check: str, work: Path) -> dict:
    """Fine-tune `model` on `check` (cached: OUT/results.json); medians over seeds (x100)."""
    cached = out / "results.json"
    if cached.is_file():
        result = json.loads(cached.read_text())
    else:
        spec = CHECK_RUNS[check]
        result = finetune(model, spec.task, check_data(work, check), out,
                          spec.settings.finetune_settings())
    scores = [100 * s["scores"][result["primary_metric"]] for s in result["seeds"]]
    return {"median": statistics.median(scores), "seeds": scores}


def random_baseline(work: Path, model: Path, checks: list[str]) -> dict:
    random = random_init(model, work / "transfer" / "random" / "weights", seed=0)
    return {c: finetune_check(random, work / "transfer" / "random" / c, c, work) for c in checks}


def train_model(variant: str, seed: int, args: argparse.Namespace) -> None:
    pretrain = args.work / "pretrain"
    data_dir = context_study.prepare_data(pretrain, None)
    overrides = {**MODERN, **VARIANTS[variant][0]}
    context_study.run_variant(variant, overrides, data_dir, pretrain, seed, args.budget_steps)
    if args.pretrain_only:
        return
    model = exported_encoder(pretrain / "runs" / run_name(variant, seed, args.budget_steps))
    for check in args.check_list:
        finetune_check(model, args.work / "transfer" / run_name(variant, seed,
                                                                  args.budget_steps) / check,
                       check, args.work)
    random_baseline(args.work, model, args.check_list)


def layer_cosines(work: Path, model: Path, cache: Path) -> list[float]:
    """Mean cosine between the token vectors of a held-out sequence after each layer of the
    exported encoder (cached in `cache`): ~0 for diverse tokens, near 1 when one shared
    direction dominates every token's vector. MLM's and ELECTRA's models alike."""
    if cache.is_file():
        return json.loads(cache.read_text())
    import torch

    from electra.data.dataset import PretrainingDataset
    from electra.finetuning.model_io import load_source
    from electra.pretraining.heldout import mean_token_cosine

    batch = PretrainingDataset(work / "pretrain" / "data", "heldout").get_batch(list(range(32)))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    keep = mask.bool() & (ids > 4)  # real tokens: not [PAD], [UNK], [CLS], [SEP], [MASK]
    encoder, _, _ = load_source(model)
    encoder.eval()
    outputs: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(
        lambda module, args, out: outputs.append(out if torch.is_tensor(out) else out[0]))
        for layer in encoder.layers]
    with torch.no_grad():
        encoder(ids, torch.zeros_like(ids), mask)
    for hook in hooks:
        hook.remove()
    values = [round(mean_token_cosine(o.float(), keep), 3) for o in outputs]
    write_atomic(cache, json.dumps(values) + "\n")
    return values


def last_row(run: Path, key: str) -> float | None:
    """The last value of `key` logged in RUN/metrics.jsonl."""
    path = run / "metrics.jsonl"
    value = None
    if path.is_file():
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            value = row.get(key, value)
    return value


PROBES = (("heldout_auc_unigram", "unigram-fake AUC"), ("heldout_token_cosine", "token cosine"),
          ("heldout_gen_acc", "generator acc."), ("heldout_mlm_acc", "MLM acc."),
          ("disc_recall", "disc. recall"), ("disc_precision", "disc. precision"))


def finished(work: Path, budget: int, checks: list[str]) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for variant in VARIANTS:
        for seed in range(1, 10):
            name = run_name(variant, seed, budget)
            run = work / "pretrain" / "runs" / name
            results = [work / "transfer" / name / c / "results.json" for c in checks]
            if not (run / "summary.json").is_file() or not all(r.is_file() for r in results):
                continue
            summary = json.loads((run / "summary.json").read_text())
            scores = {c: finetune_check(Path(), work / "transfer" / name / c, c, work)["median"]
                      for c in checks}
            cosines = layer_cosines(work, exported_encoder(run),
                                    work / "transfer" / name / "layer_cosines.json")
            rows.setdefault(variant, []).append(
                {"seed": seed, "steps": summary["steps"], "flops": summary["flops"],
                 "minutes": summary["train_seconds"] / 60, "scores": scores,
                 "probes": {k: last_row(run, k) for k, _ in PROBES},
                 "layer_cosines": cosines})
    return rows


def markdown(models: dict[str, list[dict]], random: dict | None, checks: list[str]) -> str:
    head = ("| variant | what it tests | seeds | steps | "
            + " | ".join(label for _, label in PROBES) + " | token cosine after each layer | "
            + " | ".join(CHECK_RUNS[c].label for c in checks) + " | average |\n|"
            + "---|" * (6 + len(PROBES) + len(checks)) + "\n")
    lines = []
    for variant, (_, what) in VARIANTS.items():
        rows = models.get(variant)
        if not rows:
            continue
        probes = []
        for key, _ in PROBES:
            values = [r["probes"][key] for r in rows if r["probes"][key] is not None]
            probes.append(seeds_cell(values, "{:.3f}") if values else "–")
        averages = [statistics.fmean(r["scores"][c] for c in checks) for r in rows]
        cosines = " ".join(f"{c:.2f}" for c in rows[0]["layer_cosines"])
        lines.append(f"| {variant} | {what} | {', '.join(str(r['seed']) for r in rows)} | "
                     f"{rows[0]['steps']:,} | " + " | ".join(probes) + f" | {cosines} | "
                     + " | ".join(seeds_cell([r["scores"][c] for r in rows]) for c in checks)
                     + f" | {seeds_cell(averages)} |")
    if random:
        lines.append("| random init | tiny-modern's architecture, no pre-training | | 0 | "
                     + "| " * (len(PROBES) + 1) + " | ".join(f"{random[c]['median']:.1f}"
                                                       for c in checks)
                     + f" | {statistics.fmean(random[c]['median'] for c in checks):.1f} |")
    return head + "\n".join(lines) + "\n"


def probe_table(work: Path, budget: int, variants: list[str], seeds: list[int]) -> str:
    """The probes at the end of each pre-training run of `budget` (a `--pretrain-only`
    screen): what each variant does to context use, token cosine and the generator."""
    lines = ["| variant | seed | steps | " + " | ".join(label for _, label in PROBES) + " |",
             "|---|---|---|" + "---|" * len(PROBES)]
    for variant in variants:
        for seed in seeds:
            run = work / "pretrain" / "runs" / run_name(variant, seed, budget)
            steps = last_row(run, "step")
            if steps is None:
                continue
            cells = [f"{v:.3f}" if (v := last_row(run, key)) is not None else "–"
                     for key, _ in PROBES]
            lines.append(f"| {variant} | {seed} | {steps} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    write_atomic(work / f"probes-b{budget}.md", table)
    return table


def tabulate(work: Path, budget: int, checks: list[str]) -> dict:
    models = finished(work, budget, checks)
    weights = work / "transfer" / "random"
    random = ({c: finetune_check(Path(), weights / c, c, work) for c in checks}
              if all((weights / c / "results.json").is_file() for c in checks) else None)
    table = markdown(models, random, checks)
    result = {"budget_steps": budget, "checks": checks, "models": models, "random": random}
    work.mkdir(parents=True, exist_ok=True)
    write_atomic(work / f"results-b{budget}.json", json.dumps(result, indent=2) + "\n")
    write_atomic(work / f"results-b{budget}.md", table)
    return result | {"markdown": table}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.pretrain_only:
        for seed in args.seed_list:
            for variant in args.variants:
                train_model(variant, seed, args)
        table = probe_table(args.work, args.budget_steps, args.variants, args.seed_list)
        print(table)
        return {"probes": table}
    if not args.table:
        for seed in args.seed_list:
            for variant in args.variants:
                train_model(variant, seed, args)
                tabulate(args.work, args.budget_steps, args.check_list)
    result = tabulate(args.work, args.budget_steps, args.check_list)
    print(result["markdown"])
    return result


if __name__ == "__main__":
    run_main(main)

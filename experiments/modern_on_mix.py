"""The modern architecture against the BERT one with the CPU recipe (docs/experiments/modern.md):
`tiny-modern` (ModernBERT's architecture) against `tiny-local` and `tiny`, all with ELECTRA, and
ELECTRA against BERT's MLM on `tiny-modern`, every model at the training FLOPs of 9,000
`tiny-local` ELECTRA steps on the recipe's text, then fine-tuned on CoLA, SST-2 and RTE against
a random initialisation of its own architecture.

It is `ladder_on_mix.py` with other variants (`context_study.py`'s `electra`, `base-rate+alibi-
steep`, `modern`, `mlm+modern`), in the same WORK by default: the same text, vocabulary and
shards, and the ladder's `tiny-local` ELECTRA runs count here too. Everything is cached per run
and resumable; `--table` trains nothing and writes WORK/modern-bBUDGET.md and .json.
`--budget-steps N` gives every model the FLOPs of N `tiny-local` steps instead.

    python -m experiments.modern_on_mix --only modern --seeds 1
    python -m experiments.modern_on_mix --table
"""

from __future__ import annotations

import json
from pathlib import Path

from electra.fileutil import write_atomic
from experiments import context_study, ladder_on_mix
from experiments.common import passes_cell, run_main, seeds_cell
from experiments.ladder_on_mix import TASKS

# (variant, what the row is), in the table's order.
ROWS = [("electra", "tiny (BERT architecture), ELECTRA"),
        ("base-rate+alibi-steep", "tiny-local (ALiBi, base-rate bias), ELECTRA"),
        ("modern", "tiny-modern (ModernBERT architecture), ELECTRA"),
        ("mlm+modern", "tiny-modern, BERT's MLM")]
VARIANTS = [variant for variant, _ in ROWS]


def final_auc(work: Path, variant: str, seed: int, budget: int) -> float | None:
    """The unigram-fake AUC of the last held-out probe (ELECTRA-family runs log it)."""
    probes = context_study.read_probes(ladder_on_mix.run_dir(work, variant, seed, budget))
    return probes[-1].get("heldout_auc_unigram") if probes else None


def markdown(work: Path, models: dict[str, list[dict]], budget: int) -> str:
    head = ("| encoder, objective (equal FLOPs) | seeds | pre-training steps | passes over the "
            "text | unigram-fake AUC at the end | " + " | ".join(TASKS)
            + " | average Δ vs its random init |\n|---|---|---|---|---|"
            + "---|" * len(TASKS) + "---|\n")
    lines, baselines = [], {}
    for variant, label in ROWS:
        rows = models.get(variant, [])
        if not rows:
            lines.append(f"| {label} | – | | | | " + "| " * len(TASKS) + "not run |")
            continue
        baselines.setdefault(ladder_on_mix.baseline_dir(work, variant).name, rows[0]["random"])
        aucs = [a for r in rows
                if (a := final_auc(work, variant, r["seed"], budget)) is not None]
        lines.append(
            f"| {label} | {', '.join(str(r['seed']) for r in rows)} | {rows[0]['steps']:,} | "
            f"{passes_cell(rows)} | {seeds_cell(aucs, '{:.3f}') if aucs else '–'} | "
            + " | ".join(seeds_cell([r["scores"][t] for r in rows]) for t in TASKS)
            + f" | {seeds_cell([r['avg_delta'] for r in rows], '{:+.1f}')} |")
    for name, random in baselines.items():
        lines.append(f"| random init ({name}) | | 0 | | | "
                     + " | ".join(f"{random[t]:.1f}" for t in TASKS) + " | |")
    return head + "\n".join(lines) + "\n"


def tabulate(work: Path, budget: int) -> dict:
    models = ladder_on_mix.finished(work, VARIANTS, budget)
    table = markdown(work, models, budget)
    result = {"budget_steps": budget, "tasks": list(TASKS), "models": models}
    work.mkdir(parents=True, exist_ok=True)
    write_atomic(work / f"modern-b{budget}.json", json.dumps(result, indent=2) + "\n")
    write_atomic(work / f"modern-b{budget}.md", table)
    return result | {"markdown": table}


def main(argv: list[str] | None = None) -> dict:
    args = ladder_on_mix.parse_args(argv, VARIANTS, __doc__)
    if not args.table:
        for variant in args.variants:
            for seed in args.seed_list:
                ladder_on_mix.train_model(variant, seed, args)
    result = tabulate(args.work, args.budget_steps)
    print(json.dumps({k: v for k, v in result.items() if k != "markdown"}, indent=2))
    print(result["markdown"])
    return result


if __name__ == "__main__":
    run_main(main)

"""The efficiency ladder of dissertation section 5.4.3 (Table 5.7) and the generator-size sweep
of section 5.3.2 (Figure 5.4), reproduced with `tiny` models on the English text of
../shared/data/corpus.

Every objective gets the same training-FLOP budget: the budget is `--electra-steps` steps of
ELECTRA (tiny, generator 1/2, batch 32 x 128), and each other objective trains for as many steps
as that buys at its own per-step cost (`electra.objectives.objective_step_flops`), so MLM trains
for more steps than ELECTRA, as BERT does in Table 5.1. Each pre-trained encoder is then
fine-tuned on CoLA, SST-2 and RTE with the Table 5.2 recipe (`electra.finetuning.run.finetune`,
`--seeds` seeds, median as in section 5.2.4).

Work is cached under WORK (vocabulary, prepared data, each pre-training run, each fine-tuning),
so an interrupted run picks up where it stopped. Prints one JSON object and two markdown
tables, also written to WORK/results.json and WORK/results.md.

    python -m experiments.objective_ladder    # the run in docs/experiments/ladder.md

A reference row fine-tunes the same encoder from random weights (`--no-random-baseline` skips
it): at this scale it is the line an objective must clear before the ordering means anything.

The default budget (600 tiny ELECTRA steps, ~3.5e13 FLOPs per model) is sized so the whole
script, 8 pre-trainings and 81 fine-tunings, fits in 2 hours on a 2-core CPU: measured about
10 minutes per model on an idle machine (3 pre-training, 7 fine-tuning), 90 minutes in all.

    python -m experiments.objective_ladder --electra-steps 20 --max-train-examples 64 \\
        --seeds 1 --tasks RTE --work /tmp/ladder_smoke          # a smoke test (minutes)

With the recipe that makes a tiny discriminator learn context (docs/experiments/collapse.md),
in a WORK of its own, at the budget where its transfer showed (9,000 steps: about an hour per
model on 2 CPU cores, far less on a GPU):

    python -m experiments.objective_ladder --preset tiny-local --layerwise-decay 1.0 \\
        --electra-steps 9000 --work runs/ladder_tiny_local

WORK/curves.png then overlays the runs' held-out curves against training FLOPs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.equal_budget import (
    budget_flops,
    log,
    pin_settings,
    prepare_data,
    pretrain_run,
    run_config,
    steps_for_budget,
    vocab_size_of,
)
from benchmarks.shared_data import SHARED
from electra.errors import ElectraError
from electra.finetuning.baseline import random_init
from electra.finetuning.evaluation import primary_key
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings
from electra.runtime.plot import plot
from electra.tasks import get_task
from experiments.common import LADDER, LADDER_LABELS, PAPER_TABLE_5_7


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/objective_ladder"))
    p.add_argument("--corpus-dir", type=Path, default=SHARED / "corpus")
    p.add_argument("--glue", type=Path, default=SHARED / "glue")
    p.add_argument("--electra-steps", type=int, default=600,
                   help="the FLOP budget, in steps of tiny ELECTRA (generator 1/2)")
    p.add_argument("--objectives", default=",".join(LADDER))
    p.add_argument("--generator-sizes", default="0.125,0.25,0.5,1.0",
                   help="generator multipliers for the ELECTRA sweep ('' to skip)")
    p.add_argument("--tasks", default="CoLA,SST-2,RTE")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="train on the first K examples of each task (default: all)")
    p.add_argument("--max-train-examples-sst2", type=int, default=8000,
                   help="cap for SST-2 alone (67k examples; 0 for all)")
    p.add_argument("--preset", default="tiny", choices=["tiny", "tiny-local"],
                   help="model and recipe of every run (default tiny, the recorded run)")
    p.add_argument("--lr", type=float, help="pre-training peak learning rate (default: the "
                   "preset's)")
    p.add_argument("--layerwise-decay", type=float, help="fine-tuning layer-wise lr decay "
                   "(default 0.8, Table 5.2's Small value; 1.0 switches it off)")
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--no-random-baseline", dest="random_baseline", action="store_false",
                   help="skip the reference row: the same encoder fine-tuned from random weights")
    p.add_argument("--progress", action="store_true", help="progress bars on stderr")
    return p.parse_args(argv)


def finetune_run(name: str, model_dir: Path, args) -> dict[str, dict]:
    scores = {}
    for task_name in args.tasks.split(","):
        out = args.work / "finetune" / name / task_name
        results_path = out / "results.json"
        if not results_path.is_file():
            cap = args.max_train_examples
            if task_name == "SST-2" and args.max_train_examples_sst2:
                cap = min(cap or args.max_train_examples_sst2, args.max_train_examples_sst2)
            settings = FinetuneSettings(seeds=args.seeds, max_train_examples=cap,
                                        layerwise_decay=args.layerwise_decay,
                                        precision="bf16" if args.bf16 else "fp32",
                                        device=args.device)
            log(f"fine-tuning {name} on {task_name} ({args.seeds} seeds)")
            finetune(model_dir, task_name, args.glue / task_name, out, settings,
                     show_progress=args.progress)
        results = json.loads(results_path.read_text())
        key = primary_key(get_task(task_name))
        per_seed = [seed["scores"][key] for seed in results["seeds"]]
        scores[task_name] = {"metric": key, "median": statistics.median(per_seed),
                             "per_seed": per_seed,
                             "train_seconds": sum(s["train_seconds"] for s in results["seeds"])}
    return scores


def one_model(name: str, objective: str, multiplier: float, budget: float, data: Path,
              vocab_size: int, args) -> dict:
    steps = steps_for_budget(budget, objective, vocab_size, multiplier)
    cfg = run_config(objective, steps, multiplier, args.lr, args.bf16, args.preset)
    summary = pretrain_run(args.work, name, cfg, data, args.device, args.progress)
    encoder_dir = Path(next(iter(summary["final"].values())))  # first export = the encoder
    return {"objective": objective, "generator_multiplier": multiplier, "steps": steps,
            "encoder_dir": str(encoder_dir), "train_flops": summary["flops"],
            "train_seconds": summary["train_seconds"], "last_log": summary.get("last", {}),
            **finetune_row(name, encoder_dir, args)}


def finetune_row(name: str, model_dir: Path, args) -> dict:
    scores = finetune_run(name, model_dir, args)
    return {"scores": scores,
            "average": 100 * statistics.mean(s["median"] for s in scores.values()),
            "finetune_train_seconds": sum(s["train_seconds"] for s in scores.values())}


def random_baseline(encoder_dir: Path, args) -> dict:
    """What fine-tuning alone reaches at this scale: the line a pre-training objective must
    clear before the ladder's ordering says anything (seed 0, tiny's initialisation)."""
    model_dir = args.work / "random_init"
    if not (model_dir / "config.json").is_file():
        random_init(encoder_dir, model_dir, seed=0)
    return {"objective": "random-init", "generator_multiplier": 0.0, "steps": 0,
            "train_flops": 0.0, "train_seconds": 0.0,
            **finetune_row("random-init", model_dir, args)}


def table(rows: list[dict], first_col: str, label) -> str:
    tasks = list(rows[0]["scores"]) if rows else []
    head = [first_col, *tasks, "average", "steps", "train FLOPs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [label(r), *(f"{100 * r['scores'][t]['median']:.1f}" for t in tasks),
                 f"{r['average']:.1f}", str(r["steps"]), f"{r['train_flops']:.3g}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def time_line(rows: list[dict]) -> str:
    """Training time recorded in the cached runs, so a resumed run still reports the total."""
    unique = {r["objective"] + str(r["generator_multiplier"]): r for r in rows}.values()
    pretrain = sum(r["train_seconds"] for r in unique) / 60
    tune = sum(r["finetune_train_seconds"] for r in unique) / 60
    return (f"Training loops recorded: pre-training {pretrain:.0f} min, fine-tuning {tune:.0f} min "
            "(evaluation and data preparation not included).")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    pin_settings(args.work, {k: getattr(args, k) for k in (
        "preset", "lr", "layerwise_decay", "electra_steps", "vocab_size", "seeds",
        "max_train_examples", "max_train_examples_sst2", "bf16")})
    started = time.perf_counter()
    data = prepare_data(args.work, args.corpus_dir, args.vocab_size, args.progress)
    vocab_size = vocab_size_of(data)
    budget = budget_flops(args.electra_steps, vocab_size)
    log(f"FLOP budget {budget:.3g} (= {args.electra_steps} tiny ELECTRA steps)")

    ladder = [one_model(obj, obj, 0.5, budget, data, vocab_size, args)
              for obj in args.objectives.split(",") if obj]
    if args.random_baseline and ladder:
        ladder.append(random_baseline(Path(ladder[0]["encoder_dir"]), args))
    sizes = [float(s) for s in args.generator_sizes.split(",") if s]
    sweep = []
    for m in sizes:
        name = "electra" if m == 0.5 and "electra" in args.objectives.split(",") \
            else f"electra-gen{m:g}"
        sweep.append(one_model(name, "electra", m, budget, data, vocab_size, args))

    report = {"budget_flops": budget, "electra_steps": args.electra_steps,
              "seeds": args.seeds, "tasks": args.tasks.split(","), "ladder": ladder,
              "generator_sizes": sweep, "paper_table_5_7_glue": PAPER_TABLE_5_7,
              "wall_seconds": round(time.perf_counter() - started, 1),
              "settings": {k: str(v) for k, v in vars(args).items()}}
    md = ["Objective ladder (Table 5.7 layout), dev medians over "
          f"{args.seeds} seeds, equal budget {budget:.3g} training FLOPs:", "",
          table(ladder, "objective",
                lambda r: LADDER_LABELS.get(r["objective"], r["objective"])),
          "", "Generator size sweep (ELECTRA, section 5.3.2):", "",
          table(sweep, "generator size", lambda r: f"{r['generator_multiplier']:g}"),
          "", time_line(ladder + sweep)]
    markdown = "\n".join(md) + "\n"
    runs = sorted({r["encoder_dir"] for r in ladder + sweep if "encoder_dir" in r})
    if runs:  # RUN/final/<module> -> RUN, whose metrics.jsonl holds the held-out curves
        try:
            report["curves"] = plot([Path(r).parents[1] for r in runs],
                                    args.work / "curves.png", x="flops")["out"]
        except ElectraError as e:  # matplotlib missing: the tables still stand
            log(f"no curves: {e}")
    (args.work / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.work / "results.md").write_text(markdown)
    print(json.dumps(report))
    print(markdown)


if __name__ == "__main__":
    main()

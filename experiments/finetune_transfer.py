"""Does pre-training pay downstream? A pre-trained discriminator (`--model`; by default the one
`electra demo` trains) against the same architecture from random initialisation, fine-tuned on
CoLA, SST-2 and RTE.

Each task is fine-tuned `--seeds` times from each starting point with the recipe of Table 5.2
through the library's `electra.finetuning.run.finetune` (linear head on [CLS], lr 3e-4 with
layer-wise decay 0.8 (the Small values, which `tiny` uses; `--layerwise-decay 1.0` switches the
decay off), warm-up 10%, batch 32, 3 epochs or 10 for RTE); the score is the median over
seeds (dissertation section 5.2.4), with mean and standard deviation beside it. The random
baseline is one random initialisation (seed `--init-seed`) of the pre-trained model's config,
with its tokenizer, so only the weights differ; seeds vary the head initialisation, dropout
and batch order for both alike.

Prints a JSON object and a markdown table; both are also written to WORK/results.json and
WORK/results.md, with every fine-tuning run's results.json under WORK/{pretrained,random}/TASK
(the random baseline under `--baseline DIR` instead, when given).
Each run is cached: WORK/START/TASK/job.json records the starting weights' SHA-256 and the
settings, and a run whose record matches is not trained again. So an interrupted benchmark
resumes, a second pre-trained model compared in the same WORK reuses the random baseline
(same architecture, tokenizer and `--init-seed` give the same random weights), and a larger
`--seeds` trains only the seeds not yet run (in WORK/START/TASK/seeds-A-B).

    python -m experiments.finetune_transfer --model runs/demo/pretrain/final/discriminator
    python -m experiments.finetune_transfer            # runs `electra demo` into WORK/demo first
    python -m experiments.finetune_transfer --model DIR --max-train-examples 500 --seeds 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from benchmarks.shared_data import SHARED
from electra.errors import ElectraError
from electra.fileutil import sha256_file, write_atomic
from electra.finetuning.baseline import CONFIG_FILES, random_init
from electra.finetuning.evaluation import primary_key
from electra.finetuning.model_io import check_model_dir
from electra.finetuning.resume import discard_progress
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings
from electra.tasks import get_task
from experiments.common import run_main

STARTS = ("pretrained", "random")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="pre-trained discriminator directory (default: "
                   "run `electra demo` into WORK/demo and use its discriminator)")
    p.add_argument("--work", type=Path, default=Path("runs/finetune_transfer"))
    p.add_argument("--glue", type=Path, default=SHARED / "glue")
    p.add_argument("--tasks", default="CoLA,SST-2,RTE")
    p.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds 1..N per task and "
                   "start (default 3)")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="train on the first K examples of each task (default: all)")
    p.add_argument("--max-train-examples-sst2", type=int, default=10000,
                   help="cap for SST-2 alone (67k examples; default 10000, 0 for all)")
    p.add_argument("--epochs", type=float, help="default: the task's (10 RTE, 3 otherwise)")
    p.add_argument("--max-eval-examples", type=int)
    p.add_argument("--lr", type=float, help="default: 3e-4 (Table 5.2, Small)")
    p.add_argument("--layerwise-decay", type=float, help="default: 0.8 (Table 5.2, Small); 1.0 "
                   "switches it off, which barely-trained lower layers may need")
    p.add_argument("--init-seed", type=int, default=0, help="seed of the random initialisation")
    p.add_argument("--baseline", type=Path, help="where the random-init weights and their "
                   "fine-tuning runs are kept (default: WORK); models of one architecture and "
                   "tokenizer can share one, since a baseline run is cached by the random "
                   "weights' content")
    p.add_argument("--demo-steps", type=int, help="pre-training steps when running the demo")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--jobs", type=int, default=2, help="fine-tunings run at once, one process "
                   "each (default 2: the pre-trained and the random run of a task together)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default "
                   "1: on a shared machine, OpenMP threads waiting for a busy core make "
                   "multi-threaded steps several times slower)")
    p.add_argument("--progress", action="store_true", help="progress bars (with --jobs 1)")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds: at least 1, got {args.seeds}")
    return args


def demo_model(work: Path, steps: int | None) -> Path:
    from electra.demo.run import run_demo

    run_demo(out_dir=work / "demo", steps=steps)
    return work / "demo" / "pretrain" / "final" / "discriminator"


def _set_threads(n: int) -> None:
    torch.set_num_threads(n)


def _finetune_job(model_dir: Path, task: str, glue: Path, out: Path,
                  settings: FinetuneSettings, progress: bool) -> dict:
    """Seeds `settings.seed`.. of one task from one start, reusing every cached block of them
    (see `seed_blocks`) and fine-tuning only the missing seeds, one new block per run of
    consecutive ones."""
    record = job_record(model_dir, task, glue, settings)
    wanted = range(settings.seed, settings.seed + settings.seeds)
    found: dict[int, dict] = {}
    blocks: list[tuple[Path, dict, float]] = []
    for block in seed_blocks(out):
        cached = cached_result(block, record)
        if cached is None:
            continue
        res, seconds = cached
        new = [s for s in res["seeds"] if s["seed"] in wanted and s["seed"] not in found]
        if new:
            found.update((s["seed"], s) for s in new)
            blocks.append((block, res, seconds))
    missing = consecutive_runs([s for s in wanted if s not in found])
    if not missing:
        print(f"==> {task}: {out.parent.name}: cached in "
              f"{', '.join(str(b) for b, _, _ in blocks)}", file=sys.stderr, flush=True)
    out_free = cached_result(out, record) is None  # a matching first block is never overwritten
    for first, last in missing:
        block = out if out_free else out / f"seeds-{first}-{last}"
        out_free = False
        part = dataclasses.replace(settings, seed=first, seeds=last - first + 1)
        print(f"==> {task}: {out.parent.name}: seeds {first}-{last} in {block}",
              file=sys.stderr, flush=True)
        start = time.perf_counter()
        if (block / "job.json").is_file():  # a finished run of another job, replaced
            discard_progress(block)
            (block / "job.json").unlink()  # no stale record beside new results
        res = finetune(model_dir, task, glue, block, part, show_progress=progress)
        seconds = round(time.perf_counter() - start, 1)
        write_atomic(block / "job.json", json.dumps(
            {**record, "settings": dataclasses.asdict(part), "seconds": seconds}, indent=2) + "\n")
        found.update((s["seed"], s) for s in res["seeds"])
        blocks.append((block, res, seconds))
    res = blocks[0][1]
    return {"seeds": [found[s] for s in wanted],
            "results": [str(block / "results.json") for block, _, _ in blocks],
            "train_examples": res["num_train_examples"], "epochs": res["settings"]["epochs"],
            "lr": res["settings"]["lr"], "seconds": round(sum(s for _, _, s in blocks), 1)}


def consecutive_runs(seeds: list[int]) -> list[tuple[int, int]]:
    """[1, 2, 4] -> [(1, 2), (4, 4)]."""
    runs: list[tuple[int, int]] = []
    for s in seeds:
        if runs and runs[-1][1] == s - 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def seed_blocks(out: Path) -> list[Path]:
    """Where one task's fine-tuning runs from one start live: OUT holds the first block of
    seeds, and a later call with more `--seeds` adds only the new ones as OUT/seeds-A-B, so
    going from 3 seeds to 5 costs two runs, not five. (A block's results.json may hold more
    seeds than a call uses; its summary and model/ are that block's own.)"""
    def first_seed(block: Path) -> int:
        return int(block.name.split("-")[1])
    return [out, *sorted(out.glob("seeds-[0-9]*-[0-9]*"), key=first_seed)]


def job_record(model_dir: Path, task: str, glue: Path, settings: FinetuneSettings) -> dict:
    """What a cached fine-tuning run must match: the starting weights, config, tokenizer
    files and the task's data by content (not path), and every setting. (Not the code: after a
    change to fine-tuning itself, use a fresh WORK.)"""
    files = {f"model/{f}": model_dir / f for f in ("model.safetensors", *CONFIG_FILES)}
    files |= {f"data/{f.name}": f for f in sorted((glue / task).glob("*.tsv"))}
    return {"task": task, "settings": dataclasses.asdict(settings),
            "sha256": {k: sha256_file(f) for k, f in files.items() if f.is_file()}}


def cached_result(out: Path, record: dict) -> tuple[dict, float] | None:
    """OUT's results and training seconds if its job.json matches `record` in everything but
    which seeds it ran."""
    job, results = out / "job.json", out / "results.json"
    if not (job.is_file() and results.is_file()):
        return None
    stored = json.loads(job.read_text())
    if _seedless(stored) != _seedless(record):
        return None
    return json.loads(results.read_text()), stored.get("seconds", 0.0)


def _seedless(record: dict) -> dict:
    settings = {k: v for k, v in record["settings"].items() if k not in ("seed", "seeds")}
    return {**{k: v for k, v in record.items() if k != "seconds"}, "settings": settings}


def train_cap(args: argparse.Namespace, task: str) -> int | None:
    caps = [c for c in (args.max_train_examples,
                        args.max_train_examples_sst2 if task == "SST-2" else None) if c]
    return min(caps) if caps else None


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0, "values": values}


def markdown(rows: dict, seeds: int) -> str:
    head = ("| task | metric | pre-trained median | mean ± std | random init median | "
            "mean ± std | Δ median |\n|---|---|---|---|---|---|---|\n")
    lines = []
    for task, r in rows.items():
        p, q = r["pretrained"], r["random"]
        lines.append(f"| {task} | {r['metric']} | {100 * p['median']:.1f} | "
                     f"{100 * p['mean']:.1f} ± {100 * p['std']:.1f} | {100 * q['median']:.1f} | "
                     f"{100 * q['mean']:.1f} ± {100 * q['std']:.1f} | "
                     f"{100 * r['delta_median']:+.1f} |")
    avg = {s: statistics.fmean(r[s]["median"] for r in rows.values()) for s in STARTS}
    lines.append(f"| average | | {100 * avg['pretrained']:.1f} | | {100 * avg['random']:.1f} | "
                 f"| {100 * (avg['pretrained'] - avg['random']):+.1f} |")
    return (head + "\n".join(lines) + f"\n\nScores x100 (CoLA: Matthews correlation; SST-2, RTE: "
            f"accuracy) on the GLUE dev sets; median over {seeds} seed(s).\n")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        get_task(t)  # unknown names fail before any training
        if not (args.glue / t / "train.tsv").is_file():
            raise ElectraError(f"{args.glue / t}: no train.tsv for {t}")
    model = args.model or demo_model(work, args.demo_steps)
    check_model_dir(model)
    baseline = args.baseline or work
    starts = {"pretrained": Path(model),
              "random": random_init(Path(model), baseline / "random_init", args.init_seed)}
    outs = {"pretrained": work / "pretrained", "random": baseline / "random"}

    jobs = [(task_name, start) for task_name in tasks for start in STARTS]
    settings = {t: FinetuneSettings(seeds=args.seeds, epochs=args.epochs, lr=args.lr,
                                    layerwise_decay=args.layerwise_decay,
                                    max_train_examples=train_cap(args, t),
                                    max_eval_examples=args.max_eval_examples,
                                    precision="bf16" if args.bf16 else "fp32")
                for t in tasks}
    calls = [(starts[start], t, args.glue, outs[start] / t, settings[t],
              args.progress and args.jobs == 1) for t, start in jobs]
    if args.jobs == 1:
        _set_threads(args.threads)
        done = [_finetune_job(*c) for c in calls]
    else:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=ctx, initializer=_set_threads,
                                 initargs=(args.threads,)) as pool:
            done = list(pool.map(_finetune_job, *zip(*calls, strict=True)))

    rows: dict = {}
    runs: dict = {s: {} for s in STARTS}
    for (task_name, start), job in zip(jobs, done, strict=True):
        key = primary_key(get_task(task_name))
        row = rows.setdefault(task_name, {"metric": key})
        row[start] = summary([s["scores"][key] for s in job.pop("seeds")])
        runs[start][task_name] = job
    for row in rows.values():
        row["delta_median"] = row["pretrained"]["median"] - row["random"]["median"]

    table = markdown(rows, args.seeds)
    result = {"benchmark": "finetune_transfer", "model": str(model),
              "random_init": str(starts["random"]), "init_seed": args.init_seed,
              "seeds": args.seeds, "layerwise_decay": args.layerwise_decay, "tasks": rows,
              "runs": runs,
              "average_median": {s: statistics.fmean(r[s]["median"] for r in rows.values())
                                 for s in STARTS},
              "jobs": args.jobs, "threads_per_job": args.threads,
              "total_seconds": round(time.perf_counter() - started, 1)}
    (work / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (work / "results.md").write_text(table)
    print(json.dumps(result, indent=2))
    print(table)
    return result


if __name__ == "__main__":
    run_main(main)

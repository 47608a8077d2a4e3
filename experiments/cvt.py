"""Does CVT beat supervised training, and by how much when labeled data is scarce?
(dissertation chapter 4, Table 4.2 and Figure 4.5 left, at CPU scale.)

For each task (CoNLL-2000 chunking, UD English EWT POS and dependency parsing, and WikiGold NER
split by article with `--tasks ner`) and labeled size (all training sentences, and a fixed
random subset such as 1,000), trains the `small` preset supervised (`--no-cvt`) and with CVT on
the same unlabeled corpus and the same vocabulary, and one multi-task CVT model over all the
tasks (4.1.2), for each seed. Scores are dev scores of the EMA model (chunking: CoNLL-2000
test, which has no dev split); medians over seeds, with the gain of CVT over supervised: the
median of the per-seed differences (a seed fixes the initialisation and data order of both
runs; the subset is one for all seeds).

Each run is cached as WORK/results/NAME-STEPS.json and trains under WORK/runs/NAME with
checkpoints, so an interrupted benchmark resumes where it stopped (`--resume` per run). Prints
one JSON object (also written to WORK/summary.json) and writes docs/experiments/cvt.md's table to
WORK/summary.md.

    OMP_NUM_THREADS=1 python -m experiments.cvt            # the full grid, 2 runs at a time
    OMP_NUM_THREADS=1 python -m experiments.cvt --tasks chunk --sizes 1000 --seeds 0 \\
        --methods supervised,cvt --steps 600              # a reduced run
    OMP_NUM_THREADS=1 python -m experiments.cvt --tasks chunk --sizes 1000 --seeds 0 \\
        --methods supervised,cvt --steps 500,1000,2000    # a learning curve, in stages

With several `--steps`, each run trains to the first, is scored, continues from its checkpoint
to the next, and so on (the lr schedule 0.5/(1+0.005*sqrt(t)), the EMA and the data order do
not depend on the total, so a stage ends where a run of that length would); the table reports
the last stage and `curve` every stage.

The full grid is 42 runs (3 tasks x 2 sizes x 3 seeds x supervised/CVT, plus 6 multi-task
runs) of 250 labeled steps each. A multi-task run's labeled steps are shared among its tasks,
so at equal `--steps` each task gets about a third of the labeled updates a single-task run
gets (and every unlabeled step trains all of them): equal steps, not equal labeled updates.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from benchmarks.shared_data import SHARED
from electra.cvt.config import make_config
from electra.cvt.run import TrainSettings, run_train
from electra.errors import ElectraError
from electra.settings import resolve
from experiments.common import cvt_method

DATA = {"chunk": SHARED / "conll2000", "pos": SHARED / "ud_english_ewt",
        "dep": SHARED / "ud_english_ewt"}
METRIC = {"chunk": "f1", "ner": "f1", "pos": "accuracy", "dep": "las"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/cvt_bench"))
    p.add_argument("--tasks", default="chunk,pos,dep")
    p.add_argument("--sizes", default="full,1000", help="labeled sentences per task; 'full' "
                   "for all of them")
    p.add_argument("--methods", default="supervised,cvt,multitask")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", default="250", help="labeled minibatches per run; several "
                   "(500,1000,2000) train each run in stages and score every stage")
    p.add_argument("--preset", default="small", help="CVT preset: small (default, the paper's "
                   "losses), small-cpu (L_CVT at a quarter weight) or paper")
    p.add_argument("--unlabeled", action="append",
                   help=f"unlabeled corpus (default: {SHARED / 'corpus/nltk/reuters.jsonl.gz'})")
    p.add_argument("--max-unlabeled", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--jobs", type=int, default=2, help="runs trained at once (processes)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where each run trains (auto: CUDA where there is one; several --jobs "
                   "share one GPU)")
    p.add_argument("--data", action="append", default=[], metavar="TASK=DIR",
                   help="another data directory for a task (default: ../shared/data)")
    p.add_argument("--set", action="append", default=[], metavar="cvt.KEY=VALUE",
                   help="CVT config override for every run, as `electra cvt` takes it (e.g. "
                   "cvt.lstm1=512)")
    p.add_argument("--word-vectors", type=Path, help="initial word vectors for every run "
                   "(`electra cvt-vectors`; default: random, as in runs without GloVe)")
    args = p.parse_args(argv)
    # ner: WikiGold, split by article (`electra.tasks.document_split`), made under WORK
    args.dirs = {**DATA, "ner": args.work / "wikigold"}
    for item in args.data:
        task, _, path = item.partition("=")
        args.dirs[task] = Path(path)
    args.config = make_config(args.preset)
    resolve({"cvt": args.config}, None, {}, args.set)
    try:
        args.stages = sorted({int(s) for s in args.steps.split(",") if s})
    except ValueError:
        args.stages = []
    if not args.stages or args.stages[0] < 1:
        p.error(f"--steps: positive step counts, got {args.steps!r}")
    return args


def run_one(args, name: str, tasks: list[str], size: str, cvt: bool, seed: int) -> list[dict]:
    """One training run, one result per stage of `args.stages`, each cached: a finished stage
    is read back, not recomputed, and the next one continues from the run's checkpoint."""
    out = args.work / "runs" / name
    data = [str(args.dirs[t]) if len(tasks) == 1 else f"{t}={args.dirs[t]}" for t in tasks]
    entries = []
    for steps in args.stages:
        cache = args.work / "results" / f"{name}-{steps}.json"
        if cache.is_file():
            entries.append(json.loads(cache.read_text()))
            continue
        settings = TrainSettings(
            tasks=tasks, data=data, out=str(out), preset=args.preset, config=args.config,
            unlabeled=args.unlabeled, max_unlabeled=args.max_unlabeled, steps=steps, cvt=cvt,
            seed=seed, train_sentences=None if size == "full" else int(size), save_every=100,
            word_vectors=str(args.word_vectors) if args.word_vectors else None,
            resume=(out / "run.json").is_file(), device=args.device)
        t0 = time.time()
        try:
            res = run_train(settings, progress=False)
        except ElectraError as err:  # e.g. a run already past this stage: name the fix here
            raise ElectraError(f"{err} (experiments/cvt.py: a run dir of WORK trains on from "
                               "its last stage; use a new --work for shorter runs)") from None
        entry = {"name": name, "tasks": tasks, "size": size, "cvt": cvt, "seed": seed,
                 "steps": steps, "device": _device_name(args.device), "scores": res["scores"],
                 "train_seconds": res["train_seconds"],
                 "wall_seconds": round(time.time() - t0, 1),
                 "unlabeled_sentences": res["unlabeled_sentences"],
                 "train_sentences": res["train_sentences"]}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(entry, indent=2) + "\n")
        entries.append(entry)
    return entries


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    args.unlabeled = args.unlabeled or [str(SHARED / "corpus/nltk/reuters.jsonl.gz")]
    tasks = [t for t in args.tasks.split(",") if t]
    if "ner" in tasks and not (args.dirs["ner"] / "split.json").is_file() \
            and args.dirs["ner"] == args.work / "wikigold":
        from electra.tasks.document_split import split_documents

        split_documents("wikigold", SHARED / "wikigold", args.dirs["ner"])
    sizes = [s for s in args.sizes.split(",") if s]
    methods = [m for m in args.methods.split(",") if m]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    t0 = time.time()
    specs = []
    for size in sizes:
        for seed in seeds:
            for task in tasks:
                for method in ("supervised", "cvt"):
                    if method in methods:
                        specs.append((f"{task}-{size}-{method}-s{seed}", [task],
                                      size, method == "cvt", seed))
            if "multitask" in methods and len(tasks) > 1:
                specs.append((f"mt-{'+'.join(tasks)}-{size}-s{seed}", tasks, size,
                              True, seed))
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=torch.set_num_threads,
                                 initargs=(args.threads,)) as pool:
            staged = list(pool.map(run_one, [args] * len(specs), *zip(*specs, strict=True)))
    else:
        staged = [run_one(args, *spec) for spec in specs]
    runs = [stages[-1] for stages in staged]
    table = []
    for task in tasks:
        for size in sizes:
            row: dict = {"task": task, "metric": METRIC[task], "labeled": size}
            raw: dict[str, dict[int, float]] = {}  # method -> seed -> unrounded score
            for method in methods:
                mine = sorted((r for r in runs if r["size"] == size and task in r["tasks"]
                               and cvt_method(r) == method), key=lambda r: r["seed"])
                if mine:
                    row["train_sentences"] = mine[0]["train_sentences"][task]
                    scores = [r["scores"][task][METRIC[task]] for r in mine]
                    raw[method] = dict(zip((r["seed"] for r in mine), scores, strict=True))
                    row[method] = {"median": round(100 * statistics.median(scores), 2),
                                   "runs": [round(100 * s, 2) for s in scores],
                                   "seeds": [r["seed"] for r in mine],
                                   "median_train_seconds": statistics.median(
                                       r["train_seconds"] for r in mine)}
                    if task == "dep":
                        row[method]["median_uas"] = round(100 * statistics.median(
                            r["scores"][task]["uas"] for r in mine), 2)
                    if len(args.stages) > 1:
                        row[method]["curve"] = _curve(staged, task, size, method)
            for method in ("cvt", "multitask"):
                if "supervised" in raw and method in raw:
                    row.update(paired_gain(raw["supervised"], raw[method], method))
            table.append(row)
    summary = {"steps_per_run": args.stages[-1], "stages": args.stages, "preset": args.preset,
               "seeds": seeds,
               "unlabeled": args.unlabeled,
               "unlabeled_sentences": max((r["unlabeled_sentences"] for r in runs), default=0),
               "threads": args.threads, "wall_seconds_this_invocation": round(time.time() - t0),
               "table": table}
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.work / "summary.md").write_text(markdown(table))
    print(json.dumps(summary, indent=2))
    return summary


def paired_gain(supervised: dict[int, float], other: dict[int, float], method: str) -> dict:
    """The gain over supervised training seed by seed (a seed fixes the initialisation and the
    data order of both runs), x100, over the seeds both ran, and its median."""
    seeds = sorted(set(supervised) & set(other))
    if not seeds:
        return {}
    per_seed = [100 * (other[s] - supervised[s]) for s in seeds]
    return {f"{method}_gain": round(statistics.median(per_seed), 2),
            f"{method}_gain_per_seed": [round(g, 2) for g in per_seed],
            f"{method}_gain_seeds": seeds}


LABELS = {"chunk": "chunk (span F1, CoNLL-2000 test)", "pos": "POS (accuracy, UD EWT dev)",
          "dep": "dep (LAS / UAS, UD EWT dev)"}


def markdown(table: list[dict]) -> str:
    """The summary as docs/experiments/cvt.md's table: medians with each seed's score in
    brackets (dep: LAS / UAS, the seeds' LAS), gains as medians of per-seed differences, median
    train seconds."""
    methods = [m for m in ("supervised", "cvt", "multitask") if any(m in r for r in table)]
    names = {"supervised": "supervised", "cvt": "CVT", "multitask": "multi-task CVT"}
    gains = [m for m in ("cvt", "multitask") if any(f"{m}_gain" in r for r in table)]
    head = (["task (metric)", "labeled"] + [names[m] for m in methods]
            + [f"{names[m]} gain" for m in gains]
            + [f"train s ({' / '.join(names[m] for m in methods)})"])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def seeds(values: list[float]) -> str:
        return "(" + " / ".join(f"{v:.2f}" for v in values) + ")"

    for r in table:
        labeled = f"all {r['train_sentences']}" if r["labeled"] == "full" else r["labeled"]
        cells = [LABELS.get(r["task"], r["task"]), labeled]
        for m in methods:
            res = r.get(m)
            if res is None:
                cells.append("-")
                continue
            uas = f" / {res['median_uas']:.2f}" if "median_uas" in res else ""
            cells.append(f"{res['median']:.2f}{uas} {seeds(res['runs'])}")
        for m in gains:
            gain = r.get(f"{m}_gain")
            cells.append("-" if gain is None
                         else f"{gain:+.2f} {seeds(r[f'{m}_gain_per_seed'])}")
        cells.append(" / ".join(f"{r[m]['median_train_seconds']:.0f}" if m in r else "-"
                                for m in methods))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _curve(staged: list[list[dict]], task: str, size: str, method: str) -> dict[str, float]:
    """Median score over seeds at each stage: {steps: median}."""
    at: dict[int, list[float]] = {}
    for stages in staged:
        for r in stages:
            if r["size"] == size and task in r["tasks"] and cvt_method(r) == method:
                at.setdefault(r["steps"], []).append(r["scores"][task][METRIC[task]])
    return {str(k): round(100 * statistics.median(v), 2) for k, v in sorted(at.items())}


def _device_name(device: str) -> str:
    """What a result was trained on: the CPU or the GPU's name."""
    if device == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return torch.cuda.get_device_name()


if __name__ == "__main__":
    main()

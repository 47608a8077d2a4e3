"""BAM on the GLUE tasks we have training data for (dissertation chapter 3, Tables 3.1, 3.4):
Single, Multi, Single->Multi with teacher annealing, and the ablations no annealing (lambda = 0)
and no task sampling, from one encoder, per-task dev scores (median over seeds), their
average, and paired bootstrap tests (Holm-Bonferroni) of each model against Single, Multi and
Single at the multi-task length.

Multi trains longer than Single (section 3.3: 6 epochs instead of 3), so `single-long`, Single
for the multi-task run's `--epochs`, tells a gain from the other tasks apart from one from
training longer.

Every run goes through the library (`electra.multitask.strategies.run_strategy`); the
Single->Multi runs distil from the Single run's best models (its teacher predictions are cached
next to them, so the ablations reuse them). Each run is cached: a run whose WORK/<run>/
results.json exists is not run again, so an interrupted benchmark resumes where it stopped.

`--imdb N` adds IMDB sentiment (labeled reviews from ../shared/data/corpus/aclImdb) as a
fourth task, built as a user task beside links to the GLUE tasks.

Encoder: `--model DIR`, or (default) a randomly initialised `tiny` encoder with a WordPiece
vocabulary trained on the tasks' training sentences (at CPU budgets no pre-trained encoder of
ours has beaten random initialisation; see docs/experiments/bam.md). Prints a JSON object and a
markdown table, also written to WORK/results.json and WORK/results.md.

    python -m experiments.bam                                  # 3 seeds, defaults below
    python -m experiments.bam --seeds 1 --max-train-examples 300 --epochs 3   # a reduced run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.shared_data import SHARED
from electra.multitask.significance import add_significance
from electra.multitask.strategies import SingleOverrides, load_task_results, run_strategy
from electra.multitask.train import MultitaskSettings

# name -> (strategy, teachers from Single?, settings changes)
RUNS = {
    "single": ("single", False, {}),
    "multi": ("multi", False, {}),
    "single-multi": ("multi", True, {}),
    "no-annealing": ("multi", True, {"teacher_annealing": "off"}),
    "no-sampling": ("multi", True, {"task_sampling": False}),
    "single-long": ("single", False, {}),  # for the multi-task epochs
}
LABELS = {"single": "Single", "multi": "Multi", "single-multi": "Single→Multi (annealing)",
          "no-annealing": "Single→Multi, λ = 0", "no-sampling": "Single→Multi, no task sampling",
          "single-long": "Single, multi-task length"}
# the runs every other run is tested against, and their marks in the table
BASELINES = {"single": "ˢ", "multi": "ᵐ", "single-long": "ˡ"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="encoder directory (default: random-init tiny)")
    p.add_argument("--work", type=Path, default=Path("runs/bam"))
    p.add_argument("--glue", type=Path, default=SHARED / "glue")
    p.add_argument("--tasks", default="CoLA,SST-2,RTE")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--max-train-examples", type=int, default=2000,
                   help="first K training examples of each task (default 2000)")
    p.add_argument("--max-eval-examples", type=int)
    p.add_argument("--epochs", type=float, default=6.0,
                   help="multi-task epochs, and single-long's (default 6)")
    p.add_argument("--batch-size", type=int, default=128, help="multi-task batch (default 128)")
    p.add_argument("--single-epochs", type=float, help="default: finetune's (10 RTE, 3 else)")
    p.add_argument("--lr", type=float, help="multi-task lr (default: by size, 3e-4 for tiny)")
    p.add_argument("--single-lr", type=float, help="Single lr (default: finetune's)")
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--length-sort", action="store_true", help="multi-task batches grouped by "
                   "length: faster, but RTE's long inputs then rarely share a batch with others")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--bootstrap-samples", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", default=",".join(RUNS), help="subset of " + ", ".join(RUNS))
    p.add_argument("--imdb", type=int, metavar="N", help="add IMDB sentiment as task IMDB: N "
                   "labeled training reviews (aclImdb/train, balanced by a seeded shuffle) and "
                   "N // 4 dev reviews (aclImdb/test); the GLUE tasks are linked beside it")
    p.add_argument("--corpus-dir", type=Path, default=SHARED / "corpus")
    return p.parse_args(argv)


def imdb_sentiment_task(corpus_dir: Path, out: Path, train: int, dev: int, seed: int = 0
                        ) -> Path:
    """OUT/{train,dev}.jsonl ({"text", "label": pos|neg}) and task.json: the labeled IMDB
    reviews as a user task `electra multitask` reads (DATA/<name>/task.json). Reviews are
    shuffled with `seed` before the first `train` (`dev`) are taken, since the files list the
    positive reviews first; `<br />` becomes a space."""
    import gzip
    import random

    if (out / "task.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for split, source, n in (("train", "train", train), ("dev", "test", dev)):
        with gzip.open(corpus_dir / "aclImdb" / f"{source}.jsonl.gz", "rt",
                       encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        random.Random(seed).shuffle(rows)
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for row in rows[:n]:
                text = row["text"].replace("<br />", " ").replace("<br/>", " ")
                label = row["id"].split("/")[1]  # train/pos/0 -> pos
                f.write(json.dumps({"text": text, "label": label}) + "\n")
    (out / "task.json").write_text(json.dumps({"text_a": "text", "label": "label"}) + "\n")
    return out


def task_folder(args: argparse.Namespace, tasks: list[str]) -> Path:
    """The --data folder `electra multitask` reads: the GLUE folder, or with --imdb one that
    links the GLUE tasks and holds IMDB/."""
    if not args.imdb:
        return args.glue
    data = args.work / "data"
    imdb_sentiment_task(args.corpus_dir, data / "IMDB", args.imdb, args.imdb // 4)
    for name in tasks:
        link = data / name
        if name != "IMDB" and not link.exists():
            link.symlink_to((args.glue / name).resolve(), target_is_directory=True)
    return data


def random_encoder(work: Path, glue: Path, tasks: list[str], vocab_size: int) -> Path:
    """A `tiny` discriminator with fresh weights and a vocabulary of the tasks' train text."""
    from electra.config import PRESETS
    from electra.data.vocab import train_vocab
    from electra.model.encoder import init_weights
    from electra.model.hf import save_pretrained
    from electra.model.networks import Discriminator
    from electra.multitask.train import resolve_task

    out = work / "encoder"
    if (out / "config.json").is_file():
        return out
    corpus = work / "vocab_corpus.txt"
    with open(corpus, "w", encoding="utf-8") as f:
        for name in tasks:
            task, folder = resolve_task(name, glue)
            for ex in task.read(folder, "train"):
                f.write(" ".join(ex.texts) + "\n")
    vocab = train_vocab([corpus], vocab_size, work / "vocab", show_progress=False)
    cfg = dataclasses.replace(PRESETS["tiny"].model,
                              vocab_size=sum(1 for _ in open(vocab / "vocab.txt")))
    torch.manual_seed(0)
    model = Discriminator(cfg)
    init_weights(model, cfg.initializer_range)
    return save_pretrained(model, out, vocab)


def run_one(name: str, args, model: Path, tasks: list[str]) -> tuple[dict, float | None]:
    out = args.work / name
    if (out / "results.json").is_file():
        return json.loads((out / "results.json").read_text()), None  # cached
    strategy, distil, changes = RUNS[name]
    settings = MultitaskSettings(seeds=args.seeds, epochs=args.epochs, batch_size=args.batch_size,
                                 max_train_examples=args.max_train_examples,
                                 max_eval_examples=args.max_eval_examples,
                                 max_seq_len=args.max_seq_len, length_sorted=args.length_sort,
                                 lr=args.lr, **changes)
    teachers = [args.work / "single" / t / "model" for t in tasks] if distil else None
    print(f"==> {name}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    epochs = args.epochs if name == "single-long" else args.single_epochs
    res = run_strategy(model, tasks, args.glue, out, strategy, settings, teachers,
                       SingleOverrides(epochs=epochs, lr=args.single_lr))
    return res, round(time.perf_counter() - start, 1)


def table(rows: dict, tasks: list[str], seeds: int) -> str:
    head = "| model | average | " + " | ".join(tasks) + " |\n|---|---|" + "---|" * len(tasks)
    lines = []
    for name, r in rows.items():
        cells = []
        for t in tasks:
            sig = r.get("significance", {}).get(t, {})
            mark = "".join(v["stars"] + BASELINES[b] for b, v in sig.items() if v["stars"])
            cells.append(f"{r['tasks'][t]:.1f}{mark}")
        lines.append(f"| {LABELS[name]} | {r['average']:.1f} | " + " | ".join(cells) + " |")
    return (head + "\n" + "\n".join(lines) + f"\n\nDev scores x100 (CoLA MCC, others accuracy), "
            f"median over {seeds} seed(s). Stars: significant improvement (paired bootstrap, "
            "Holm-Bonferroni; * p < .05, ** < .01, *** < .001) over Singleˢ, Multiᵐ or Single "
            "at the multi-task lengthˡ.\n")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.imdb and "IMDB" not in tasks:
        tasks.append("IMDB")
    args.glue = task_folder(args, tasks)
    names = [n for n in RUNS if n in args.runs.split(",")]
    if any(RUNS[n][1] for n in names) and "single" not in names:
        names.insert(0, "single")  # the teachers
    model = args.model or random_encoder(args.work, args.glue, tasks, args.vocab_size)
    rows, seconds = {}, {}
    for name in names:
        res, secs = run_one(name, args, model, tasks)
        seconds[name] = secs
        rows[name] = {"tasks": {t: 100 * res["tasks"][t]["median"] for t in tasks},
                      "average": res["average"], "per_seed": {
                          t: [100 * s["scores"][res["tasks"][t]["metric"]] for s in json.loads(
                              Path(res["tasks"][t]["results"]).read_text())["seeds"]]
                          for t in tasks}}
    baselines = {b: load_task_results(args.work / b) for b in BASELINES if b in rows}
    for name in rows:
        others = {b: r for b, r in baselines.items() if b != name}
        if name != "single" and others:
            sig = add_significance(args.work / name, others, args.bootstrap_samples)
            rows[name]["significance"] = sig["significance"]["by_task"]
    result = {"model": str(model), "random_init": args.model is None, "tasks": tasks,
              "seeds": args.seeds, "max_train_examples": args.max_train_examples,
              "epochs": args.epochs, "single_epochs": args.single_epochs, "lr": args.lr,
              "single_lr": args.single_lr, "max_seq_len": args.max_seq_len,
              "batch_size": args.batch_size, "length_sorted": args.length_sort,
              "threads": args.threads, "runs": rows,
              "run_seconds": seconds, "table": table(rows, tasks, args.seeds)}
    (args.work / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.work / "results.md").write_text(result["table"])
    print(json.dumps({k: v for k, v in result.items() if k != "table"}, indent=2))
    print(result["table"], file=sys.stderr)
    return result


if __name__ == "__main__":
    main()

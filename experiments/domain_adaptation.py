"""Does continued pre-training on in-domain text pay? (domain-adaptive pre-training, Gururangan
et al. 2020, with `electra pretrain --init-from`.)

(a) a `tiny-local` model pre-trained on general text (the demo's Wikipedia lead sections,
`--start-steps` steps); (b) (a) continued on in-domain text, unlabeled IMDB movie reviews, for
`--continue-steps` steps; (c) (a) continued for the same steps on the same amount of other
general text (the NLTK corpora: news, books, speeches). All three, and the same architecture
from random weights, are fine-tuned on SST-2 (movie-review sentences: in-domain for IMDB) and
CoLA (general English) with `experiments.finetune_transfer` (3 seeds, medians, layer-wise
decay off as in the CPU recipe). Every stage is cached under WORK, so an interrupted run
resumes where it stopped:

    python -m experiments.domain_adaptation                  # the default study
    python -m experiments.domain_adaptation --table          # what has finished
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.shared_data import SHARED, imdb_reviews
from electra.cli import main as electra
from electra.errors import ElectraError
from electra.fileutil import write_atomic
from experiments import finetune_transfer
from experiments.common import run_main

MODELS = ("start", "in-domain", "general")
LABELS = {"start": "(a) general text only", "in-domain": "(b) + in-domain (IMDB)",
          "general": "(c) + as much general text"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/domain_adaptation"))
    p.add_argument("--start-model", type=Path, help="use this finished run (its OUT or "
                   "OUT/final) as (a) instead of training one, e.g. the CPU recipe's")
    p.add_argument("--start-steps", type=int, default=3000,
                   help="pre-training steps of the general-text model (a) (default 3000)")
    p.add_argument("--continue-steps", type=int, default=1500,
                   help="continued pre-training steps of (b) and (c) (default 1500)")
    p.add_argument("--reviews", type=int, default=25000, help="IMDB reviews for (b)")
    p.add_argument("--reviews-skip", type=int, default=0, help="skip the first N reviews of "
                   "aclImdb/unsup (25000 when (a) is the CPU recipe's model, which read them)")
    p.add_argument("--tasks", default="SST-2,CoLA")
    p.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds (default 3)")
    p.add_argument("--max-train-examples", type=int, help="cap every task's training set "
                   "(default: all, SST-2 capped at 10,000 as in the CPU recipe)")
    p.add_argument("--corpus", nargs="+", help="general text for (a) (default: the demo's "
                   "Wikipedia corpus)")
    p.add_argument("--general", type=Path, nargs="+", help="general text for (c) (default: "
                   "CORPUS_DIR/nltk); (a)'s own text makes (c) 'more of the same'")
    p.add_argument("--corpus-dir", type=Path, default=SHARED / "corpus")
    p.add_argument("--glue", type=Path, default=SHARED / "glue")
    p.add_argument("--table", action="store_true", help="train nothing: tabulate what finished")
    return p.parse_args(argv)


def _run(argv: list[str]) -> None:
    if electra([str(a) for a in argv]) != 0:
        raise ElectraError(f"electra {' '.join(map(str, argv))} failed")


def start_model(args: argparse.Namespace) -> Path:
    """(a): `--start-model`, or the demo's pipeline (vocabulary, data, tiny-local) on general
    text."""
    if args.start_model is not None:
        final = args.start_model / "final" if (args.start_model / "final").is_dir() \
            else args.start_model
        if not (final / "discriminator" / "model.safetensors").is_file():
            raise ElectraError(f"--start-model {args.start_model}: no final/discriminator")
        return final
    out = args.work / "start"
    final = out / "pretrain" / "final"
    if not (final / "discriminator" / "model.safetensors").is_file():
        from electra.demo.run import run_demo

        run_demo(corpus=args.corpus, out_dir=out, steps=args.start_steps, overwrite=True,
                 check=False)  # the study fine-tunes the model itself
    return final


def continued(args: argparse.Namespace, name: str, corpus: list[Path], start: Path) -> Path:
    """(b) or (c): `start` continued on `corpus`, prepared with its own tokenizer."""
    data, run = args.work / f"data-{name}", args.work / name
    if not (data / "manifest.json").is_file():
        _run(["prepare", "--corpus", *corpus, "--tokenizer", start / "discriminator",
              "--out", data, "--heldout-fraction", "0.01", "--overwrite"])
    if not (run / "final" / "discriminator" / "model.safetensors").is_file():
        resume = ["--resume"] if (run / "settings.json").is_file() else []
        _run(["pretrain", "--init-from", start, "--data", data, "--out", run,
              "--steps", args.continue_steps, "--quiet", *resume])
    return run / "final"


def transfer(args: argparse.Namespace, name: str, model: Path) -> dict:
    argv = ["--model", model / "discriminator", "--work", args.work / "finetune" / name,
            "--baseline", args.work / "finetune" / "baseline", "--tasks", args.tasks,
            "--seeds", args.seeds, "--layerwise-decay", "1.0"]
    if args.max_train_examples:
        argv += ["--max-train-examples", args.max_train_examples,
                 "--max-train-examples-sst2", args.max_train_examples]
    return finetune_transfer.main([str(a) for a in argv])


def tabulate(work: Path) -> dict:
    """The finished models' medians per task, their change over (a), and random init."""
    results = {}
    for name in MODELS:
        path = work / "finetune" / name / "results.json"
        if path.is_file():
            results[name] = json.loads(path.read_text())
    if not results:
        return {"models": {}, "markdown": "nothing has finished yet\n"}
    tasks = list(next(iter(results.values()))["tasks"])
    rows = {name: {t: 100 * r["tasks"][t]["pretrained"]["median"] for t in tasks}
            for name, r in results.items()}
    any_result = next(iter(results.values()))
    rows["random"] = {t: 100 * any_result["tasks"][t]["random"]["median"] for t in tasks}
    lines = ["| model | " + " | ".join(tasks) + " | average | Δ vs (a) |",
             "|---" * (len(tasks) + 3) + "|"]
    base = statistics.fmean(rows["start"].values()) if "start" in rows else None
    for name in (*MODELS, "random"):
        if name not in rows:
            continue
        average = statistics.fmean(rows[name].values())
        delta = f"{average - base:+.1f}" if base is not None and name != "start" else ""
        label = LABELS.get(name, "random initialisation")
        lines.append(f"| {label} | " + " | ".join(f"{rows[name][t]:.1f}" for t in tasks)
                     + f" | {average:.1f} | {delta} |")
    return {"models": rows, "markdown": "\n".join(lines) + "\n"}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if not args.table:
        start = start_model(args)
        first, last = args.reviews_skip, args.reviews_skip + args.reviews
        reviews = imdb_reviews(args.corpus_dir, args.work / f"imdb_unsup_{first}-{last}.jsonl",
                               args.reviews, skip=args.reviews_skip)
        models = {"start": start,
                  "in-domain": continued(args, "in-domain", [reviews], start),
                  "general": continued(args, "general",
                                       args.general or [args.corpus_dir / "nltk"], start)}
        for name, model in models.items():
            transfer(args, name, model)
    result = tabulate(args.work)
    write_atomic(args.work / "results.md", result["markdown"])
    print(json.dumps(result["models"], indent=2))
    print(result["markdown"])
    return result


if __name__ == "__main__":
    run_main(main)

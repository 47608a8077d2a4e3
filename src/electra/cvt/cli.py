"""The `electra cvt`, `cvt-evaluate`, `cvt-predict` and `cvt-vectors` subcommands: a command
group (`electra.cli` lists this module and calls its `add_parsers`), so this file owns every CVT
flag; see docs/cvt.md."""

from __future__ import annotations

import json
import sys

from electra.cli_support import LazyHelpStore, add_device_flag, add_precision_flags
from electra.cvt.config import PRESETS
from electra.errors import ElectraError, install_hint
from electra.settings import add_settings_flags


def _run_train(args) -> None:
    from electra.cvt.config import CVTConfig
    from electra.cvt.run import TrainSettings, run_train
    from electra.settings import overrides

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    s = TrainSettings(tasks=tasks, data=args.data, out=args.out, preset=args.preset,
                      overrides=overrides(args.config, args.set, "cvt", CVTConfig()),
                      unlabeled=args.unlabeled or [],
                      max_unlabeled=args.max_unlabeled, text_field=args.text_field,
                      steps=args.steps, epochs=args.epochs, cvt=not args.no_cvt, seed=args.seed,
                      train_sentences=args.train_sentences, word_vectors=args.word_vectors,
                      resume=args.resume, save_every=args.save_every, device=args.device,
                      precision=args.precision or "auto")
    if s.cvt and not s.unlabeled:
        raise ElectraError("CVT needs --unlabeled CORPUS (or --no-cvt for supervised training)")
    show = not args.quiet and sys.stderr.isatty()
    res = run_train(s, progress=show)
    print(json.dumps({"scores": res["scores"], "model": res["model"],
                      "train_seconds": res["train_seconds"]}, indent=2))


def _run_evaluate(args) -> None:
    from electra.cvt.run import run_evaluate

    print(json.dumps(run_evaluate(args.model, args.data, args.out, args.split), indent=2))


def _run_predict(args) -> None:
    from electra.cvt.run import run_predict

    print(json.dumps(run_predict(args.model, args.input, args.output, args.task), indent=2))


def _run_vectors(args) -> None:
    from electra.cvt.word_vectors import train_word_vectors

    print(json.dumps(train_word_vectors(
        args.corpus, args.out, dim=args.dim, epochs=args.epochs, window=args.window,
        min_count=args.min_count, max_sentences=args.max_sentences, seed=args.seed,
        workers=args.workers, text_field=args.text_field), indent=2))


def _tasks_help() -> str:
    from electra.cvt.tasks import task_names

    return (f"comma-separated: {', '.join(task_names())} (several train one multi-task model, "
            f"section 4.1.2)")


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "cvt", help="Cross-View Training: semi-supervised tagging/parsing (chapter 4)",
        description="Train a CNN-BiLSTM tagger/parser on labeled CoNLL data and, alternately, "
        "on unlabeled text with CVT (or supervised only with --no-cvt). Writes OUT/model "
        "(EMA weights), OUT/results.json, OUT/TASK_dev_predictions.{txt,conllu} and "
        "checkpoints under OUT/checkpoints.")
    p.add_argument("--tasks", required=True, action=LazyHelpStore, help=_tasks_help)
    p.add_argument("--data", action="append", required=True, metavar="DIR|TASK=DIR",
                   help="task data directory; repeat as TASK=DIR for several tasks")
    p.add_argument("--unlabeled", action="append", metavar="CORPUS",
                   help="unlabeled text: files or directories `electra prepare` reads "
                   "(repeatable)")
    p.add_argument("--max-unlabeled", type=int, default=200_000,
                   help="use the first N unlabeled sentences (default 200000)")
    p.add_argument("--text-field", default="text", help="JSON-lines field holding the text")
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default="small", help=f"{', '.join(PRESETS)} (default small: "
                   "minutes on a CPU, the paper's losses; small-cpu: small with the CVT loss "
                   "at a quarter weight, ahead sooner at CPU-scale lengths; paper: Table 4.1)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--steps", type=int, help="labeled minibatches (each followed by an "
                   "unlabeled one under CVT)")
    g.add_argument("--epochs", type=float, help="passes over the labeled training data")
    p.add_argument("--no-cvt", action="store_true", help="supervised baseline")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-sentences", type=int, help="a fixed random subset of N labeled "
                   "training sentences per task")
    p.add_argument("--word-vectors", help="GloVe/word2vec text file to initialise word "
                   "embeddings (default: random)")
    add_settings_flags(p, ("cvt",), "cvt.lstm1=512")
    p.add_argument("--save-every", type=int, default=500, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from OUT's latest checkpoint")
    add_device_flag(p)
    add_precision_flags(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_train)

    p = sub.add_parser("cvt-evaluate", help="score a CVT model on a dev or test split",
                       description="Writes OUT/TASK_SPLIT_predictions.{txt,conllu} and "
                       "OUT/results.json.")
    p.add_argument("--model", required=True, help="OUT/model of an `electra cvt` run")
    p.add_argument("--data", action="append", required=True, metavar="DIR|TASK=DIR")
    p.add_argument("--split", default="dev", choices=["dev", "test"])
    p.add_argument("--out", required=True)
    p.set_defaults(func=_run_evaluate)

    p = sub.add_parser("cvt-predict", help="tag or parse a CoNLL / CoNLL-U file",
                       description="Tagging output: `word gold predicted` (conlleval); "
                       "parsing output: CoNLL-U with predicted HEAD and DEPREL.")
    p.add_argument("--model", required=True)
    p.add_argument("--task", help="which task of a multi-task model")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(func=_run_predict)

    p = sub.add_parser("cvt-vectors", help="word2vec vectors for --word-vectors, from unlabeled "
                       f"text (needs {install_hint('vectors')})",
                       description="Train skip-gram word2vec (gensim) on unlabeled text, "
                       "tokenised and normalised as `electra cvt` reads it, and write the "
                       "word2vec text file `electra cvt --word-vectors` takes. The paper starts "
                       "from GloVe (section 4.2); this makes vectors from the text at hand.")
    p.add_argument("--corpus", nargs="+", required=True, metavar="CORPUS",
                   help="files or directories `electra prepare` reads")
    p.add_argument("--out", required=True, help="the vectors file to write")
    p.add_argument("--dim", type=int, default=100,
                   help="vector size: the CVT preset's word_dim (small 100, paper 300)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--min-count", type=int, default=2, help="drop rarer words")
    p.add_argument("--max-sentences", type=int, help="use the first N sentences")
    p.add_argument("--text-field", default="text", help="JSON-lines field holding the text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1,
                   help="training threads (more is faster, but no longer reproducible)")
    p.set_defaults(func=_run_vectors)

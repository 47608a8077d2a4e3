"""The `electra cvt`, `cvt-evaluate`, `cvt-predict` and `cvt-vectors` subcommands: a command
group (`electra.cli` lists this module and calls its `add_parsers`), so this file owns every CVT
flag; see docs/cvt.md."""

from __future__ import annotations

import dataclasses

from electra.cli_support import (
    NON_NEGATIVE,
    POSITIVE,
    LazyHelpStore,
    add_device_flag,
    add_precision_flags,
    show_json_indented,
    show_progress,
)
from electra.command import path
from electra.cvt.config import PRESETS
from electra.errors import ElectraError, install_hint
from electra.runtime.cli import add_report_flags, report_targets
from electra.settings import add_settings_flags

SECTIONS = ("cvt", "train")  # --config / --set sections: CVTConfig, CVTTrainConfig


def train_settings(args):
    """`TrainSettings` from the command line: the preset, then --config, the flags given, then
    --set (`electra.settings`)."""
    from electra.cvt.config import CVTTrainConfig, make_config
    from electra.cvt.run import TrainSettings
    from electra.settings import Sources, apply_preset, config_preset, one_length, resolve

    named = args.preset or config_preset(args.config)
    preset = named or "small"
    sections = {"cvt": make_config(preset), "train": CVTTrainConfig()}
    sources = Sources()
    if named:
        apply_preset({"cvt": sections["cvt"]}, sources, f"--preset {preset}" if args.preset
                     else f"{args.config}: preset")
    flags = args.declared.from_args(args)
    one_length(flags["train"], "steps" if args.steps is not None
               else "epochs" if args.epochs is not None else None, ("steps", "epochs"))
    resolve(sections, args.config, flags, args.set, sources, preset=True,
            flag_names=args.declared.flag_names)
    sections["cvt"].validate()
    sections["train"].validate()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    return TrainSettings(tasks=tasks, data=args.data, out=args.out, preset=preset,
                         config=sections["cvt"], unlabeled=args.unlabeled or [],
                         text_field=args.text_field, word_vectors=args.word_vectors,
                         resume=args.resume, device=args.device, sources=sources,
                         report_to=list(report_targets(args)),
                         **dataclasses.asdict(sections["train"]))


def run_cvt(args) -> dict:
    """`electra cvt`: dev scores, the model folder, the training time."""
    from electra.cvt.run import run_train

    s = train_settings(args)
    if s.cvt and not s.unlabeled:
        raise ElectraError("CVT needs --unlabeled CORPUS (or --no-cvt for supervised training)")
    res = run_train(s, progress=show_progress(args.quiet))
    return {"scores": res["scores"], "model": res["model"],
            "train_seconds": res["train_seconds"]}


def run_cvt_evaluate(args) -> dict:
    from electra.cvt.run import run_evaluate

    return run_evaluate(args.model, args.data, args.out, args.split)


def run_cvt_predict(args) -> dict:
    from electra.cvt.run import run_predict

    return run_predict(args.model, args.input, args.out, args.task)


def run_cvt_vectors(args) -> dict:
    from electra.cvt.word_vectors import train_word_vectors

    return train_word_vectors(
        args.corpus, args.out, dim=args.dim, epochs=args.epochs, window=args.window,
        min_count=args.min_count, max_sentences=args.max_sentences, seed=args.seed,
        workers=args.workers, text_field=args.text_field)


def _tasks_help() -> str:
    from electra.cvt.tasks import task_names

    return (f"comma-separated: {', '.join(task_names())} (several train one multi-task model, "
            f"section 4.1.2)")


def add_parsers(sub) -> None:
    for add in (_add_cvt, _add_evaluate, _add_predict, _add_vectors):
        add(sub)


def _add_cvt(sub) -> None:
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
    p.add_argument("--max-unlabeled", setting="train.max_unlabeled", type=POSITIVE,
                   help="use the first N unlabeled sentences (default 200000)")
    p.add_argument("--text-field", default="text", help="JSON-lines field holding the text")
    p.add_argument("--out", type=path,
                   required=True, help="the run's folder: OUT/model, results.json, "
                   "dev predictions, checkpoints")
    p.add_argument("--preset", choices=tuple(PRESETS), help="small (the default: minutes on "
                   "a CPU, the paper's losses), small-cpu (small with the CVT loss at a quarter "
                   "weight, ahead sooner at CPU-scale lengths) or paper (Table 4.1)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", setting="train.steps",
                   type=POSITIVE, help="labeled minibatches (each followed by an "
                   "unlabeled one under CVT); give --steps or --epochs (or train.steps, "
                   "train.epochs)")
    g.add_argument("--epochs", setting="train.epochs",
                   type=float, help="passes over the labeled training data")
    p.add_argument("--no-cvt", setting="train.cvt",
                   action="store_true", help="supervised baseline (train.cvt)")
    p.add_argument("--seed", setting="train.seed", type=NON_NEGATIVE, help="default 0")
    p.add_argument("--train-sentences", setting="train.train_sentences",
                   type=POSITIVE, help="a fixed random subset of N labeled "
                   "training sentences per task")
    p.add_argument("--word-vectors", type=path, help="GloVe/word2vec text file to initialise word "
                   "embeddings (default: random)")
    add_settings_flags(p, SECTIONS, "train.steps=2000", preset=True)
    p.add_argument("--save-every", setting="train.save_every", type=NON_NEGATIVE,
                   help="steps between checkpoints (default 500)")
    p.add_argument("--resume", nargs="?", const=True, default=False, choices=("auto",),
                   help="continue from OUT's latest checkpoint where OUT holds a run, else "
                   "start it (`--resume auto` says the same, as for pretrain)")
    add_device_flag(p)
    add_precision_flags(p, setting="train.precision")
    add_report_flags(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    p.runs(run_cvt, show_json_indented)


def _add_evaluate(sub) -> None:
    p = sub.add_parser("cvt-evaluate", help="score a CVT model on a dev or test split",
                       description="Writes OUT/TASK_SPLIT_predictions.{txt,conllu} and "
                       "OUT/results.json.")
    p.add_argument("--model", type=path, required=True, help="OUT/model of an `electra cvt` run")
    p.add_argument("--data", action="append", required=True, metavar="DIR|TASK=DIR",
                   help="the task's data directory; repeat as TASK=DIR for a multi-task model")
    p.add_argument("--split", default="dev", choices=["dev", "test"],
                   help="the split to score (default %(default)s)")
    p.add_argument("--out", type=path,
                   required=True, help="folder for results.json and the predictions")
    p.runs(run_cvt_evaluate, show_json_indented)


def _add_predict(sub) -> None:
    p = sub.add_parser("cvt-predict", help="tag or parse a CoNLL / CoNLL-U file",
                       description="Tagging output: `word gold predicted` (conlleval); "
                       "parsing output: CoNLL-U with predicted HEAD and DEPREL.")
    p.add_argument("--model", type=path, required=True, help="OUT/model of an `electra cvt` run")
    p.add_argument("--task", help="which task of a multi-task model")
    p.add_argument("--input", type=path, required=True,
                   help="a CoNLL (tagging) or CoNLL-U (parsing) file")
    p.add_argument("--out", "--output", type=path, dest="out", required=True,
                   help="the predictions file to write (--output: the same, its earlier name)")
    p.runs(run_cvt_predict, show_json_indented)


def _add_vectors(sub) -> None:
    p = sub.add_parser("cvt-vectors", help="word2vec vectors for --word-vectors, from unlabeled "
                       f"text (needs {install_hint('vectors')})",
                       description="Train skip-gram word2vec (gensim) on unlabeled text, "
                       "tokenised and normalised as `electra cvt` reads it, and write the "
                       "word2vec text file `electra cvt --word-vectors` takes. The paper starts "
                       "from GloVe (section 4.2); this makes vectors from the text at hand.")
    p.add_argument("--corpus", type=path, nargs="+", required=True, metavar="CORPUS",
                   help="files or directories `electra prepare` reads")
    p.add_argument("--out", type=path, required=True, help="the vectors file to write")
    p.add_argument("--dim", type=POSITIVE, default=100,
                   help="vector size: the CVT preset's word_dim (small 100, paper 300)")
    p.add_argument("--epochs", type=POSITIVE, default=5,
                   help="passes over the corpus (default %(default)s)")
    p.add_argument("--window", type=POSITIVE, default=5,
                   help="context words each side (default %(default)s)")
    p.add_argument("--min-count", type=POSITIVE, default=2, help="drop rarer words")
    p.add_argument("--max-sentences", type=POSITIVE, help="use the first N sentences")
    p.add_argument("--text-field", default="text", help="JSON-lines field holding the text")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0, help="default %(default)s")
    p.add_argument("--workers", type=POSITIVE, default=1,
                   help="training threads (more is faster, but no longer reproducible)")
    p.runs(run_cvt_vectors, show_json_indented)

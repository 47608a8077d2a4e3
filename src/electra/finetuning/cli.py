"""The fine-tuning commands: `electra finetune`, `evaluate` and `predict` (see
docs/finetuning.md). Each parses its flags and calls one library function, imported when it runs
so that building the parser stays torch-free (`electra.cli_support`). `run_finetune` is the
command's body, which the CLI and the Python API (`electra.api`) share."""

from __future__ import annotations

from dataclasses import dataclass

from electra.cli_support import (
    NON_NEGATIVE,
    POSITIVE,
    LazyHelpStore,
    add_device_flag,
    add_license_flag,
    add_precision_flags,
    add_revision_flag,
    per_size,
    show_json,
    show_progress,
    show_summary,
)
from electra.command import path
from electra.embeddings import EMBEDDING_TASKS, POOLINGS
from electra.errors import EXIT_PREEMPTED
from electra.presets import SIZES, finetune_defaults
from electra.runtime.cli import add_report_flags
from electra.settings import add_settings_flags

SECTIONS = ("finetune",)  # --config / --set sections: FinetuneSettings
GLUE_SUITE = "glue"  # --task glue: every GLUE task (or --glue-tasks), and the GLUE score


def add_parsers(sub) -> None:
    p = sub.add_parser("finetune", help="fine-tune on GLUE, SQuAD, tagging or your own task",
                       description="Fine-tune a pre-trained model N times (--seeds) with the "
                       "recipe of Table 5.2 and write OUT/results.json (per-seed dev scores, "
                       "median, mean, std, settings, prediction files) and OUT/model (best seed). "
                       "The same command run again continues an interrupted run: finished seeds "
                       "are not trained again, the one training continues from its checkpoint.",
                       epilog=f"On SIGTERM or SIGUSR1 the current step is finished, a checkpoint "
                       f"written (OUT/seed<k>/checkpoints), one line printed on stderr, and the "
                       f"exit status is {EXIT_PREEMPTED}; the same command continues exactly. "
                       f"Exit status 1: an error (one line on stderr).")
    _add_finetune_flags(p, train=True)
    p.runs(run_finetune, show_summary)
    p.add_argument("--card-extra", type=path,
                   metavar="FILE", help="a markdown file appended to the model "
                   "card (README.md) of every model written under OUT")
    add_license_flag(p, "every model's under OUT")
    p = sub.add_parser("evaluate", help="score a fine-tuned model on a dev set",
                       description="Evaluate a model written by `electra finetune` (OUT/model) "
                       "and write OUT/results.json and the dev predictions.")
    _add_finetune_flags(p, train=False)
    p.add_argument("--overwrite", action="store_true", help="write into an OUT that holds "
                   "another command's output")
    _add_embedding_flags(p)
    p.runs(run_evaluate, show_json)
    p = sub.add_parser("predict", help="test-set predictions (GLUE TSVs, SQuAD JSON)",
                       description="Predict the test split with a fine-tuned model: GLUE tasks "
                       "give the server's TSV files (CoLA.tsv, MNLI-m.tsv, ...), SQuAD the "
                       "official JSON for DATA/test-v1.1.json (or -v2.0), others JSONL.")
    _add_finetune_flags(p, train=False)
    p.add_argument("--overwrite", action="store_true", help="write into an OUT that holds "
                   "another command's output")
    p.runs(run_predict, show_json)


def _add_embedding_flags(p) -> None:
    """`evaluate --task retrieval|sts`: any model as an embedding model (docs/embeddings.md)."""
    p.add_argument("--split", help="retrieval and sts: the split scored (default: test for "
                   "retrieval, qrels/test.tsv; dev for sts)")
    p.add_argument("--pooling", choices=POOLINGS, default="mean", help="retrieval and sts: how "
                   "token states become one vector: mean (default), cls or last; vectors are "
                   "normalised, so scores are cosines")


def _task_help(train: bool) -> str:
    from electra.tasks import task_names

    return (f"{', '.join(task_names())}, or {GLUE_SUITE} (all of GLUE)"
            + ("" if train else f" (default: the model's); or {', '.join(EMBEDDING_TASKS)}: "
               "the model as an embedding model (docs/embeddings.md)"))


def _add_finetune_flags(p, train: bool) -> None:
    p.add_argument("--model", type=path,
                   required=True, help="model directory (HF ELECTRA/BERT format) "
                   "or a Hugging Face Hub id, ORG/NAME (from the Hub's cache; docs/finetuning.md)")
    add_revision_flag(p)
    p.add_argument("--task", action=LazyHelpStore, required=train,
                   help=lambda: _task_help(train))
    p.add_argument("--data", type=path,
                   required=True, help="data directory (GLUE: the folder holding "
                   "CoLA/, SST-2/, ...; or one task's folder; SQuAD: {train,dev,test}-v1.1.json "
                   "or -v2.0.json, .gz ok), or a Hugging Face Hub dataset id, ORG/NAME (from the "
                   "Hub's cache; docs/finetuning.md)")
    p.add_argument("--data-config", metavar="NAME", help="read DATA/NAME/: a config of a Hub "
                   "dataset (nyu-mll/glue: sst2, mnli, ...), local or by id (default: DATA, and "
                   "the task's own config folders where it has them, as GLUE's)")
    p.add_argument("--data-revision", metavar="REV", help="with a Hub dataset id as --data: its "
                   "branch, tag or commit (default: main)")
    p.add_argument("--out", type=path,
                   required=True, help="folder for results.json (and, fine-tuning, "
                   "seed<k>/ and the best seed's model, OUT/model)")
    p.add_argument("--max-seq-len", setting="finetune.max_seq_len",
                   type=POSITIVE, help="default: 128 (384 for SQuAD), or the "
                   "fine-tuned model's")
    p.add_argument("--eval-batch-size", setting="finetune.eval_batch_size",
                   type=POSITIVE, help="default 128")
    p.add_argument("--max-eval-examples", setting="finetune.max_eval_examples",
                   type=POSITIVE, help="score only the first K dev examples")
    add_precision_flags(p, setting="finetune.precision")
    add_device_flag(p, default=None, setting="finetune.device")
    if train:
        _add_training_flags(p)


def _add_training_flags(p) -> None:
    """`finetune`'s own: seeds, the recipe, user tasks' columns, SQuAD's windows, logging."""
    p.add_argument("--seeds", setting="finetune.seeds",
                   type=POSITIVE, help="fine-tunings from the same checkpoint; "
                   "results report their median (default 1; the papers use 10)")
    p.add_argument("--seed", setting="finetune.seed",
                   type=NON_NEGATIVE, help="first seed (default 1)")
    p.add_argument("--epochs", setting="finetune.epochs",
                   type=float, help="default: 10 for RTE and STS-B, 2 for SQuAD, "
                   "3 otherwise")
    p.add_argument("--max-train-examples", setting="finetune.max_train_examples",
                   type=POSITIVE, help="train on the first K examples")
    p.add_argument("--lr", setting="finetune.lr", type=float,
                   help=f"default by size: {per_size(finetune_defaults, 0)} (Table 5.2)")
    p.add_argument("--layerwise-decay", setting="finetune.layerwise_decay", type=float,
                   help=f"default by size: {per_size(finetune_defaults, 1)}")
    p.add_argument("--lr-decay-style", setting="finetune.lr_decay_style",
                   choices=["dissertation", "official"],
                   help="layer depths as the dissertation defines them (head = layer 0; the "
                   "default) or as the official code (an extra pooler slot); see "
                   "electra.finetuning.optim")
    p.add_argument("--size", setting="finetune.size", choices=SIZES,
                   help="model size for the defaults (default: from the hidden size)")
    p.add_argument("--batch-size", setting="finetune.batch_size",
                   type=POSITIVE, help="examples per optimizer step (default 32)")
    p.add_argument("--grad-accum", setting="finetune.grad_accum",
                   type=POSITIVE, help="micro-batches per optimizer step, each "
                   "batch-size / grad-accum examples: the same training in less memory "
                   "(default 1)")
    p.add_argument("--save-every", setting="finetune.save_every",
                   type=NON_NEGATIVE, help="steps between checkpoints of a seed's "
                   "training, which the same command run again continues from (default 1000; "
                   "0: only on SIGTERM/SIGUSR1)")
    p.add_argument("--no-length-sort", setting="finetune.length_sorted",
                   action="store_true", help="training batches in plain "
                   "random order (default: grouped by length, less padding)")
    p.add_argument("--warmup-fraction", setting="finetune.warmup_fraction",
                   type=float, help="default 0.1")
    p.add_argument("--weight-decay", setting="finetune.weight_decay",
                   type=float, help="default 0.0")
    p.add_argument("--save-all-seeds", setting="finetune.save_all_seeds", action="store_true",
                   help="keep every seed's model (default: only the best, OUT/model)")
    p.add_argument("--glue-tasks", help="with --task glue: comma-separated subset")
    p.add_argument("--text-a", help="user task: column/field of the first text")
    p.add_argument("--text-b", help="user task: column/field of the second text (optional)")
    p.add_argument("--label", help="user task: column/field of the label")
    p.add_argument("--label-type", choices=["class", "real"], default="class",
                   help="user task: classification or regression")
    p.add_argument("--label-names", help="class names by class id for data in the Hub's "
                   "layouts whose features lack them: NAME,NAME,... or a JSON file (a list, "
                   "or an id2label object); saved with the model")
    p.add_argument("--doc-stride", type=POSITIVE,
                   help="SQuAD: tokens between windows (default 128)")
    p.add_argument("--max-query-len", type=POSITIVE,
                   help="SQuAD: question tokens kept (default 64)")
    p.add_argument("--log-every", setting="finetune.log_every", type=POSITIVE,
                   help="steps between lines of OUT/seed<k>/metrics.jsonl (default 10)")
    add_report_flags(p, "OUT/tensorboard/seed<k>/", section="finetune")
    p.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    add_settings_flags(p, SECTIONS, "finetune.warmup_fraction=0.06")


def _finetune_settings(args, train: bool):
    """The run's `FinetuneSettings` and where each value came from: defaults, then
    (`finetune` only) --config, the flags given, then --set (`electra.settings`)."""
    from electra.finetuning.settings import FinetuneSettings
    from electra.settings import resolve

    settings = FinetuneSettings()
    flags = args.declared.from_args(args)
    if not train:
        return settings, resolve({"finetune": settings}, None, flags, [])
    return settings, resolve({"finetune": settings}, args.config, flags, args.set,
                             flag_names=args.declared.flag_names)


def _user_options(args) -> dict:
    return {"text_a": args.text_a, "text_b": args.text_b, "label": args.label,
            "label_type": args.label_type}


@dataclass(frozen=True)
class FinetuneResult:
    """What `electra finetune` wrote: OUT, its results.json (`results`: the file's content,
    `results_file`: its path), the best seed's model directory (`model`; None for `--task
    glue`, whose tasks each have theirs under OUT/TASK/), and `summary`, which the command
    prints."""

    out: str
    task: str
    results: dict
    results_file: str
    model: str | None
    summary: dict

    @property
    def median(self) -> dict:
        """Each metric's median over the seeds; for `--task glue`, each task's primary one."""
        return self.summary["median"] if self.model is not None else self.summary["tasks"]

    @property
    def glue_score(self) -> float | None:
        return self.summary.get("glue_score")


def run_finetune(args) -> FinetuneResult:
    from electra.finetuning.run import finetune
    from electra.model.card import add_card_extra, read_card_extra, read_card_license
    from electra.tasks import get_task
    from electra.tasks.hub_layout import parse_label_names
    from electra.tasks.squad import VERSIONS as SQUAD_VERSIONS

    settings, sources = _finetune_settings(args, train=True)
    extra = read_card_extra(args.card_extra)
    card_license = read_card_license(args.license)
    progress = show_progress(args.quiet)
    if args.task.lower() == GLUE_SUITE:
        from electra.finetuning.glue_suite import run_glue

        names = args.glue_tasks.split(",") if args.glue_tasks else None
        res = run_glue(args.model, args.data, args.out, settings, names, progress, sources,
                       revision=args.revision, data_config=args.data_config,
                       data_revision=args.data_revision)
        add_card_extra(args.out, extra, card_license)
        return FinetuneResult(
            args.out, GLUE_SUITE, res, f"{args.out}/results.json", None,
            {"glue_score": res["glue_score"],
             "tasks": {k: v["median"] for k, v in res["tasks"].items()}})
    options = _user_options(args) if args.task.lower() == "user" else {}
    if args.task.lower() in SQUAD_VERSIONS:
        options = {"doc_stride": args.doc_stride, "max_query_len": args.max_query_len}
    task = get_task(args.task, **options, label_names=parse_label_names(args.label_names))
    res = finetune(args.model, args.task, args.data, args.out, settings, progress, task=task,
                   sources=sources, revision=args.revision, data_config=args.data_config,
                   data_revision=args.data_revision)
    add_card_extra(args.out, extra, card_license)
    return FinetuneResult(args.out, res["task"], res, f"{args.out}/results.json",
                          res["best_model"],
                          {"task": res["task"], "median": res["median"],
                           "results": f"{args.out}/results.json"})


def run_evaluate(args) -> dict:
    """`electra evaluate`: the task and its dev scores."""
    if args.task in EMBEDDING_TASKS:
        return _evaluate_embeddings(args)
    from electra.finetuning.predict import evaluate

    res = evaluate(args.model, args.data, args.out, args.task,
                   _finetune_settings(args, train=False)[0], args.max_seq_len,
                   revision=args.revision, data_config=args.data_config,
                   data_revision=args.data_revision, overwrite=args.overwrite)
    return {"task": res["task"], "scores": res["scores"]}


def run_predict(args) -> dict:
    """`electra predict`: the prediction files written."""
    from electra.finetuning.predict import predict

    written = predict(args.model, args.data, args.out, args.task,
                      _finetune_settings(args, train=False)[0], args.max_seq_len,
                      revision=args.revision, data_config=args.data_config,
                      data_revision=args.data_revision, overwrite=args.overwrite)
    return {"written": written}


def _evaluate_embeddings(args) -> dict:
    from electra.embeddings.encode import Pooling
    from electra.embeddings.evaluate import EmbeddingEval, evaluate_embeddings

    settings = EmbeddingEval(Pooling(args.pooling), args.max_seq_len, args.eval_batch_size,
                             args.max_eval_examples, args.device or "auto")
    res = evaluate_embeddings(args.model, args.task, args.data, args.out, args.split, settings,
                              revision=args.revision, data_revision=args.data_revision,
                              overwrite=args.overwrite)
    return {"task": res["task"], "scores": res["scores"]}

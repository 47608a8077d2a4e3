"""The `electra multitask` subcommand: flags -> `run_strategy`, and significance against
baseline runs (`--compare`). A command group: `electra.cli` lists this module and calls its
`add_parsers`; see docs/bam.md."""

from __future__ import annotations

from pathlib import Path

from electra.cli_support import (
    NON_NEGATIVE,
    POSITIVE,
    add_device_flag,
    add_precision_flags,
    add_revision_flag,
    per_size,
    show_json,
    show_progress,
)
from electra.command import path
from electra.errors import ElectraError
from electra.presets import SIZES, multitask_defaults
from electra.runtime.cli import add_report_flags
from electra.settings import add_settings_flags

SECTIONS = ("multitask",)  # --config / --set sections: MultitaskSettings


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "multitask", help="BAM: multi-task fine-tuning, distillation, teacher annealing",
        description="Fine-tune one shared encoder on several tasks at once (dissertation "
        "chapter 3, BAM): one head per task, tasks mixed within minibatches, sampling "
        "proportional to |D|^0.75, the recipe of section 3.3 (layer-wise LR decay 0.9, lr 1e-4 "
        "for base, batch 128, 6 epochs). --strategy picks Single, Multi, Single-Single, "
        "Multi-Multi, Single-Multi or repeated rounds; --teachers distils from fine-tuned "
        "models. Writes OUT/results.json, OUT/<task>/results.json and OUT/model.")
    p.add_argument("--model", type=path,
                   required=True, help="pre-trained model directory (HF format) or "
                   "a Hugging Face Hub id, ORG/NAME (from the Hub's cache)")
    add_revision_flag(p)
    p.add_argument("--tasks", required=True, help="comma-separated: GLUE names, or folders "
                   "DATA/<name>/ with a task.json naming their columns")
    p.add_argument("--data", type=path,
                   required=True, help="GLUE layout: DATA/CoLA/, DATA/SST-2/, ...")
    p.add_argument("--out", type=path, required=True, help="folder for each stage's models and "
                   "results.json")
    p.add_argument("--strategy", default="multi", help="single, multi, single-single, "
                   "multi-multi, single-multi, single-multi-single-multi, ... (default multi)")
    p.add_argument("--teachers", help="comma-separated fine-tuned model directories the first "
                   "stage distils from, matched to tasks by the task each recorded")
    p.add_argument("--teacher-annealing", setting="multitask.teacher_annealing",
                   help="on: lambda linear 0 -> 1 "
                   "(default); off: lambda = 0 (pure distillation); or a fixed lambda")
    p.add_argument("--no-task-sampling", setting="multitask.task_sampling",
                   action="store_true", help="every example once per "
                   "epoch, shuffled together (default: sample tasks proportional to |D|^0.75)")
    p.add_argument("--sampling-exponent", setting="multitask.sampling_exponent",
                   type=float, help="default 0.75")
    p.add_argument("--seeds", setting="multitask.seeds", type=POSITIVE, help="default 1")
    p.add_argument("--seed", setting="multitask.seed",
                   type=NON_NEGATIVE, help="first seed (default 1)")
    p.add_argument("--epochs", setting="multitask.epochs",
                   type=float, help="multi-task epochs (default 6)")
    p.add_argument("--batch-size", setting="multitask.batch_size",
                   type=POSITIVE, help="multi-task batch (default 128)")
    p.add_argument("--grad-accum", setting="multitask.grad_accum",
                   type=POSITIVE, help="micro-batches per optimizer step, in every "
                   "stage (default 1; the batch sizes stay the examples per step)")
    p.add_argument("--save-every", setting="multitask.save_every",
                   type=NON_NEGATIVE, help="steps between checkpoints of a seed's "
                   "training; the same command run again continues (default 1000; 0: only on "
                   "SIGTERM/SIGUSR1)")
    p.add_argument("--lr", setting="multitask.lr",
                   type=float, help=f"multi-task lr; default by size: "
                   f"{per_size(multitask_defaults, 0)}")
    p.add_argument("--layerwise-decay", setting="multitask.layerwise_decay",
                   type=float, help=f"multi-task layer-wise LR decay; "
                   f"default by size: {per_size(multitask_defaults, 1)}")
    p.add_argument("--single-epochs", type=float, help="Single stages: default finetune's")
    p.add_argument("--single-batch-size", type=POSITIVE, help="Single stages: default 32")
    p.add_argument("--single-lr", type=float, help="Single stages: default finetune's")
    p.add_argument("--size", setting="multitask.size", choices=SIZES,
                   help="model size for the defaults (default: from the hidden size)")
    p.add_argument("--max-train-examples", setting="multitask.max_train_examples",
                   type=POSITIVE, help="the first K examples of each task")
    p.add_argument("--max-eval-examples", setting="multitask.max_eval_examples", type=POSITIVE,
                   help="score only the first K dev examples of each task")
    p.add_argument("--max-seq-len", setting="multitask.max_seq_len", type=POSITIVE,
                   help="default 128")
    p.add_argument("--eval-batch-size", setting="multitask.eval_batch_size",
                   type=POSITIVE, help="default 128")
    p.add_argument("--length-sort", setting="multitask.length_sorted",
                   action="store_true", help="group training batches by "
                   "length (faster; but tasks with long inputs then get batches of their own)")
    p.add_argument("--compare", help="baselines for significance, NAME=DIR,...: finetune or "
                   "multitask output directories (paired bootstrap, Holm-Bonferroni)")
    p.add_argument("--bootstrap-samples", type=POSITIVE, default=1000,
                   help="with --compare: paired bootstrap resamples (default %(default)s)")
    add_precision_flags(p, setting="multitask.precision")
    add_device_flag(p, default=None, setting="multitask.device")
    p.add_argument("--save-all-seeds", setting="multitask.save_all_seeds", action="store_true",
                   help="keep every seed's model (default: only the best)")
    p.add_argument("--log-every", setting="multitask.log_every", type=POSITIVE, help="default 10")
    add_report_flags(p, "each stage's tensorboard/seed<k>/", section="multitask")
    p.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    add_settings_flags(p, SECTIONS, "multitask.sampling_exponent=1.0")
    p.runs(run_multitask, show_json)


def parse_compare(text: str | None) -> dict[str, Path]:
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ElectraError(f"--compare takes NAME=DIR,..., got {item!r}")
        out[name] = Path(path)
    return out


def run_multitask(args) -> dict:
    """`electra multitask`: the average, the GLUE score and each task's median."""
    from electra.multitask.strategies import SingleOverrides, load_task_results, run_strategy
    from electra.multitask.train import MultitaskSettings
    from electra.settings import resolve

    settings = MultitaskSettings()
    sources = resolve({"multitask": settings}, args.config, args.declared.from_args(args),
                      args.set, flag_names=args.declared.flag_names)
    baselines = {name: load_task_results(d) for name, d in parse_compare(args.compare).items()}
    teachers = [t for t in (args.teachers or "").split(",") if t]
    single = SingleOverrides(lr=args.single_lr, epochs=args.single_epochs,
                             batch_size=args.single_batch_size)
    res = run_strategy(args.model, [t for t in args.tasks.split(",") if t], args.data, args.out,
                       args.strategy, settings, teachers, single,
                       show_progress(args.quiet), sources, revision=args.revision)
    if baselines:
        from electra.multitask.significance import add_significance

        res = add_significance(Path(args.out), baselines, args.bootstrap_samples)
    return {"average": res["average"], "glue_score": res["glue_score"],
            "tasks": {k: v["median"] for k, v in res["tasks"].items()},
            "results": f"{args.out}/results.json"}

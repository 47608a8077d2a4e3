"""`electra export`: a model directory as ONNX (checked with ONNX Runtime), or one task of a
multi-task model as its own `transformers` directory. Directories electra writes already load
in `transformers` as they are (docs/interoperability.md). `run_export` is the command's body,
which the CLI and the Python API (`electra.api`) share."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from electra.cli_support import NON_NEGATIVE, add_license_flag, add_revision_flag
from electra.command import path
from electra.embeddings import POOLINGS


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "export", help="ONNX graphs (fp32, int8) and single-task directories for serving",
        description="Export MODEL (a discriminator, generator, encoder or fine-tuned model "
        "directory) for serving. --onnx OUT writes OUT/model.onnx with dynamic batch and "
        "sequence axes, checked against PyTorch with ONNX Runtime (the largest difference is "
        "printed; nothing is written beyond 1e-4), with the model's config.json (labels) and "
        "tokenizer files. --hf OUT writes a fine-tuned model, or one task of a multi-task model "
        "(--task), as a directory that AutoModelFor... and pipeline(...) load (also "
        "rewriting a directory from an earlier electra in the current layout). A "
        "pre-training checkpoint (OUT/checkpoints/step_N, or a run's OUT with --step N) is "
        "written as the run's end writes OUT/final/: to OUT/exports/step_N/ by default, to "
        "--hf DEST, or its discriminator with --onnx.")
    p.add_argument("model", metavar="MODEL", nargs="?", help="model directory written by "
                   "electra, or a pre-training checkpoint, or a Hugging Face Hub id ORG/NAME "
                   "(from the Hub's cache); or give it as --model, as the other commands do")
    p.add_argument("--model", type=path, dest="alias_model", metavar="MODEL", help="= MODEL")
    add_revision_flag(p, "MODEL")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--onnx", type=path, metavar="OUT", help="write an ONNX export to OUT")
    target.add_argument("--hf", type=path,
                        metavar="OUT", help="write a fine-tuned model's transformers "
                        "directory to OUT (one task's, with --task), or a checkpoint's "
                        "networks (OUT/discriminator, ...)")
    target.add_argument("--sentence-transformers", type=path, metavar="OUT",
                        help="write MODEL as a sentence-transformers embedding model to OUT: "
                        "SentenceTransformer(OUT) loads it and gives `electra evaluate --task "
                        "retrieval|sts`'s vectors (--pooling; docs/embeddings.md)")
    p.add_argument("--pooling", choices=POOLINGS, default="mean", help="with "
                   "--sentence-transformers: mean (default), cls or last; normalised vectors")
    p.add_argument("--step", type=NON_NEGATIVE, metavar="N",
                   help="MODEL is a pre-training run's OUT: export its checkpoint of step N")
    p.add_argument("--task", help="which head of a multi-task model")
    p.add_argument("--int8", action="store_true", help="with --onnx: also "
                   "OUT/model.int8.onnx, dynamically quantised (int8 weights)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--card-extra", type=path,
                   metavar="FILE", help="a markdown file appended to OUT's "
                   "model card (README.md)")
    add_license_flag(p, "OUT's")
    p.runs(run_export, _show_export)


@dataclass(frozen=True)
class ExportResult:
    """What `electra export` wrote: the directory and its kind ("onnx" or "hf"); for ONNX,
    its export.json report (inputs, outputs, differences from PyTorch)."""

    out: str
    kind: str
    report: dict | None = None


def _show_export(result: ExportResult) -> None:
    """The folder, or the ONNX check."""
    if result.kind != "onnx":
        print(result.out)
    else:
        print(result.report["summary"], file=sys.stderr)


def run_export(args) -> ExportResult:
    from electra.errors import ElectraError
    from electra.model.card import read_card_extra, read_card_license

    if (args.model is None) == (getattr(args, "alias_model", None) is None):
        raise ElectraError("give the model once: as MODEL or as --model")
    args.model = args.model if args.model is not None else args.alias_model
    if args.int8 and not args.onnx:
        raise ElectraError("--int8 goes with --onnx")
    from electra.pretraining.checkpoint_export import (
        checkpoint_dir,
        export_checkpoint,
        is_checkpoint,
        main_network_dir,
    )

    extra = read_card_extra(args.card_extra)
    card_license = read_card_license(args.license)
    if args.step is not None or is_checkpoint(args.model):
        checkpoint = checkpoint_dir(args.model, args.step)
        if not args.onnx:
            return ExportResult(str(export_checkpoint(checkpoint, args.hf,
                                                      overwrite=args.overwrite,
                                                      card_extra=extra,
                                                      card_license=card_license)), "hf")
        args.model = str(main_network_dir(checkpoint))
    elif not (args.onnx or args.hf or args.sentence_transformers):
        raise ElectraError("give --onnx OUT, --hf OUT or --sentence-transformers OUT (or a "
                           "pre-training checkpoint as MODEL)")
    if args.sentence_transformers:
        from electra.embeddings.encode import Pooling
        from electra.embeddings.st_folder import write_st_folder

        return ExportResult(str(write_st_folder(args.model, args.sentence_transformers,
                                                Pooling(args.pooling), revision=args.revision,
                                                overwrite=args.overwrite)),
                            "sentence-transformers")
    if args.onnx:
        from electra.exporting.onnx import export_onnx

        report = export_onnx(args.model, args.onnx, task=args.task, int8=args.int8,
                             overwrite=args.overwrite, card_extra=extra, revision=args.revision,
                             card_license=card_license)
        return ExportResult(str(args.onnx), "onnx", report)
    from electra.exporting.serving import write_task_dir

    return ExportResult(str(write_task_dir(args.model, args.task, args.hf,
                                           overwrite=args.overwrite, card_extra=extra,
                                           revision=args.revision,
                                           card_license=card_license)), "hf")

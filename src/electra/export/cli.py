"""`electra export`: a model directory as ONNX (checked with ONNX Runtime), or one task of a
multi-task model as its own `transformers` directory. Directories electra writes already load
in `transformers` as they are (docs/interoperability.md). `run_export` is the command's body,
which the CLI and the Python API (`electra.api`) share."""

from __future__ import annotations

from dataclasses import dataclass


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "export", help="ONNX graphs (fp32, int8) and single-task directories for serving",
        description="Export MODEL (a discriminator, generator, encoder or fine-tuned model "
        "directory) for serving. --onnx OUT writes OUT/model.onnx with dynamic batch and "
        "sequence axes, checked against PyTorch with ONNX Runtime (the largest difference is "
        "printed; nothing is written beyond 1e-4), with the model's config.json (labels) and "
        "tokenizer files. --hf OUT writes a fine-tuned model, or one task of a multi-task model "
        "(--task), as a directory that AutoModelFor... and pipeline(...) load (also "
        "rewriting a directory from an earlier electra in the current layout).")
    p.add_argument("model", metavar="MODEL", help="model directory written by electra")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--onnx", metavar="OUT", help="write an ONNX export to OUT")
    target.add_argument("--hf", metavar="OUT", help="write a fine-tuned model's transformers "
                        "directory to OUT (one task's, with --task)")
    p.add_argument("--task", help="which head of a multi-task model")
    p.add_argument("--int8", action="store_true", help="with --onnx: also "
                   "OUT/model.int8.onnx, dynamically quantised (int8 weights)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.set_defaults(func=_run)


@dataclass(frozen=True)
class ExportResult:
    """What `electra export` wrote: the directory and its kind ("onnx" or "hf"); for ONNX,
    its export.json report (inputs, outputs, differences from PyTorch)."""

    out: str
    kind: str
    report: dict | None = None


def _run(args) -> None:
    result = run_export(args)
    if result.kind == "hf":
        print(result.out)


def run_export(args) -> ExportResult:
    from electra.errors import ElectraError

    if args.int8 and not args.onnx:
        raise ElectraError("--int8 goes with --onnx")
    if args.onnx:
        from electra.export.onnx import export_onnx

        report = export_onnx(args.model, args.onnx, task=args.task, int8=args.int8,
                             overwrite=args.overwrite)
        return ExportResult(str(args.onnx), "onnx", report)
    from electra.export.serving import write_task_dir

    return ExportResult(str(write_task_dir(args.model, args.task, args.hf,
                                           overwrite=args.overwrite)), "hf")

"""`electra plot`: training curves of any run's metrics log (pre-training, fine-tuning).
Matplotlib is imported when it runs. And the flags every training command shares for where its
numbers go (`--report-to`, `--tensorboard`)."""

from __future__ import annotations

import argparse

from electra.cli_support import show_json
from electra.command import path
from electra.errors import ElectraError, install_hint
from electra.runtime.sinks import SINKS, parse_report_to


def _report_to(text: str) -> tuple[str, ...]:
    try:
        return parse_report_to(text)
    except ElectraError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--report-to: ")) from None


_report_to.comma_list = True  # the Python API joins a list of names with commas
_report_to.annotation = str | list[str]


def add_report_flags(p: argparse.ArgumentParser, tensorboard_dir: str = "OUT/tensorboard/",
                     section: str | None = None) -> None:
    """`--report-to` and its shorthand `--tensorboard`; `report_targets(args)` reads both, or
    they are the fields `report_to` and `tensorboard` of settings `section`."""
    def setting(field: str) -> str | None:
        return f"{section}.{field}" if section else None

    p.add_argument("--report-to", type=_report_to, default=(), metavar="SINKS",
                   setting=setting("report_to"),
                   help=f"also send the settings, every logged row and the final results to "
                   f"these, comma-separated: {', '.join(SINKS)} (default: none; wandb and "
                   f"mlflow need {install_hint('tracking')}; docs/pretraining.md, "
                   "experiment tracking)")
    p.add_argument("--tensorboard", action="store_true", setting=setting("tensorboard"),
                   help=f"= --report-to tensorboard: "
                   f"event files under {tensorboard_dir} (needs: {install_hint('plot')})")


def report_targets(args: argparse.Namespace) -> tuple[str, ...]:
    """The sinks a command's flags ask for."""
    names = [*args.report_to, *(["tensorboard"] if args.tensorboard else [])]
    return tuple(dict.fromkeys(names))


def add_parsers(sub) -> None:
    _add_plot(sub)


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="training curves of runs, against steps and FLOPs",
                       description="Draw each metric of RUN/metrics.jsonl (pretrain OUT, or a "
                       "finetune OUT's seed<k>/) in its own subplot, several runs overlaid, "
                       "against steps and against training FLOPs. Needs matplotlib "
                       f"({install_hint('plot')}).")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or metrics.jsonl)")
    p.add_argument("--out", type=path, required=True, help="image file: .png, .pdf or .svg")
    p.add_argument("--x", choices=["step", "flops", "both"], default="both",
                   help="x axis (default both: each metric against steps and, beside it, FLOPs)")
    p.add_argument("--metrics", help="comma-separated keys (default: every loss, accuracy, "
                   "AUC and dev score present)")
    p.runs(run_plot, show_json)


def run_plot(args) -> dict:
    """`electra plot`: the image written and the metrics drawn."""
    from electra.runtime.plot import plot

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    return plot(args.runs, args.out, metrics, args.x)

"""`electra plot`: training curves of any run's metrics log (pre-training, fine-tuning).
Matplotlib is imported when it runs."""

from __future__ import annotations

import json

from electra.errors import install_hint


def add_parsers(sub) -> None:
    _add_plot(sub)


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="training curves of runs, against steps and FLOPs",
                       description="Draw each metric of RUN/metrics.jsonl (pretrain OUT, or a "
                       "finetune OUT's seed<k>/) in its own subplot, several runs overlaid, "
                       "against steps and against training FLOPs. Needs matplotlib "
                       f"({install_hint('plot')}).")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or metrics.jsonl)")
    p.add_argument("--out", required=True, help="image file: .png, .pdf or .svg")
    p.add_argument("--x", choices=["step", "flops", "both"], default="both",
                   help="x axis (default both: each metric against steps and, beside it, FLOPs)")
    p.add_argument("--metrics", help="comma-separated keys (default: every loss, accuracy, "
                   "AUC and dev score present)")
    p.set_defaults(func=_run_plot)


def _run_plot(args) -> None:
    from electra.runtime.plot import plot

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    print(json.dumps(plot(args.runs, args.out, metrics, args.x)))

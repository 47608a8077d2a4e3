"""`electra plot`: training curves of several runs overlaid, against steps and against FLOPs.

Reads each run's metrics.jsonl (written by `electra pretrain`, and per seed by `electra
finetune`). Comparing objectives at equal compute is the point of the FLOPs axis; records
without a `flops` key (a held-out evaluation, say) get it interpolated from the run's other
records, since training FLOPs grow linearly with steps. Needs matplotlib (`pip install -e
'.[plot]'` in the checkout); draws with the Agg backend, without pyplot's global state.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from electra.data.corpus import iter_json_lines
from electra.errors import ElectraError, install_hint
from electra.fileutil import write_atomic
from electra.runtime.metrics_log import METRICS, scalars

if TYPE_CHECKING:
    from matplotlib.figure import Figure

X_AXES = ("step", "flops")
X_LABELS = {"step": "step", "flops": "training FLOPs"}
# Not curves anyone compares by default (still plottable by name with --metrics).
_NOT_DEFAULT = {"flops", "lr", "epoch", "tokens_per_s"}


@dataclass
class Run:
    label: str
    path: Path  # the metrics.jsonl it came from
    records: list[dict]

    def series(self, metric: str, x: str) -> tuple[list[float], list[float]]:
        """(xs, ys) of the records that have `metric`, sorted by x; empty when the run has no
        such metric or (x == "flops") no FLOPs at all."""
        known = sorted((r["step"], r["flops"]) for r in self.records
                       if isinstance(r.get("flops"), (int, float)))
        points = []
        for r in self.records:
            value = scalars(r).get(metric)
            if value is None:
                continue
            if x == "step":
                points.append((float(r["step"]), value))
            elif isinstance(r.get("flops"), (int, float)):
                points.append((float(r["flops"]), value))
            elif known:
                points.append((_flops_at(r["step"], known), value))
        points.sort()
        return [p[0] for p in points], [p[1] for p in points]

    @property
    def has_flops(self) -> bool:
        return any(isinstance(r.get("flops"), (int, float)) for r in self.records)

    def metrics(self) -> set[str]:
        return {k for r in self.records for k in scalars(r)}


def _flops_at(step: int, known: list[tuple[int, float]]) -> float:
    """FLOPs at `step` from the nearest logged (step, flops); linear through the origin, as
    every step costs the same."""
    s, f = min(known, key=lambda sf: abs(sf[0] - step))
    return f * step / s if s else f


def read_run(path: str | Path) -> list[Path]:
    """The metrics files of RUN: RUN/metrics.jsonl, RUN itself when it is a file, or a
    fine-tuning OUT's RUN/seed*/metrics.jsonl (one curve per seed)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if (p / METRICS).is_file():
        return [p / METRICS]
    seeds = sorted(p.glob(f"seed*/{METRICS}"))
    if seeds:
        return seeds
    raise ElectraError(f"{p / METRICS}: no such file (is {p} a pretrain or finetune OUT?)")


def _load(path: Path) -> list[dict]:
    records = []
    for number, record in iter_json_lines(path):
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ElectraError(f"{path}:{number}: a record needs an integer 'step'")
        records.append(record)
    return records


def _labels(paths: list[Path]) -> list[str]:
    """The run directory's name, with as many parent names as make the labels distinct."""
    dirs = [p.parent for p in paths]
    for depth in range(1, max(len(d.parts) for d in dirs) + 1):
        labels = ["/".join(d.parts[-depth:]) for d in dirs]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


def load_runs(runs: Sequence[str | Path]) -> list[Run]:
    paths = [p for run in runs for p in read_run(run)]
    return [Run(label, path, _load(path))
            for label, path in zip(_labels(paths), paths, strict=True)]


def default_metrics(available: set[str]) -> list[str]:
    """Losses, AUCs, accuracies and dev scores: what tells one run from another."""
    def wanted(k: str) -> bool:
        return k not in _NOT_DEFAULT and (k.endswith("loss") or "auc" in k
                                          or k.endswith("acc") or k.startswith("dev_"))

    order = {"loss": 0}  # the total loss first, then alphabetical
    return sorted((k for k in available if wanted(k)), key=lambda k: (order.get(k, 1), k))


def plot_runs(runs: Sequence[str | Path], metrics: Sequence[str] | None = None,
              x: str = "both", skip_missing: bool = False) -> Figure:
    """One subplot per (metric, x axis), runs overlaid; x is "step", "flops" or "both" (each
    metric against steps, then beside it against FLOPs; "both" falls back to steps when no run
    logs FLOPs). A named metric that no run logs is an error, or with `skip_missing` left out
    (runs of different objectives log different probes)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        raise ElectraError(f"electra plot needs matplotlib: {install_hint('plot')}") from None
    if x not in (*X_AXES, "both"):
        raise ElectraError(f"--x must be step, flops or both, not {x!r}")
    if not runs:
        raise ElectraError("give at least one RUN")
    loaded = load_runs(runs)
    available = set().union(*(r.metrics() for r in loaded))
    if metrics:
        missing = [m for m in metrics if m not in available]
        logged = [m for m in metrics if m in available]
        if missing and not (skip_missing and logged):
            raise ElectraError(f"metric(s) {', '.join(missing)} in no run (they have: "
                               f"{', '.join(sorted(available)) or 'nothing'})")
        metrics = logged
    else:
        metrics = default_metrics(available)
        if not metrics:
            raise ElectraError(f"no loss, accuracy or AUC in {', '.join(map(str, runs))}; "
                               "name metrics with --metrics")
    any_flops = any(r.has_flops for r in loaded)
    if x == "flops" and not any_flops:
        raise ElectraError("no run logs 'flops' (fine-tuning runs do not); use --x step")
    xs = ["step", "flops"] if x == "both" and any_flops else ["step" if x == "both" else x]

    panels = [(m, ax_name) for m in metrics for ax_name in xs]  # a metric's axes side by side
    ncols = min(len(panels), (4 if len(metrics) > 3 else 2) if len(xs) == 2 else 3)
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(4.8 * ncols, 3.0 * nrows + 0.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    colors = [f"C{i % 10}" for i in range(len(loaded))]
    for ax, (metric, ax_name) in zip(axes, panels, strict=False):
        for run, color in zip(loaded, colors, strict=True):
            px, py = run.series(metric, ax_name)
            if px:
                ax.plot(px, py, color=color, label=run.label,
                        marker="o" if len(px) <= 30 else None, markersize=3)
        ax.set_title(metric)
        ax.set_xlabel(X_LABELS[ax_name])
        ax.grid(True, alpha=0.3)
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    handles = [Line2D([], [], color=c, label=r.label) for r, c in zip(loaded, colors, strict=True)]
    fig.legend(handles=handles, loc="outside upper center", ncols=min(4, len(loaded)))
    return fig


def save_figure(fig: Figure, out: str | Path) -> Path:
    """Write the figure in the format its suffix names, via a temporary file and a rename."""
    out = Path(out)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in fig.canvas.get_supported_filetypes():
        raise ElectraError(f"{out}: unknown image format {out.suffix!r} (use .png, .pdf or .svg)")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=120)
    return write_atomic(out, buffer.getvalue())


def plot(runs: Sequence[str | Path], out: str | Path, metrics: Sequence[str] | None = None,
         x: str = "both", skip_missing: bool = False) -> dict:
    """`electra plot`: draw and write the figure; returns what it drew."""
    fig = plot_runs(runs, metrics, x, skip_missing)
    path = save_figure(fig, out)
    return {"out": str(path), "runs": [t.get_text() for t in fig.legends[0].get_texts()],
            "panels": [ax.get_title() + " vs " + ax.get_xlabel() for ax in fig.axes]}

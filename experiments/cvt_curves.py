"""Dev score against labeled steps, CVT against supervised training (the question of the
dissertation's Figure 4.5 at CPU scale): one panel per task, a line through the median over
seeds of each method at each stage, each seed's score as a dot. A multi-task run is placed at
the labeled steps each task had (its share of the shared steps, as the run drew them).

Reads what `experiments.cvt` caches: a WORK directory (WORK/results/*.json) or a JSON file
holding a list of such entries (as docs/measurements keeps them). Each source is `PATH=LABEL`
(the label tells sources apart in the legend, e.g. random against word2vec embeddings):

    python -m experiments.cvt_curves runs/cvt_bench=random --out runs/cvt_curves.png
    python -m experiments.cvt_curves docs/measurements/cvt-h100-2026-11-26/random.json=random \\
        docs/measurements/cvt-h100-2026-11-26/word2vec.json=word2vec \\
        --out docs/experiments/cvt_curves_h100.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from electra.cvt.train import supervised_task_index
from electra.errors import ElectraError
from experiments.common import cvt_method
from experiments.cvt import LABELS, METRIC

COLORS = {"supervised": "tab:blue", "cvt": "tab:red", "multitask": "tab:green"}
NAMES = {"supervised": "supervised", "cvt": "CVT", "multitask": "multi-task CVT"}
STYLES = ["-", "--", ":", "-."]
TITLES = {**LABELS, "dep": "dep (LAS, UD EWT dev)"}


def read_source(spec: str) -> tuple[str, list[dict]]:
    """`PATH=LABEL` (or PATH, labelled by its name) -> (label, result entries)."""
    path_text, _, label = spec.partition("=")
    path = Path(path_text)
    if path.is_dir():
        files = sorted((path / "results").glob("*.json"))
        if not files:
            raise ElectraError(f"{path}: no results/*.json (an experiments.cvt --work dir?)")
        entries = [json.loads(f.read_text()) for f in files]
    elif path.is_file():
        entries = json.loads(path.read_text())
        if not isinstance(entries, list):
            raise ElectraError(f"{path}: expected a JSON list of experiments.cvt results")
    else:
        raise ElectraError(f"{path}: no such directory or file")
    return label or path.stem, entries


def task_steps(entry: dict, task: str) -> int:
    """The labeled steps `task` had: all of a single-task run's; of a multi-task run's, the
    ones that drew it, replayed with the run's own draw (it depends on seed and step only)."""
    sizes = entry.get("train_sentences") or {}
    if len(entry["tasks"]) == 1 or task not in sizes:
        return entry["steps"]
    index = list(sizes).index(task)  # the run's task order
    return sum(supervised_task_index(list(sizes.values()), entry["seed"], t) == index
               for t in range(entry["steps"]))


def curves(sources: list[tuple[str, list[dict]]]) -> dict[tuple[str, str, str], dict[int, list]]:
    """(task, label, method) -> {labeled steps of that task: [(seed, score x100), ...]}, every
    stage of every run."""
    out: dict[tuple[str, str, str], dict[int, list]] = {}
    for label, entries in sources:
        for e in entries:
            for task, scores in e["scores"].items():
                key = (task, label, cvt_method(e))
                out.setdefault(key, {}).setdefault(task_steps(e, task), []).append(
                    (e["seed"], round(100 * scores[METRIC[task]], 2)))
    return out


def plot(series: dict[tuple[str, str, str], dict[int, list]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in METRIC if any(k[0] == t for k in series)]
    labels = list(dict.fromkeys(k[1] for k in series))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for (t, label, method), stages in sorted(series.items()):
            if t != task:
                continue
            steps = sorted(stages)
            style = STYLES[labels.index(label) % len(STYLES)]
            ax.plot(steps, [statistics.median(s for _, s in stages[x]) for x in steps],
                    style, color=COLORS[method], marker="o", markersize=3,
                    label=f"{NAMES[method]}, {label}" if len(labels) > 1 else NAMES[method])
            for x in steps:
                ax.scatter([x] * len(stages[x]), [s for _, s in stages[x]], s=8,
                           color=COLORS[method], alpha=0.4)
        ax.set_title(TITLES[task])
        ax.set_xlabel("labeled steps of the task")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="+", metavar="PATH=LABEL",
                   help="an experiments.cvt --work dir or a JSON list of its results")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    series = curves([read_source(s) for s in args.sources])
    if not series:
        raise ElectraError("the sources hold no results")
    plot(series, args.out)
    summary = {"png": str(args.out), "series": {
        "/".join(k): {str(x): round(statistics.median(s for _, s in v[x]), 2) for x in sorted(v)}
        for k, v in sorted(series.items())}}
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()

"""A task's results.json: per-seed scores and their summaries (median, mean, std), the medians
the papers report (dissertation section 5.2.4: "the median of 10 fine-tuning runs from the same
pre-trained checkpoint"), the settings and the data's sizes."""

from __future__ import annotations

import statistics
from pathlib import Path

from electra.finetuning.evaluation import primary_key
from electra.hub import source_record
from electra.tasks import Task
from electra.tasks.base import Example


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0, "values": values}


def task_results(task: Task, seeds: list[dict], resolved: dict, model_dir, data_dir,
                 train: list[Example], eval_sets: dict[str, list[Example]], out: Path,
                 **extra) -> dict:
    """A task's results.json: per-seed scores, their summaries and medians, the settings and
    the data's sizes; `extra` fields go just before "best_model". A Hub dataset's snapshot is
    recorded as its id and commit (`electra.hub.source_record`), as the model is."""
    metric_keys = list(seeds[0]["scores"])
    return {
        "task": task.name,
        "metric_names": metric_keys,
        "primary_metric": primary_key(task),
        "seeds": seeds,
        "summary": {m: summary([s["scores"][m] for s in seeds]) for m in metric_keys},
        "median": {m: statistics.median([s["scores"][m] for s in seeds]) for m in metric_keys},
        "settings": resolved,
        **source_record(model_dir, "model"),
        **source_record(data_dir, "data"),
        "num_train_examples": len(train),
        "num_eval_examples": {s: len(e) for s, e in eval_sets.items()},
        **extra,
        "best_model": str(out / "model"),
    }

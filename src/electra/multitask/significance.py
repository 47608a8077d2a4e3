"""Significance as chapter 3 reports it (Table 3.1): paired bootstrap tests of a model against
each baseline on each dev set, with the Holm-Bonferroni correction over all comparisons.

The bootstrap resamples dev examples with replacement; both models are scored on the same
resample (paired), each as the mean of its seeds' scores (so every trial counts, not one
picked run). The one-sided p-value is the share of resamples where the model does not beat the
baseline, (count + 1) / (n + 1) so it is never 0. Deviation: Table 3.4 uses Mann-Whitney U tests
over seeds; with the 3 seeds a CPU budget allows that test cannot reach p < .05, so everything
here is bootstrapped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.tasks.sentence import METRICS


def seed_predictions(results: dict, split: str = "dev") -> list[list]:
    """Each seed's dev predictions (input order) from a results.json's prediction files."""
    runs = []
    for entry in results["seeds"]:
        path = Path(entry["predictions"][split])
        if not path.is_file():
            raise ElectraError(f"{path}: predictions file missing (needed for significance)")
        runs.append([json.loads(line)["prediction"] for line in path.read_text().splitlines()])
    return runs


def gold_labels(results: dict, split: str = "dev") -> list:
    path = Path(results["seeds"][0]["predictions"][split])
    return [json.loads(line)["label"] for line in path.read_text().splitlines()]


def paired_bootstrap(model: Sequence[Sequence], baseline: Sequence[Sequence], gold: Sequence,
                     metric: Callable[[list, list], float], samples: int = 1000,
                     seed: int = 0) -> dict[str, float]:
    """{delta, p}: the model's minus the baseline's seed-mean score on the full dev set, and
    the one-sided bootstrap p-value that the model is not better."""
    n = len(gold)
    for run in [*model, *baseline]:
        if len(run) != n:
            raise ElectraError(f"predictions for {len(run)} examples, the dev set has {n}")
    gold_arr = np.array(gold, dtype=object)
    runs_a = [np.array(r, dtype=object) for r in model]
    runs_b = [np.array(r, dtype=object) for r in baseline]

    def score(runs: list[np.ndarray], idx: np.ndarray) -> float:
        return float(np.mean([metric(list(r[idx]), list(gold_arr[idx])) for r in runs]))

    everything = np.arange(n)
    delta = score(runs_a, everything) - score(runs_b, everything)
    rng = np.random.default_rng(seed)
    worse = 0
    for _ in range(samples):
        idx = rng.integers(0, n, n)
        worse += score(runs_a, idx) - score(runs_b, idx) <= 0
    return {"delta": delta, "p": (worse + 1) / (samples + 1)}


def holm_bonferroni(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given): the i-th smallest p times
    (m - i), made monotone, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def stars(p: float) -> str:
    """Table 3.1's marks: * p < .05, ** p < .01, *** p < .001."""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def compare(model: dict[str, dict], baselines: dict[str, dict[str, dict]],
            metrics: dict[str, str], samples: int = 1000, seed: int = 0) -> dict:
    """model: {task: results.json}; baselines: {baseline name: {task: results.json}};
    metrics: {task: primary metric name}. Returns {task: {baseline: {delta, p, p_holm,
    stars}}} with Holm-Bonferroni over every (task, baseline) comparison."""
    rows = []
    for task, res in model.items():
        gold = gold_labels(res)
        for name, base in baselines.items():
            if task not in base:
                continue
            test = paired_bootstrap(seed_predictions(res), seed_predictions(base[task]), gold,
                                    METRICS[metrics[task]], samples, seed)
            rows.append((task, name, test))
    adjusted = holm_bonferroni([t["p"] for _, _, t in rows])
    out: dict[str, dict] = {}
    for (task, name, test), p_holm in zip(rows, adjusted, strict=True):
        out.setdefault(task, {})[name] = {**test, "p_holm": p_holm,
                                          "stars": stars(p_holm) if test["delta"] > 0 else ""}
    return out


def add_significance(out: Path, baselines: dict[str, dict[str, dict]],
                     samples: int = 1000) -> dict:
    """Paired bootstrap of the run in OUT against each baseline on each task's dev set,
    Holm-Bonferroni over all comparisons; written into OUT/results.json."""
    from electra.multitask.strategies import load_task_results

    model = load_task_results(out)
    metrics = {t: r["primary_metric"] for t, r in model.items()}
    tests = compare(model, baselines, metrics, samples)
    path = out / "results.json"
    res = json.loads(path.read_text())
    res["significance"] = {"test": "paired bootstrap (one-sided), Holm-Bonferroni",
                           "samples": samples, "by_task": tests}
    write_atomic(path, json.dumps(res, indent=2) + "\n")
    return res

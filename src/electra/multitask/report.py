"""Summaries over tasks, as section 3.3 reports them: the average score over tasks (in points),
and the GLUE score where the tasks allow (the GLUE-score tasks among them, WNLI excluded)."""

from __future__ import annotations

import statistics

from electra.tasks.glue import GLUE_SCORE_TASKS, glue_score


def task_summary(primary: dict[str, tuple[str, float]]) -> dict:
    """{task: (metric, score)} -> average (x100) over all tasks and the GLUE score (x100) over
    the GLUE-score tasks present (None when there are none)."""
    return {
        "primary": {t: {"metric": m, "score": v} for t, (m, v) in primary.items()},
        "average": 100 * statistics.fmean(v for _, v in primary.values()),
        "glue_score": glue_score({t: v for t, (_, v) in primary.items()}),
        "glue_score_tasks": [t for t in GLUE_SCORE_TASKS if t in primary],
    }

"""The `glue` pseudo-task: fine-tune each GLUE task found in DATA and report the GLUE score as
the papers do (section 5.2.4): the mean over tasks of the median dev score, using MCC for
CoLA, Spearman for STS-B, matched accuracy for MNLI and accuracy elsewhere, WNLI excluded."""

from __future__ import annotations

import json
from pathlib import Path

from electra.errors import ElectraError
from electra.finetuning.evaluation import primary_key
from electra.finetuning.examples import data_folder
from electra.finetuning.model_io import source_dir
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings
from electra.progress import Progress
from electra.settings import Sources
from electra.tasks.glue import GLUE_SCORE_TASKS, SPECS, GlueTask, glue_name, glue_score


def glue_tasks(data_dir: str | Path, names: list[str] | None = None) -> list[str]:
    """The requested tasks, or every GLUE task with training data in its own folder under
    DATA (DATA/<Task>/train.tsv, or the Hub's DATA/<config>/, as nyu-mll/glue has them)."""
    if names:
        out = []
        for name in names:
            canonical = glue_name(name)
            if canonical is None:
                raise ElectraError(f"{name!r} is not a GLUE task ({', '.join(SPECS)})")
            out.append(canonical)
        return out
    found = [n for n in SPECS if GlueTask(n).has_training_data(data_dir)]
    if not found:
        raise ElectraError(f"{data_dir}: no GLUE task folders with a train.tsv or the Hub's "
                           "train split")
    return found


def run_glue(model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
             settings: FinetuneSettings | None = None, names: list[str] | None = None,
             show_progress: bool | Progress = False, sources: Sources | None = None,
             revision: str | None = None, data_config: str | None = None,
             data_revision: str | None = None) -> dict:
    """Fine-tune every GLUE task found (or `names`) from `model_dir` (a folder, a checkpoint or
    a Hub id at `revision`, read once for all tasks); write and return OUT/results.json.
    `data_dir`: a folder or a Hub dataset id (at `data_revision`; nyu-mll/glue: the requested
    tasks' configs, or every task's), `data_config` its config folder."""
    model_dir = source_dir(model_dir, revision)
    wanted = [GlueTask(name) for name in (glue_tasks(data_dir, names) if names else SPECS)]
    data_dir = data_folder(data_dir, wanted, data_config, data_revision)
    out = Path(out_dir)
    per_task = {}
    for name in glue_tasks(data_dir, names):
        task = GlueTask(name)
        res = finetune(model_dir, name, data_dir, out / name, settings, show_progress, task=task,
                       sources=sources)
        key = primary_key(task)
        per_task[name] = {"metric": key, "median": res["median"][key],
                          "medians": res["median"], "results": str(out / name / "results.json")}
    scored = [t for t in GLUE_SCORE_TASKS if t in per_task]
    results = {
        "task": "glue",
        "tasks": per_task,
        # In points (x100), as the papers print it; over the tasks run, WNLI excluded.
        "glue_score": glue_score({t: r["median"] for t, r in per_task.items()}),
        "glue_score_tasks": scored,
        "complete": len(scored) == len(GLUE_SCORE_TASKS),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results

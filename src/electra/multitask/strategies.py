"""The training strategies of Table 3.1 as one switch: Single, Multi, Single->Single,
Multi->Multi, Single->Multi, and repeated rounds (Single->Multi->Single->Multi). Each stage
after the first distils from the previous stage's best models (its OUT/model directories):
a Single stage trains one `finetune` model per task (Single->Single distils each from its
task's teacher), a Multi stage one multi-task model. Given `teachers`, the first stage already
distils from them (so `multi` with single-task teachers is Single->Multi on existing models).

Earlier stages write OUT/stages/<i>-<kind>/, the last one OUT itself.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from electra.device import resolve_device
from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.finetuning.evaluation import primary_key
from electra.finetuning.model_io import source_dir
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings, recipe_free_fields
from electra.multitask import distill
from electra.multitask.train import (
    MultitaskSettings,
    read_task_data,
    resolve_task,
    run_multitask,
)
from electra.precision import device_and_precision
from electra.progress import Progress
from electra.settings import Sources
from electra.tasks.glue import task_summary
from electra.tokenizer import load_tokenizer

STAGES = ("single", "multi")
# Fields a Single stage takes from the multi-task settings; the recipe's fields (Table 5.2:
# lr, epochs, batch size, ...) are finetune's unless the single_* overrides say otherwise.
_SHARED = recipe_free_fields()


def parse_strategy(text: str) -> list[str]:
    """"Single->Multi", "single-multi", "Single→Multi→Single→Multi", "multi" -> stage kinds."""
    stages = [s.strip().lower() for s in re.split(r"->|→|>|-|,", text) if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if not stages or bad:
        raise ElectraError(f"--strategy {text!r}: stages must be single or multi, joined by "
                           "'-' or '->' (e.g. single-multi)")
    return stages


@dataclasses.dataclass
class SingleOverrides:
    """Single-stage knobs; None keeps finetune's recipe (Table 5.2)."""

    lr: float | None = None
    epochs: float | None = None
    batch_size: int | None = None
    layerwise_decay: float | None = None


def single_settings(settings: MultitaskSettings, overrides: SingleOverrides) -> FinetuneSettings:
    single = FinetuneSettings(**{name: getattr(settings, name) for name in _SHARED})
    for name in ("lr", "epochs", "layerwise_decay", "batch_size"):
        if getattr(overrides, name) is not None:
            setattr(single, name, getattr(overrides, name))
    return single


def run_strategy(model_dir: str | Path, task_names: list[str], data_dir: str | Path,
                 out_dir: str | Path, strategy: str = "multi",
                 settings: MultitaskSettings | None = None,
                 teachers: list[str | Path] | None = None,
                 single: SingleOverrides | None = None,
                 show_progress: bool | Progress = False,
                 sources: Sources | None = None, revision: str | None = None) -> dict:
    """Run every stage of `strategy`; returns the last stage's results. `sources`: where each
    setting came from, for the multi-task stages' OUT/run.json. `model_dir`: a folder, a
    pre-training checkpoint or a Hub id (at `revision`), read once for every stage."""
    stages = parse_strategy(strategy)
    settings = settings or MultitaskSettings()
    settings.validate()
    # --precision bf16 is refused (on a CPU without it) before anything is read
    device_and_precision(settings.device, settings.precision)
    model_dir = source_dir(model_dir, revision)  # a checkpoint's discriminator, an id's snapshot
    single = single or SingleOverrides()
    single_settings(settings, single).validate()  # e.g. --grad-accum against its batch size
    annealing = distill.Annealing.parse(settings.teacher_annealing)
    # Check every task's data (and the given teachers) before any stage writes anything.
    tasks = {}
    for name in task_names:
        task, folder = resolve_task(name, data_dir)
        read_task_data(task, folder, settings)
        tasks[task.name] = (task, folder)
    data_dir = Path(data_dir)
    if teachers:
        vocab = load_tokenizer(model_dir).get_vocab()
        distill.match_teachers(teachers, {n: t for n, (t, _) in tasks.items()}, vocab)
    out = Path(out_dir)
    current = list(teachers or [])
    info = {"strategy": "->".join(s.capitalize() for s in stages)}
    results: dict = {}
    for i, kind in enumerate(stages):
        stage_out = out if i == len(stages) - 1 else out / "stages" / f"{i + 1}-{kind}"
        stage_info = {**info, "stage": i + 1,
                      "stage_teachers": [str(t) for t in current] or None}
        if kind == "multi":
            results = run_multitask(model_dir, list(tasks), data_dir, stage_out, settings,
                                    current or None, show_progress, stage_info, sources)
            current = [stage_out / "model"]
        else:
            results = _single_stage(model_dir, list(tasks), data_dir, stage_out,
                                    single_settings(settings, single), current, annealing,
                                    show_progress, stage_info)
            current = [stage_out / name / "model" for name in tasks]
    return results


def _single_stage(model_dir, names: list[str], data_dir: Path, out: Path,
                  settings: FinetuneSettings, teachers: list, annealing: distill.Annealing,
                  show_progress: bool | Progress, info: dict) -> dict:
    """One `finetune` run per task (distilled from its teacher when there is one), and
    OUT/results.json summarising them like a multi-task run's."""
    vocab = load_tokenizer(model_dir).get_vocab()
    per_task, tasks = {}, {}
    for name in names:
        task, folder = resolve_task(name, data_dir)
        read_task_data(task, folder, settings)  # labels, for matching a teacher
        tasks[name] = task
        if getattr(task, "regression", False):
            task.label_range = None  # single-task regression: finetune's linear head
        matched = distill.match_teachers(
            [t for t in teachers if _knows(t, name)], {name: task}, vocab) if teachers else {}
        teacher = _teacher_factory(matched[name], annealing, settings) if name in matched else None
        res = finetune(model_dir, name, folder, out / name, settings, show_progress, task=task,
                       teacher=teacher,
                       extra_info={**info, "teacher": str(matched.get(name)) if matched else None,
                                   "annealing": annealing.describe() if matched else None})
        per_task[name] = res
    medians = {n: (primary_key(t), per_task[n]["median"][primary_key(t)])
               for n, t in tasks.items()}
    results = {
        "tasks": {n: {"metric": medians[n][0], "median": medians[n][1],
                      "medians": per_task[n]["median"], "results": str(out / n / "results.json")}
                  for n in tasks},
        **task_summary(medians), "settings": {**dataclasses.asdict(settings), **info},
        "model": str(model_dir),
    }
    write_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    return results


def _knows(teacher_dir, name: str) -> bool:
    from electra.finetuning.model_io import read_finetune_info

    return any(s["name"] == name for s in distill.teacher_tasks(read_finetune_info(teacher_dir)))


def _teacher_factory(teacher_dir: Path, annealing: distill.Annealing,
                     settings: FinetuneSettings):
    def factory(task, examples, features):
        outputs = distill.teacher_predictions(teacher_dir, task.name, examples,
                                              settings.max_seq_len, settings,
                                              resolve_device(settings.device))
        return distill.targets_for(distill.student_rows(task, outputs, features), annealing,
                                   task)

    return factory


def load_task_results(run_dir: str | Path) -> dict[str, dict]:
    """{task: its results.json} of a finetune, multitask or strategy output directory."""
    path = Path(run_dir) / "results.json"
    if not path.is_file():
        raise ElectraError(f"{path}: no results (not a finetune or multitask output directory)")
    res = json.loads(path.read_text())
    if "task" in res and "seeds" in res:
        return {res["task"]: res}
    if "tasks" not in res:
        raise ElectraError(f"{path}: neither a finetune nor a multitask results file")
    return {name: json.loads(Path(t["results"]).read_text()) for name, t in res["tasks"].items()}

"""Inference with a fine-tuned model directory, single- or multi-task: `evaluate` scores the
dev split(s) and `predict` writes test-set predictions, each task its own files (GLUE: the
server's TSVs, CoLA.tsv, MNLI-m.tsv, ...; SQuAD: the official JSON; others: JSON lines). A
multi-task model does every task it knows (or the one named), each into OUT/<task>/."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.finetuning.evaluation import evaluate_splits, predict_examples, primary_key
from electra.finetuning.examples import data_folder, eval_sets_of
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.model_io import load_finetuned
from electra.finetuning.settings import FinetuneSettings
from electra.hub import resolve_model_path, source_record
from electra.outputs import EVALUATION, PREDICTIONS, check_writable
from electra.precision import device_and_precision
from electra.tasks import Task, get_task_name, task_from_state


def predict(model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
            task_name: str | None = None, settings: FinetuneSettings | None = None,
            max_seq_len: int | None = None, revision: str | None = None,
            data_config: str | None = None, data_revision: str | None = None,
            overwrite: bool = False) -> list[str]:
    """Write test-set predictions of a fine-tuned model (a folder, or a Hub id at `revision`)
    for `data_dir` (a folder, or a Hub dataset id at `data_revision`; `data_config`: its config
    folder); returns the files written. An OUT holding another command's output is refused
    unless `overwrite`."""
    check_writable(out_dir, PREDICTIONS, overwrite)
    model_dir = resolve_model_path(model_dir, revision)
    views, tokenizer, settings, device, out, multi = load_for_inference(
        model_dir, out_dir, task_name, settings, max_seq_len)
    data_dir = data_folder(data_dir, [task for task, _ in views], data_config, data_revision)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for task, model in views:
        written += task.write_test(out / task.name if multi else out, data_dir,
                                   lambda examples, m=model, t=task: predict_examples(
                                       m, t, examples, tokenizer, settings, device))
    return written


def evaluate(model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
             task_name: str | None = None, settings: FinetuneSettings | None = None,
             max_seq_len: int | None = None, revision: str | None = None,
             data_config: str | None = None, data_revision: str | None = None,
             overwrite: bool = False) -> dict:
    """Score a fine-tuned model (a folder, or a Hub id at `revision`) on the task's dev
    split(s) of `data_dir` (a folder, or a Hub dataset id at `data_revision`; `data_config`: its
    config folder); writes results.json. The sequence length is the one it was fine-tuned with
    unless `max_seq_len` is given. A multi-task model is scored on each task it knows (or on
    `task_name`), in OUT/<task>/, with a summary in OUT/results.json. An OUT holding another
    command's output (a fine-tuning run's results.json among them) is refused unless
    `overwrite`."""
    check_writable(out_dir, EVALUATION, overwrite)
    model_dir = resolve_model_path(model_dir, revision)
    views, tokenizer, settings, device, out, multi = load_for_inference(
        model_dir, out_dir, task_name, settings, max_seq_len)
    data_dir = data_folder(data_dir, [task for task, _ in views], data_config, data_revision)
    out.mkdir(parents=True, exist_ok=True)
    per_task = {}
    for task, model in views:
        task_out = out / task.name if multi else out
        eval_sets = eval_sets_of(task, data_dir, settings)
        scores, paths = evaluate_splits(model, task, eval_sets, tokenizer, settings, device,
                                        task_out)
        per_task[task.name] = {"task": task.name, "metric_names": list(scores),
                               "primary_metric": primary_key(task), "scores": scores,
                               "predictions": paths, **source_record(model_dir, "model"),
                               **source_record(data_dir, "data")}
        write_atomic(task_out / "results.json", json.dumps(per_task[task.name], indent=2) + "\n")
    if not multi:
        return per_task[views[0][0].name]
    from electra.tasks.glue import task_summary

    results = {"task": ",".join(per_task), "scores": {n: r["scores"] for n, r in per_task.items()},
               "tasks": {name: r["scores"] for name, r in per_task.items()},
               **task_summary({name: (r["primary_metric"], r["scores"][r["primary_metric"]])
                               for name, r in per_task.items()}),
               **source_record(model_dir, "model"), **source_record(data_dir, "data")}
    write_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    return results


def load_for_inference(model_dir: str | Path, out_dir: str | Path, task_name: str | None,
                       settings: FinetuneSettings | None, max_seq_len: int | None):
    """([(task, single-task model view) ...], tokenizer, settings, device, the out dir (not yet
    created: the data is found first), whether the model is multi-task) for `evaluate` and
    `predict`."""
    model, tokenizer, info = load_finetuned(model_dir)
    views = task_views(model, info, task_name)
    settings = eval_settings(settings, info, max_seq_len)
    settings.check_model(model.encoder.config)
    device, precision = device_and_precision(settings.device, settings.precision)
    settings = dataclasses.replace(settings, precision=precision)
    model.to(device)
    return views, tokenizer, settings, device, Path(out_dir), "tasks" in info


def task_views(model, info: dict, task_name: str | None) -> list[tuple[Task, FinetuneModel]]:
    """(task, encoder + that task's head) for each task a model knows, or just `task_name`."""
    if "tasks" not in info:
        return [(_restore_task(info, task_name), model)]
    states = {t["task"]["name"]: t["task"] for t in info["tasks"]}
    names = list(states)
    if task_name is not None:
        names = [n for n in states if n.lower() in (task_name.lower(),
                                                    get_task_name_or_none(task_name))]
        if not names:
            raise ElectraError(f"the multi-task model was trained on {', '.join(states)}, "
                               f"not {task_name}")
    return [(task_from_state(states[n]), model.single(n)) for n in names]


def load_teacher_view(model_dir: str | Path, task_name: str):
    """(encoder + head for `task_name`, its task, tokenizer) of a fine-tuned model directory,
    single- or multi-task."""
    model, tokenizer, info = load_finetuned(model_dir)
    [(task, view)] = task_views(model, info, task_name)
    return view, task, tokenizer


def get_task_name_or_none(name: str) -> str | None:
    try:
        return get_task_name(name).lower()
    except ElectraError:
        return None


def eval_settings(settings: FinetuneSettings | None, info: dict, max_seq_len: int | None
                  ) -> FinetuneSettings:
    settings = dataclasses.replace(settings or FinetuneSettings(),
                                   max_seq_len=max_seq_len or info["settings"]["max_seq_len"])
    settings.validate()
    return settings


def _canonical(task_name: str) -> str | None:
    """The registry's name for `task_name`; None for a user task (DATA/<name>/task.json), which
    is saved under its own name."""
    try:
        return get_task_name(task_name)
    except ElectraError:
        return None


def _restore_task(info: dict, task_name: str | None) -> Task:
    saved = info["task"]["name"]
    task = task_from_state(info["task"])
    if task_name is not None and task_name != saved and _canonical(task_name) != saved:
        raise ElectraError(f"the model was fine-tuned on {saved}, not {task_name}")
    return task

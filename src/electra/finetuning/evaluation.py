"""Prediction and evaluation with a fine-tuned model: each feature's head output, one
prediction per example, and the scores and prediction files of every evaluation split."""

from __future__ import annotations

from pathlib import Path

import torch

from electra.device import to_device
from electra.finetuning.data import eval_batches
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.settings import FinetuneSettings
from electra.precision import autocast
from electra.tasks import Task
from electra.tasks.base import Example
from electra.tokenizer import special_token_ids


def _metric_key(split: str, metric: str, task: Task) -> str:
    return metric if len(task.eval_splits) == 1 else f"{split}_{metric}"


def primary_key(task: Task) -> str:
    return _metric_key(next(iter(task.eval_splits)), task.primary_metric, task)


@torch.no_grad()
def predict_examples(model: FinetuneModel, task: Task, examples: list[Example], tokenizer,
                     settings: FinetuneSettings, device: torch.device) -> list:
    """One prediction per example, in input order (batches are length-sorted internally); the
    head splits its batched output into per-feature rows."""
    features = task.featurize(examples, tokenizer, settings.max_seq_len)
    return task.postprocess(examples, features,
                            head_outputs(model, task, features, tokenizer, settings, device))


@torch.no_grad()
def head_outputs(model: FinetuneModel, task: Task, features: list[dict], tokenizer,
                 settings: FinetuneSettings, device: torch.device) -> list:
    """Each feature's head output (numpy row, or a span beam), in feature order."""
    pad_id = special_token_ids(tokenizer)["pad"]
    outputs: list = [None] * len(features)
    model.eval()
    for idx in eval_batches(features, settings.eval_batch_size):
        batch = to_device(task.collate([features[i] for i in idx], pad_id), device)
        with autocast(device, settings.precision):
            output = model(batch)
        rows = model.task_head.rows(output, [len(features[i]["input_ids"]) for i in idx])
        for row, i in zip(rows, idx, strict=True):
            outputs[i] = row
    return outputs


def evaluate_splits(model, task, eval_sets, tokenizer, settings, device, out_dir: Path,
                    prefix: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """Scores on each evaluation split and the path(s) of its predictions file(s): the task
    writes its own format (JSON lines; SQuAD: the official JSON + na_probs)."""
    scores: dict[str, float] = {}
    paths: dict[str, str] = {}
    for split, examples in eval_sets.items():
        preds = predict_examples(model, task, examples, tokenizer, settings, device)
        for metric, value in task.score(examples, preds).items():
            scores[_metric_key(split, metric, task)] = value
        for kind, path in task.write_predictions(out_dir, f"{prefix}{split}", examples,
                                                 preds).items():
            paths[split if kind == "predictions" else f"{split}_{kind}"] = path
    return scores, paths

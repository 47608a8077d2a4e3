"""Knowledge distillation with teacher annealing (dissertation section 3.2.2).

The student's target for an example is lambda * gold + (1 - lambda) * teacher: for
classification the teacher's softmax distribution mixed with the one-hot gold label (trained
with cross-entropy), for regression the teacher's prediction mixed with the gold value (trained
with L2), both on the student's normalised label scale. Teacher annealing raises lambda linearly
from 0 to 1 over training (lambda = fraction of steps done, as the official code's
`percent_done`); `off` is pure distillation (lambda = 0) and a number fixes lambda (Table 3.4).

Teachers are fine-tuned model directories (`electra finetune`'s OUT/model, or a multi-task
model) matched to tasks by the task(s) they record. Their predictions on a training set are
computed once and cached next to the teacher, in TEACHER/teacher_cache/, keyed by a checksum of
the examples and sequence length, so a second student run does not run the teachers again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.tasks.base import Example, Task
from electra.tasks.sentence import SentenceTask

CACHE_DIR = "teacher_cache"


@dataclass(frozen=True)
class Annealing:
    """lambda(progress): linear 0 -> 1 ("on"), or a fixed value ("off" is 0)."""

    fixed: float | None = None

    @classmethod
    def parse(cls, text: str | float) -> Annealing:
        if isinstance(text, str) and text.lower() == "on":
            return cls(None)
        if isinstance(text, str) and text.lower() == "off":
            return cls(0.0)
        try:
            value = float(text)
        except ValueError:
            raise ElectraError(f"--teacher-annealing must be on, off or a number in [0, 1], "
                               f"got {text!r}") from None
        if not 0 <= value <= 1:
            raise ElectraError(f"--teacher-annealing must be in [0, 1], got {value}")
        return cls(value)

    def weight(self, progress: float) -> float:
        """The gold label's weight lambda after `progress` (0..1) of training."""
        return min(1.0, max(0.0, progress)) if self.fixed is None else self.fixed

    def describe(self) -> str:
        return "linear 0->1" if self.fixed is None else f"fixed {self.fixed}"


def soft_targets(task: Task, labels: torch.Tensor, teacher: torch.Tensor,
                 lam: float) -> torch.Tensor:
    """lambda * gold + (1 - lambda) * teacher. Classification: `teacher` holds logits [B, C],
    the result is a distribution [B, C]; regression: both are values on the normalised scale."""
    if getattr(task, "regression", False):
        return lam * labels.float() + (1 - lam) * teacher.float()
    gold = F.one_hot(labels, teacher.shape[-1]).float()
    return lam * gold + (1 - lam) * teacher.float().softmax(-1)


def add_targets(task: Task, part: dict, teacher_rows: list, lam: float) -> dict:
    """The batch (part) with "targets", which the task's loss trains on instead of "labels"."""
    teacher = torch.tensor(teacher_rows, dtype=torch.float)
    return {**part, "targets": soft_targets(task, part["labels"], teacher, lam)}


# --- teachers --------------------------------------------------------------------------------


def teacher_tasks(info: dict) -> list[dict]:
    """The task states a fine-tuned model directory records (one, or one per head)."""
    return [t["task"] for t in info["tasks"]] if "tasks" in info else [info["task"]]


def match_teachers(teacher_dirs: list[str | Path], tasks: dict[str, Task],
                   student_vocab: dict[str, int]) -> dict[str, Path]:
    """{student task: teacher directory}. One clear error for a teacher that is not a fine-tuned
    model, was trained on a task the student does not learn or on another label set, or whose
    vocabulary differs from the student's; and for two teachers of one task."""
    from electra.finetuning.model_io import read_finetune_info
    from electra.tokenizer import load_tokenizer

    matched: dict[str, Path] = {}
    for d in map(Path, teacher_dirs):
        info = read_finetune_info(d)
        known = [state["name"] for state in teacher_tasks(info)]
        if not set(known) & set(tasks):
            raise ElectraError(f"teacher {d} was fine-tuned on {', '.join(known)}, which is not "
                               f"one of the student's tasks ({', '.join(tasks)})")
        for state in teacher_tasks(info):
            name = state["name"]
            if name not in tasks:
                continue  # a multi-task teacher may know more tasks than the student
            if list(state.get("labels", [])) != list(tasks[name].labels):
                raise ElectraError(f"teacher {d} for {name} has labels {state.get('labels')}, "
                                   f"the student's training data has {tasks[name].labels}")
            if name in matched:
                raise ElectraError(f"two teachers for {name}: {matched[name]} and {d}")
            matched[name] = d
        if load_tokenizer(d).get_vocab() != student_vocab:
            raise ElectraError(f"teacher {d} has a different vocabulary from the student model "
                               "(distillation needs the same tokenization)")
    return matched


def teacher_predictions(teacher_dir: Path, task_name: str, examples: list[Example],
                        max_seq_len: int, settings, device: torch.device) -> list:
    """Per example: the teacher's logits (classification) or its prediction in label units
    (regression). Read from TEACHER/teacher_cache/ when there, else computed and cached."""
    from electra.finetuning.evaluation import head_outputs
    from electra.finetuning.predict import load_teacher_view

    checksum = data_checksum(task_name, examples, max_seq_len)
    cache = teacher_dir / CACHE_DIR / f"{task_name}-{checksum}.json"
    if cache.is_file():
        return json.loads(cache.read_text())["outputs"]
    model, task, tokenizer = load_teacher_view(teacher_dir, task_name)
    model.to(device)
    features = task.featurize(examples, tokenizer, max_seq_len)
    rows = head_outputs(model, task, features, tokenizer, settings, device)
    outputs: list = [None] * len(examples)
    for feat, row in zip(features, rows, strict=True):
        value = row.tolist()
        if isinstance(task, SentenceTask) and task.regression:
            value = task.denormalize(float(value[0]))
        outputs[feat["example_index"]] = value
    write_atomic(cache, json.dumps({"task": task_name, "num_examples": len(examples),
                                    "outputs": outputs}))
    return outputs


def data_checksum(task_name: str, examples: list[Example], max_seq_len: int) -> str:
    """What a teacher's cached predictions depend on besides its weights (a re-saved teacher
    directory drops its cache): the task, the inputs in order, the sequence length."""
    digest = hashlib.sha256(json.dumps([task_name, max_seq_len]).encode())
    for ex in examples:
        digest.update(json.dumps([list(ex.texts), ex.label]).encode())
    return digest.hexdigest()[:20]


def student_rows(task: Task, outputs: list, features: list[dict]) -> list:
    """The teacher output of each feature's example, on the student's label scale."""
    rows = []
    for f in features:
        value = outputs[f["example_index"]]
        rows.append(task.normalize(value) if getattr(task, "regression", False) else value)
    return rows


def targets_for(teacher_rows: list, annealing: Annealing, task: Task
                ) -> Callable[[dict, list[int], float], dict]:
    """The single-task loop's hook: a batch of feature indices -> the batch with targets."""

    def hook(batch: dict, idx: list[int], progress: float) -> dict:
        return add_targets(task, batch, [teacher_rows[i] for i in idx],
                           annealing.weight(progress))

    return hook

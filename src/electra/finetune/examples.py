"""A task's examples as a run reads them: the training set and the evaluation splits, each cut
to the settings' first K examples."""

from __future__ import annotations

from electra.errors import ElectraError
from electra.finetune.settings import FinetuneSettings
from electra.tasks import Task
from electra.tasks.base import Example


def train_examples_of(task: Task, data_dir, settings: FinetuneSettings) -> list[Example]:
    """The task's training examples (the first max_train_examples); none is an error."""
    train = task.read(data_dir, "train")
    if settings.max_train_examples:
        train = train[:settings.max_train_examples]
    if not train:
        raise ElectraError(f"{data_dir}: no training examples for {task.name}")
    return train


def eval_sets_of(task: Task, data_dir, settings: FinetuneSettings) -> dict[str, list[Example]]:
    sets = {}
    for split in task.eval_splits:
        examples = task.read(data_dir, split)
        if settings.max_eval_examples:
            examples = examples[:settings.max_eval_examples]
        sets[split] = examples
    return sets

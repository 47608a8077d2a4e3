"""A task's examples as a run reads them: the data folder (a Hub dataset id's snapshot, or one
config of it), the training set and the evaluation splits, each cut to the settings' first K
examples."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from electra.errors import ElectraError
from electra.finetuning.settings import FinetuneSettings
from electra.hub import resolve_data_path
from electra.tasks import Task
from electra.tasks.base import Example


def data_folder(data_dir: str | Path, tasks: Sequence[Task], config: str | None = None,
                revision: str | None = None) -> str | Path:
    """The folder the tasks read for --data: a local folder as given, a Hub dataset id's
    snapshot (fetching the folders the tasks look in, or `config`'s: --data-config, at
    `revision`: --data-revision), or with `config` that folder of either."""
    configs = [c for task in tasks for c in task.hub_configs]
    return resolve_data_path(data_dir, config, revision, configs)


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

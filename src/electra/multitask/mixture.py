"""Minibatches that mix tasks (section 3.2.1) and their summed loss."""

from __future__ import annotations

from collections.abc import Callable

import torch

from electra.errors import ElectraError
from electra.tasks.base import Task

INPUT_KEYS = ("input_ids", "token_type_ids", "attention_mask")


def check_mixable(task: Task) -> None:
    """Mixed batches share one [CLS]-per-row layout: sentence(-pair) classification and
    regression, the tasks of chapter 3. Tagging and SQuAD stay single-task."""
    if task.head_kind not in ("sequence", "regression"):
        raise ElectraError(f"task {task.name}: multi-task training takes sentence "
                           f"classification or regression tasks, not {task.head_kind!r} ones")


class TaskMixture:
    """The training objective of a mixed batch: the per-example losses summed over tasks and
    averaged over the batch (the official code's masked per-example losses), so a one-task
    batch has exactly that task's loss."""

    def __init__(self, tasks: dict[str, Task]):
        self.tasks = tasks

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict) -> torch.Tensor:
        rows = batch["input_ids"].shape[0]
        return sum(self.tasks[name].loss(out, batch["tasks"][name]) * (
            len(batch["tasks"][name]["rows"]) / rows) for name, out in outputs.items())

    def loss_units(self, batch: dict) -> int:
        """Rows: every mixable task's loss is a mean over its rows (see `loss`)."""
        return batch["input_ids"].shape[0]

    def hits(self, outputs: dict[str, torch.Tensor], batch: dict) -> tuple[int, int]:
        counts = [self.tasks[name].hits(out, batch["tasks"][name])
                  for name, out in outputs.items()]
        return sum(c for c, _ in counts), sum(n for _, n in counts)


def collate_mixture(items: list[tuple[str, dict]], tasks: dict[str, Task], pad_id: int,
                    part_hook: Callable[[str, dict, list[dict]], dict] | None = None) -> dict:
    """(task name, feature) pairs -> one padded input for the shared encoder and, per task,
    {"rows": positions in the batch, labels, ...} from that task's own collate; `part_hook`
    adds distillation targets to a part."""
    longest = max(len(f["input_ids"]) for _, f in items)
    n = len(items)
    batch = {"input_ids": torch.full((n, longest), pad_id, dtype=torch.long),
             "token_type_ids": torch.zeros((n, longest), dtype=torch.long),
             "attention_mask": torch.zeros((n, longest), dtype=torch.long), "tasks": {}}
    by_task: dict[str, list[int]] = {}
    for row, (name, f) in enumerate(items):
        k = len(f["input_ids"])
        batch["input_ids"][row, :k] = torch.tensor(f["input_ids"])
        batch["token_type_ids"][row, :k] = torch.tensor(f["token_type_ids"])
        batch["attention_mask"][row, :k] = 1
        by_task.setdefault(name, []).append(row)
    for name, rows in by_task.items():
        feats = [items[r][1] for r in rows]
        part = {k: v for k, v in tasks[name].collate(feats, pad_id).items()
                if k not in INPUT_KEYS}
        part["rows"] = torch.tensor(rows, dtype=torch.long)
        batch["tasks"][name] = part_hook(name, part, feats) if part_hook else part
    return batch

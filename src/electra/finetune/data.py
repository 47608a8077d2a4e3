"""Batches of features: shuffled for training, length-sorted for evaluation, padded only to the
longest sequence in the batch (dynamic padding), so short-sentence tasks waste no compute."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from electra.tasks.squad_data import collate_features


def collate(features: list[dict], pad_id: int = 0) -> dict[str, torch.Tensor]:
    if "span" in features[0]:  # SQuAD windows: p_mask and start/end/is_impossible targets
        return collate_features([f["span"] for f in features], pad_id)
    longest = max(len(f["input_ids"]) for f in features)
    n = len(features)
    ids = torch.full((n, longest), pad_id, dtype=torch.long)
    types = torch.zeros((n, longest), dtype=torch.long)
    mask = torch.zeros((n, longest), dtype=torch.long)
    token_level = isinstance(features[0]["labels"], list)
    if token_level:
        labels = torch.full((n, longest), -100, dtype=torch.long)
    for i, f in enumerate(features):
        k = len(f["input_ids"])
        ids[i, :k] = torch.tensor(f["input_ids"])
        types[i, :k] = torch.tensor(f["token_type_ids"])
        mask[i, :k] = 1
        if token_level:
            labels[i, :k] = torch.tensor(f["labels"])
    if not token_level:
        dtype = torch.float if isinstance(features[0]["labels"], float) else torch.long
        labels = torch.tensor([f["labels"] for f in features], dtype=dtype)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}


def train_batches(num: int, batch_size: int, generator: torch.Generator) -> Iterator[list[int]]:
    """Indices of one epoch in a random order, in batches (the last one may be short)."""
    order = torch.randperm(num, generator=generator).tolist()
    for start in range(0, num, batch_size):
        yield order[start:start + batch_size]


def eval_batches(features: list[dict], batch_size: int) -> list[list[int]]:
    """Indices sorted by length, so each batch pads little; callers restore input order."""
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]

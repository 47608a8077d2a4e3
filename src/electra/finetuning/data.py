"""Batches of features: shuffled and grouped by length for training, length-sorted for
evaluation, padded only to the longest sequence in the batch (dynamic padding), so
short-sentence tasks waste no compute."""

from __future__ import annotations

import torch

from electra.tasks.base import pad_collate as collate  # noqa: F401  (the sentence/token collate)

# Batches per sorting chunk for length-sorted training (as Hugging Face's group_by_length, whose
# "megabatches" are at most 50 batches).
SORT_CHUNK_BATCHES = 50


def feature_lengths(features: list[dict]) -> list[int]:
    return [len(f["input_ids"]) for f in features]


def train_batches(lengths: list[int], batch_size: int, generator: torch.Generator,
                  length_sorted: bool = True,
                  chunk_batches: int = SORT_CHUNK_BATCHES) -> list[list[int]]:
    """One epoch of training batches (indices; every example exactly once, at most one short
    batch). With `length_sorted`, a random permutation is cut into chunks of `chunk_batches`
    batches, each chunk is sorted by length and cut into batches, and the batch order is
    shuffled: batches hold similar lengths, so dynamic padding wastes little, while the chunking
    keeps which examples share a batch random (as Hugging Face's group_by_length does with
    "megabatches"). Deterministic for a generator state."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    return batches_from_order(order, lengths, batch_size, generator, length_sorted, chunk_batches)


def batches_from_order(order: list[int], lengths: list[int], batch_size: int,
                       generator: torch.Generator, length_sorted: bool = True,
                       chunk_batches: int = SORT_CHUNK_BATCHES) -> list[list[int]]:
    """Cut a random order into batches (see `train_batches`); shared with the multi-task
    sampler, whose order repeats examples of small tasks."""
    num = len(order)
    if not length_sorted:
        return [order[s:s + batch_size] for s in range(0, num, batch_size)]
    chunk = batch_size * max(1, chunk_batches)
    batches = []
    for c in range(0, num, chunk):
        part = sorted(order[c:c + chunk], key=lambda i: lengths[i])  # stable: ties stay random
        batches.extend(part[s:s + batch_size] for s in range(0, len(part), batch_size))
    perm = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in perm]


def padded_tokens(lengths: list[int], batches: list[list[int]]) -> int:
    """Padding positions that dynamic padding adds for these batches (each padded to its
    longest member)."""
    return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b)
               for b in batches)


def eval_batches(features: list[dict], batch_size: int) -> list[list[int]]:
    """Indices sorted by length, so each batch pads little; callers restore input order."""
    lengths = feature_lengths(features)
    order = sorted(range(len(features)), key=lambda i: lengths[i])
    return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]

"""Sentences to padded tensors, and the seeded, resumable order in which batches are drawn."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from electra.cvt.vocab import Vocab


def encode_words(sents: Sequence[Sequence[str]], vocab: Vocab, max_word_len: int
                 ) -> dict[str, torch.Tensor]:
    """words [B, T], chars [B, T, L] (0 = padding), lengths [B]."""
    width = max(len(s) for s in sents)
    char_width = max(min(len(w), max_word_len) for s in sents for w in s)
    words = torch.zeros(len(sents), width, dtype=torch.long)
    chars = torch.zeros(len(sents), width, char_width, dtype=torch.long)
    for b, s in enumerate(sents):
        words[b, : len(s)] = torch.tensor([vocab.word_id(w) for w in s])
        for i, w in enumerate(s):
            ids = vocab.char_ids(w, max_word_len)
            chars[b, i, : len(ids)] = torch.tensor(ids)
    lengths = torch.tensor([len(s) for s in sents], dtype=torch.long)
    return {"words": words, "chars": chars, "lengths": lengths}


class Sampler:
    """Batches of sentence indices, bucketed by length as the reference does (padding costs
    the character CNN and the LSTMs): each epoch is a fresh permutation drawn from
    (seed, epoch) alone, cut into pools of `pool` batches, each pool sorted by length and cut
    into batches, and the batch order shuffled. The position (epoch, batch) is the whole state,
    so resuming continues the same order."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, pool: int = 50):
        self.lengths = np.asarray(lengths)
        self.batch_size, self.seed, self.pool = batch_size, seed, pool
        self.epoch, self.offset = 0, 0
        self._batches = self._plan()

    def _plan(self) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        size = self.batch_size * self.pool
        batches = []
        for start in range(0, len(order), size):
            chunk = order[start: start + size]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i: i + self.batch_size].tolist()
                        for i in range(0, len(chunk), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def next(self) -> list[int]:
        if self.offset >= len(self._batches):
            self.epoch, self.offset = self.epoch + 1, 0
            self._batches = self._plan()
        self.offset += 1
        return self._batches[self.offset - 1]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
        self._batches = self._plan()

"""Pack tokenized sentences into pre-training examples.

This follows the official ELECTRA data builder (google-research/electra,
build_pretraining_dataset.py, class ExampleBuilder), re-implemented here with a seeded
`random.Random` so that preparing the same corpus twice gives identical shards:

- sentences are buffered until their total length reaches the current target length, or the
  document ends (examples never cross a document boundary);
- 10% of examples are single-segment (like classification inputs), the rest split the buffered
  sentences into two segments around half the target, with a coin flip for the sentence that
  straddles the midpoint;
- 5% of the time the next target is a random length in [5, max_len] instead of max_len, so the
  model also sees short inputs;
- there is no next-sentence prediction: segment B simply continues the text.

The random draws happen in the same order and under the same conditions as in the official
builder, so its length and segment statistics carry over. One deviation: the official builder
draws from one generator for the whole corpus, so a document's packing depends on every
document before it; `pack_document` gives each document its own generator, seeded by the
corpus seed and the document's index, and draws its first target length as the official
builder draws the target after any example (5% random). Each example's draws keep their
distribution, and documents can then be packed in parallel, in any order, with the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

Example = tuple[list[int], int]
"""Token ids ([CLS] A [SEP] (B [SEP])) and the index of the first [SEP]."""

SINGLE_SEGMENT_PROB = 0.1
RANDOM_LENGTH_PROB = 0.05
MIN_RANDOM_LENGTH = 5


class ExampleBuilder:
    """Accumulates one document's sentences and emits packed examples."""

    def __init__(self, max_len: int, cls_id: int, sep_id: int,
                 seed: int | random.Random) -> None:
        if max_len < MIN_RANDOM_LENGTH:
            raise ValueError(f"max_len must be >= {MIN_RANDOM_LENGTH}, got {max_len}")
        self.max_len = max_len
        self.cls_id = cls_id
        self.sep_id = sep_id
        self._rng = seed if isinstance(seed, random.Random) else random.Random(seed)
        self._sentences: list[Sequence[int]] = []
        self._length = 0
        self.target_length = max_len

    def add_sentence(self, ids: Sequence[int]) -> list[Example]:
        """Buffer one sentence; returns the example it completes, if any."""
        if len(ids) == 0:
            return []
        self._sentences.append(ids)
        self._length += len(ids)
        if self._length >= self.target_length:
            return [self._create_example()]
        return []

    def end_document(self) -> list[Example]:
        """Flush the buffer at a document boundary."""
        if self._length == 0:
            return []
        return [self._create_example()]

    def draw_target_length(self) -> None:
        """The official builder's draw after each example: 5% of the time a random length."""
        if self._rng.random() < RANDOM_LENGTH_PROB:
            self.target_length = self._rng.randint(MIN_RANDOM_LENGTH, self.max_len)
        else:
            self.target_length = self.max_len

    def _create_example(self) -> Example:
        rng = self._rng
        if rng.random() < SINGLE_SEGMENT_PROB:
            first_target = float("inf")
        else:
            first_target = (self.target_length - 3) // 2  # room for [CLS] and two [SEP]

        first: list[int] = []
        second: list[int] = []
        for sentence in self._sentences:
            # First segment if it is empty, if the sentence fits below its target, or (while
            # the second segment is empty and the first is short) on a fair coin flip.
            if (
                not first
                or len(first) + len(sentence) < first_target
                or (not second and len(first) < first_target and rng.random() < 0.5)
            ):
                first.extend(sentence)
            else:
                second.extend(sentence)

        first = first[: self.max_len - 2]
        second = second[: max(0, self.max_len - len(first) - 3)]

        self._sentences = []
        self._length = 0
        self.draw_target_length()

        ids = [self.cls_id, *first, self.sep_id]
        sep_index = len(ids) - 1
        if second:
            ids.extend(second)
            ids.append(self.sep_id)
        return ids, sep_index


def document_seed(seed: int, index: int) -> int:
    """The seed of document `index`'s generator: distinct for every (seed, index) pair with
    0 <= index < 2**40, negative seeds included (`random.Random` seeds with the absolute
    value, so the sign gets a bit of its own)."""
    return (abs(seed) * 2**40 + index) * 2 + (seed < 0)


def pack_document(sentences: Iterable[Sequence[int]], max_len: int, cls_id: int, sep_id: int,
                  seed: int) -> list[Example]:
    """One document's examples, from a generator of its own (see the module docstring)."""
    builder = ExampleBuilder(max_len, cls_id, sep_id, seed)
    builder.draw_target_length()
    examples = []
    for ids in sentences:
        examples += builder.add_sentence(ids)
    return examples + builder.end_document()

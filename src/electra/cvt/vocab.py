"""Word and character vocabularies, and word vectors from a GloVe/word2vec text file.

Word embeddings see a normalised form (lower case, every digit 0: what GloVe-style vectors
cover); the character CNN sees the original spelling, so capitalisation and digits still reach
the model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.data.corpus import iter_lines
from electra.errors import ElectraError

PAD, UNK = "<pad>", "<unk>"
_DIGIT = re.compile(r"\d")


def normalize(word: str) -> str:
    return _DIGIT.sub("0", word.lower())


@dataclass
class Vocab:
    """Index 0 is padding, 1 unknown."""

    words: list[str]
    chars: list[str]

    def __post_init__(self) -> None:
        self.word_index = {w: i for i, w in enumerate(self.words)}
        self.char_index = {c: i for i, c in enumerate(self.chars)}

    def word_id(self, word: str) -> int:
        return self.word_index.get(normalize(word), 1)

    def char_ids(self, word: str, max_len: int) -> list[int]:
        return [self.char_index.get(c, 1) for c in word[:max_len]]

    def to_json(self) -> dict:
        return {"words": self.words, "chars": self.chars}

    @classmethod
    def from_json(cls, data: dict) -> Vocab:
        return cls(list(data["words"]), list(data["chars"]))


def build_vocab(labeled: Iterable[Sequence[str]], unlabeled: Iterable[Sequence[str]],
                max_words: int, extra_words: Sequence[str] = ()) -> Vocab:
    """Every labeled training word, then the words of `extra_words` (the vector file's),
    then the most frequent unlabeled words (seen at least twice) up to `max_words`.

    Unlabeled-only words belong in the vocabulary: CVT trains their embeddings through the
    auxiliary losses, which is how it learns about words the labeled data never shows."""
    words = [PAD, UNK]
    seen = set(words)
    chars: Counter[str] = Counter()

    def add(w: str) -> None:
        if w not in seen and len(words) < max_words:
            seen.add(w)
            words.append(w)

    for sent in labeled:
        for w in sent:
            chars.update(w)
            add(normalize(w))
    for w in extra_words:
        add(w)
    counts: Counter[str] = Counter()
    for sent in unlabeled:
        for w in sent:
            chars.update(w)
            counts[normalize(w)] += 1
    for w, n in counts.most_common():
        if n < 2 or len(words) >= max_words:
            break
        add(w)
    char_list = [PAD, UNK] + sorted(c for c, n in chars.items() if n >= 2)
    return Vocab(words, char_list)


def read_word_vectors(path: str | Path, max_words: int | None = None
                      ) -> tuple[list[str], torch.Tensor]:
    """GloVe (`word v1 ... vd`) or word2vec text (the same after a `count dim` header line).
    Words are normalised; the first vector of a normalised form wins."""
    path = Path(path)
    if not path.is_file():
        raise ElectraError(f"{path}: file not found")
    words: list[str] = []
    rows: list[list[float]] = []
    seen: set[str] = set()
    dim = None
    for lineno, line in iter_lines(path):
        fields = line.rstrip().split(" ")
        if lineno == 1 and len(fields) == 2 and all(f.isdigit() for f in fields):
            continue  # word2vec header
        if not line.strip():
            continue
        if dim is None:
            dim = len(fields) - 1
            if dim < 1:
                raise ElectraError(f"{path}:{lineno}: no vector after the word")
        if len(fields) - 1 != dim:
            raise ElectraError(f"{path}:{lineno}: {len(fields) - 1} numbers, expected {dim}")
        try:
            vec = [float(x) for x in fields[1:]]
        except ValueError:
            raise ElectraError(f"{path}:{lineno}: not a number in the vector") from None
        word = normalize(fields[0])
        if word in seen:
            continue
        seen.add(word)
        words.append(word)
        rows.append(vec)
        if max_words is not None and len(words) >= max_words:
            break
    if not rows:
        raise ElectraError(f"{path}: no word vectors")
    return words, torch.tensor(rows, dtype=torch.float32)


def check_vector_dim(source: str | Path, vectors: torch.Tensor, word_dim: int) -> None:
    """The vectors must be as wide as the model's word embeddings (`word_dim`)."""
    if vectors.shape[1] != word_dim:
        raise ElectraError(f"{source}: the vectors have {vectors.shape[1]} dimensions, the "
                           f"model's word embeddings {word_dim} (give --set cvt."
                           f"word_dim={vectors.shape[1]})")


def vector_rows(vocab: Vocab, words: Sequence[str]) -> list[tuple[int, int]]:
    """(index in `words`, vocabulary row) of each vector word the vocabulary holds (not the
    padding and unknown rows 0 and 1)."""
    rows = ((k, vocab.word_index.get(w)) for k, w in enumerate(words))
    return [(k, i) for k, i in rows if i is not None and i > 1]


def init_embeddings(weight: torch.Tensor, vocab: Vocab, words: Sequence[str],
                    vectors: torch.Tensor) -> int:
    """Copy the vectors of vocabulary words into `weight`; returns how many were found."""
    check_vector_dim("word vectors", vectors, weight.shape[1])
    rows = vector_rows(vocab, words)
    with torch.no_grad():
        for k, i in rows:
            weight[i] = vectors[k]
    return len(rows)

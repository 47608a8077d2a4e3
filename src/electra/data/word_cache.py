"""Tokenize many sentences with a BERT WordPiece pipeline, each distinct word only once.

In a BERT pipeline (BertNormalizer with clean_text, BertPreTokenizer, WordPiece) no token
spans whitespace and a word's pieces do not depend on its neighbours, so a sentence's ids are
the concatenation of its words' ids. Natural text repeats its words (about a fifth of the
words in 256 IMDB reviews are distinct, far fewer over a corpus), so `WordCache` splits
sentences into words in Python, sends only words it has not seen to the tokenizer, and
assembles every sentence from remembered pieces with numpy. The ids are exactly those of
`tokenizer.encode_batch(sentences, add_special_tokens=False)` (tests/test_word_cache.py
compares them on real text, control characters included); a tokenizer whose pipeline is
anything else is called as usual.

Splitting: `str.split()` splits on every character Python calls whitespace. BertNormalizer
maps BERT's whitespace to spaces, but first deletes control characters (Unicode category C,
except tab, newline, carriage return), and seven of Python's whitespace characters are such
controls (\\x0b, \\x0c, \\x1c-\\x1f, \\x85): "a\\x85b" is one word to BERT. They are deleted
before splitting, as the normalizer would delete them.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from operator import itemgetter

import numpy as np
from tokenizers import Tokenizer

# Python whitespace that BertNormalizer(clean_text=True) deletes as a control character.
_DELETED_CONTROLS = dict.fromkeys(map(ord, "\x0b\x0c\x1c\x1d\x1e\x1f\x85"))
_HAS_DELETED_CONTROL = re.compile("[\x0b\x0c\x1c-\x1f\x85]")


def words_are_independent(tokenizer: Tokenizer) -> bool:
    """Whether `tokenizer` tokenizes whitespace-separated words independently (see above)."""
    spec = json.loads(tokenizer.to_str())
    normalizer, pre_tokenizer = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    added_ok = all(not (t["lstrip"] or t["rstrip"] or t["single_word"])
                   and not any(c.isspace() for c in t["content"])
                   for t in spec.get("added_tokens", []))
    return (normalizer.get("type") == "BertNormalizer" and normalizer.get("clean_text") is True
            and pre_tokenizer.get("type") == "BertPreTokenizer"
            and spec["model"].get("type") == "WordPiece"
            and spec.get("truncation") is None and spec.get("padding") is None and added_ok)


class WordCache:
    """Sentence token ids (no special tokens), each distinct word tokenized once.

    Remembers up to `max_words` words and their pieces, then starts over, so memory stays
    bounded on corpora with endless distinct strings (numbers, URLs)."""

    def __init__(self, tokenizer: Tokenizer, max_words: int = 1 << 20) -> None:
        self.tokenizer = tokenizer
        self.enabled = words_are_independent(tokenizer)
        self.max_words = max_words
        self._reset()

    def _reset(self) -> None:
        self._index: dict[str, int] = {}  # word -> its number
        self._pieces = np.empty(0, dtype=np.int64)  # every word's ids, one after the other
        self._starts = np.zeros(1, dtype=np.int64)  # word i's ids: _pieces[_starts[i]:_starts[i+1]]

    def encode(self, sentences: list[str]) -> list[list[int]]:
        if not self.enabled:
            encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
            return [e.ids for e in encode(sentences, add_special_tokens=False)]
        if not sentences:
            return []
        if any(map(_HAS_DELETED_CONTROL.search, sentences)):
            sentences = [s.translate(_DELETED_CONTROLS) for s in sentences]
        split = [s.split() for s in sentences]
        words = list(chain.from_iterable(split))
        distinct = dict.fromkeys(words).keys()
        new = list(distinct - self._index.keys())  # its order only numbers the new words
        if len(self._index) + len(new) > self.max_words:
            self._reset()
            new = list(distinct)
        if new:
            self._learn(new)
        # itemgetter looks every word up in C; with one argument it returns a bare value
        looked_up = itemgetter(*words)(self._index) if len(words) > 1 else [
            self._index[w] for w in words]
        number = np.array(looked_up, dtype=np.int64).reshape(-1)
        # Gather each word's pieces in order: a ragged gather with repeat + arange.
        lengths = (self._starts[1:] - self._starts[:-1])[number]
        ends = np.cumsum(lengths)
        flat = self._pieces[np.repeat(self._starts[number] - (ends - lengths), lengths)
                            + np.arange(int(ends[-1]) if len(ends) else 0)].tolist()
        # Each sentence's slice of `flat`: the token end of its last word.
        word_ends = np.cumsum(np.fromiter(map(len, split), dtype=np.int64, count=len(split)))
        token_ends = np.concatenate([[0], ends])[word_ends].tolist()
        return [flat[a:b] for a, b in zip([0, *token_ends[:-1]], token_ends, strict=True)]

    def _learn(self, new: list[str]) -> None:
        encoding = self.tokenizer.encode(new, is_pretokenized=True, add_special_tokens=False)
        word_of = np.asarray(encoding.word_ids, dtype=np.int64)
        counts = np.bincount(word_of, minlength=len(new))
        first = len(self._index)
        self._index.update(zip(new, range(first, first + len(new)), strict=True))
        self._pieces = np.concatenate([self._pieces, np.asarray(encoding.ids, dtype=np.int64)])
        self._starts = np.concatenate([self._starts, self._starts[-1] + np.cumsum(counts)])

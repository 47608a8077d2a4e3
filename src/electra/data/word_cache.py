"""Tokenize many sentences with a BERT WordPiece pipeline, each distinct word only once.

In a BERT pipeline (BertNormalizer with clean_text, BertPreTokenizer, WordPiece) no token
spans whitespace and a word's pieces do not depend on its neighbours, so a sentence's ids are
the concatenation of its words' ids. Natural text repeats its words (about a fifth of the
words in 256 IMDB reviews are distinct, far fewer over a corpus), so `WordCache` splits
sentences into words in Python, sends only words it has not seen to the tokenizer, and
assembles every sentence from remembered pieces with numpy. The ids are exactly those of
`tokenizer.encode_batch(sentences, add_special_tokens=False)` (tests/test_word_cache.py
compares them on real text and where Python's and BERT's whitespace differ); a tokenizer
whose pipeline is anything else gets whole sentences, as before.

Splitting: `str.split()` splits on every character Python calls whitespace, which is BERT's
whitespace plus seven control characters (\\x0b, \\x0c, \\x1c-\\x1f, \\x85) that BertNormalizer
deletes instead: "a\\x85b" is one word to BERT. Deleting them first is not enough either
(special tokens are matched in the raw text, before the normalizer: "[MA\\x0bSK]" is not
[MASK]), so the rare sentences that contain one go to the tokenizer whole.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from operator import itemgetter

import numpy as np
from tokenizers import Tokenizer

# Python whitespace that BertNormalizer(clean_text=True) deletes as a control character.
_HAS_DELETED_CONTROL = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
# Sentences per call when the tokenizer sees whole sentences: `Encoding` objects are bulky.
ENCODE_CHUNK = 8192


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
            return self._encode_whole(sentences)
        odd = [bool(_HAS_DELETED_CONTROL.search(s)) for s in sentences]
        if not any(odd):
            return self._encode_words(sentences)
        whole = iter(self._encode_whole([s for s, o in zip(sentences, odd, strict=True) if o]))
        words = iter(self._encode_words([s for s, o in zip(sentences, odd, strict=True)
                                         if not o]))
        return [next(whole) if o else next(words) for o in odd]

    def _encode_whole(self, sentences: list[str]) -> list[list[int]]:
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets, not used here.
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [e.ids for start in range(0, len(sentences), ENCODE_CHUNK)
                for e in encode(sentences[start : start + ENCODE_CHUNK],
                                add_special_tokens=False)]

    def _encode_words(self, sentences: list[str]) -> list[list[int]]:
        if not sentences:
            return []
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

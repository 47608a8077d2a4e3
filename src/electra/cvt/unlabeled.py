"""Unlabeled sentences for CVT (section 4.1.1): any corpus `electra prepare` reads (plain text,
JSON lines, .gz, directories) is read with its reader, split into sentences with its splitter,
and word-tokenised here the way the labeled data is (Penn Treebank style: punctuation and
clitics such as n't and 's are separate tokens).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from electra.data.corpus import iter_documents, split_sentences

# Alternatives are tried in order at each position: the stem before n't, n't, other clitics,
# numbers with inner . or , (3.5, 1,000), words with inner hyphens or periods, then one
# punctuation character (or ... and --) at a time.
_TOKEN = re.compile(
    r"[A-Za-z]+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\d+(?:[.,]\d+)*|\w+(?:[-.]\w+)*"
    r"|\.\.\.|--|[^\w\s]", re.IGNORECASE)
_MARKUP = re.compile(r"<br\s*/?>|<[^>\s]{1,20}>", re.IGNORECASE)  # IMDB's <br /> and similar


def tokenize(text: str) -> list[str]:
    """Penn-Treebank-like word tokens of one sentence."""
    return _TOKEN.findall(_MARKUP.sub(" ", text))


def iter_sentences(paths: Sequence[str | Path], text_field: str = "text",
                   max_len: int = 100) -> Iterator[list[str]]:
    """Word-tokenised sentences of 2..max_len words (the reference limits unlabeled sentences
    to 100 words; one-word "sentences" are mostly headings and list debris)."""
    for doc in iter_documents(paths, text_field=text_field):
        # Line breaks inside a document are mostly wrapping (Reuters, Gutenberg), and the
        # shared splitter ends a sentence at every newline, so lines are joined first.
        for sent in split_sentences(" ".join(doc.text.split())):
            words = tokenize(sent)
            if 2 <= len(words) <= max_len:
                yield words


def load_sentences(paths: Sequence[str | Path], max_sentences: int, text_field: str = "text",
                   max_len: int = 100) -> list[list[str]]:
    """The first `max_sentences` sentences of the corpus, in corpus order."""
    out: list[list[str]] = []
    for words in iter_sentences(paths, text_field, max_len):
        out.append(words)
        if len(out) >= max_sentences:
            break
    return out

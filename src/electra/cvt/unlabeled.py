"""Unlabeled sentences for CVT (section 4.1.1): any corpus `electra prepare` reads (plain text,
JSON lines, .gz, directories) is read with its reader, split into sentences with its splitter,
and word-tokenised here the way the labeled data is (Penn Treebank style: punctuation and
clitics such as n't and 's are separate tokens).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from electra.data.corpus import iter_documents, split_sentences

# Alternatives are tried in order at each position: the stem before n't, n't, other clitics,
# numbers with inner . or , (3.5, 1,000), abbreviations that keep their period as in the Penn
# Treebank (U.S., Inc., Mr.), words with inner hyphens or periods, then one punctuation
# character (or ... and --) at a time.
_ABBREVIATION = (r"(?:[A-Za-z]\.){2,}|(?:Mr|Mrs|Ms|Dr|Jr|Sr|St|Inc|Corp|Co|Ltd|Bros"
                 r"|Jan|Feb|Aug|Sept|Oct|Nov|Dec)\.")
_CLITICS = r"[A-Za-z]+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\d+(?:[.,]\d+)*|"
_REST = r"\w+(?:[-.]\w+)*|\.\.\.|--|[^\w\s]"
_TOKEN = re.compile(_CLITICS + _ABBREVIATION + "|" + _REST, re.IGNORECASE)
_TOKEN_BEFORE = re.compile(_CLITICS + _REST, re.IGNORECASE)  # clean=False: as before
_MARKUP = re.compile(r"<br\s*/?>|<[^>\s]{1,20}>", re.IGNORECASE)  # IMDB's <br /> and similar
_HEADING = re.compile(r"^[^a-z]*[A-Z][^a-z]*$")  # a line with letters, all upper case


def tokenize(text: str, clean: bool = True) -> list[str]:
    """Penn-Treebank-like word tokens of one sentence. With `clean`, abbreviations keep their
    period, HTML entities are decoded after markup is removed, and the angle brackets left over
    are dropped: NLTK Reuters writes company names as `&lt;Allied-Lyons>`, which would
    otherwise become `& lt ; Allied-Lyons >`, and neither CoNLL-2000 nor the reference's news
    corpus has such tokens."""
    text = _MARKUP.sub(" ", text)
    if not clean:
        return _TOKEN_BEFORE.findall(text)
    return _TOKEN.findall(html.unescape(text).replace("<", " ").replace(">", " "))


def iter_sentences(paths: Sequence[str | Path], text_field: str = "text",
                   max_len: int = 100, clean: bool = True) -> Iterator[list[str]]:
    """Word-tokenised sentences of 2..max_len words (the reference limits unlabeled sentences
    to 100 words; one-word "sentences" are mostly headings and list debris). `clean=False`
    keeps headings and entities as they were read before 2026-11-24 (cvt_probe.py --before)."""
    for doc in iter_documents(paths, text_field=text_field):
        # Line breaks inside a document are mostly wrapping (Reuters, Gutenberg), and the
        # shared splitter ends a sentence at every newline, so lines are joined first. An
        # all-capitals line is a heading (every Reuters story opens with one), not text: joined,
        # it would start the first sentence with capitals that labeled text never has.
        lines = doc.text.split("\n")
        if clean and len(lines) > 1:  # a one-line document is text, whatever its case
            lines = [line for line in lines if not _HEADING.match(line.strip())]
        for sent in split_sentences(" ".join(" ".join(lines).split())):
            words = tokenize(sent, clean)
            if 2 <= len(words) <= max_len:
                yield words


def load_sentences(paths: Sequence[str | Path], max_sentences: int, text_field: str = "text",
                   max_len: int = 100, clean: bool = True) -> list[list[str]]:
    """The first `max_sentences` sentences of the corpus, in corpus order."""
    out: list[list[str]] = []
    for words in iter_sentences(paths, text_field, max_len, clean):
        out.append(words)
        if len(out) >= max_sentences:
            break
    return out

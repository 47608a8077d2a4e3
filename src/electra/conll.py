"""Labeled sentence files, read once for every tagger (fine-tuning and CVT alike).

Two formats: whitespace columns as in CoNLL-2000 chunking and CoNLL-2003 NER (word first,
label in a fixed column, IOB1 or IOB2, -DOCSTART- lines between documents) and CoNLL-U (UD:
UPOS tags, heads, relations; comments, multiword tokens and empty nodes). Files may be
gzipped. Malformed input is a one-line `file:line: what is wrong` error, raised before any
training starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from electra.data.corpus import iter_lines
from electra.errors import ElectraError
from electra.tagschemes import iob1_to_iob2, is_valid_iob

DOCSTART = "-DOCSTART-"


@dataclass
class Sentence:
    """Words with whichever annotations the file has; `where` is "file:line" of its first
    word. `upos` is kept for dependency files so punctuation can be left out of UAS/LAS."""

    words: list[str]
    tags: list[str] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    rels: list[str] = field(default_factory=list)
    upos: list[str] = field(default_factory=list)
    where: str = ""


def _blocks(path: Path, skip: Callable[[str], bool]) -> Iterator[list[tuple[int, str]]]:
    """Blank-line separated blocks of (line number, line); a line for which `skip` holds ends
    the current block and is dropped."""
    if not path.is_file():
        raise ElectraError(f"{path}: file not found")
    block: list[tuple[int, str]] = []
    for lineno, line in iter_lines(path):
        if not line.strip() or skip(line):
            if block:
                yield block
            block = []
            continue
        block.append((lineno, line))
    if block:
        yield block


def _is_docstart(line: str) -> bool:
    return line.split(maxsplit=1)[0] == DOCSTART


def read_columns(path: str | Path, *, tag_column: int = -1, labeled: bool = True,
                 check_iob: bool = True, iob2: bool = False) -> list[Sentence]:
    """CoNLL-2000/2003 files: word first, label in `tag_column` (the last by default), the
    same number of columns (at least 2) on every line. With `check_iob` labels must be IOB
    ("O", "B-X", "I-X"); `iob2` converts IOB1 files (CoNLL-2003) to IOB2. With
    `labeled=False` (input to predict) a file of words alone, one per line, is read too."""
    path = Path(path)
    sentences: list[Sentence] = []
    ncols = None
    for block in _blocks(path, _is_docstart):
        words, tags = [], []
        for lineno, line in block:
            fields = line.split()
            if ncols is None:
                ncols = len(fields)
                if ncols < 2 and labeled:
                    raise ElectraError(f"{path}:{lineno}: 1 column, expected a word and a label")
                if ncols > 1 and not -ncols <= tag_column < ncols:
                    raise ElectraError(f"{path}:{lineno}: {ncols} columns, expected the label "
                                       f"in column {tag_column + 1}")
            if len(fields) != ncols:
                raise ElectraError(f"{path}:{lineno}: {len(fields)} columns, expected {ncols}")
            if ncols > 1 and check_iob and not is_valid_iob(fields[tag_column]):
                raise ElectraError(f"{path}:{lineno}: label {fields[tag_column]!r} is not IOB "
                                   "(O, B-TYPE or I-TYPE)")
            words.append(fields[0])
            if ncols > 1:
                tags.append(fields[tag_column])
        sentences.append(Sentence(words, tags=iob1_to_iob2(tags) if iob2 else tags,
                                  where=f"{path}:{block[0][0]}"))
    if not sentences:
        raise ElectraError(f"{path}: no sentences")
    return sentences


def read_conllu(path: str | Path, *, tree: bool = True, tag_column: int = 3
                ) -> list[Sentence]:
    """CoNLL-U: 10 tab-separated columns; comment lines ("#"), multiword-token ranges ("3-4")
    and empty nodes ("5.1") are skipped, the remaining IDs must run 1..n and every HEAD lie
    in 0..n. `tags` come from `tag_column` (UPOS by default), `upos` always from UPOS. With
    `tree=False` (POS tagging, input to predict) HEAD and DEPREL may be "_" and are not
    read."""
    path = Path(path)
    sentences: list[Sentence] = []
    for block in _blocks(path, lambda line: line.startswith("#")):
        s = Sentence([])
        head_lines = []
        for lineno, line in block:
            cols = line.split("\t")
            if len(cols) != 10:
                raise ElectraError(f"{path}:{lineno}: {len(cols)} tab-separated columns, "
                                   "expected 10 (CoNLL-U)")
            ident = cols[0]
            if "-" in ident or "." in ident:
                continue
            if not ident.isdigit() or int(ident) != len(s.words) + 1:
                raise ElectraError(f"{path}:{lineno}: word ID {ident!r}, expected "
                                   f"{len(s.words) + 1}")
            if not s.words:
                s.where = f"{path}:{lineno}"
            s.words.append(cols[1])
            s.upos.append(cols[3])
            s.tags.append(cols[tag_column])
            if not tree:
                continue
            if not cols[6].isdigit():
                raise ElectraError(f"{path}:{lineno}: HEAD {cols[6]!r} is not a number")
            if not cols[7] or cols[7] == "_":
                raise ElectraError(f"{path}:{lineno}: no DEPREL")
            s.heads.append(int(cols[6]))
            s.rels.append(cols[7])
            head_lines.append(lineno)
        for head, lineno in zip(s.heads, head_lines, strict=True):
            if head > len(s.words):
                raise ElectraError(f"{path}:{lineno}: HEAD {head} is past the sentence's "
                                   f"{len(s.words)} words")
        if s.words:
            sentences.append(s)
    if not sentences:
        raise ElectraError(f"{path}: no sentences")
    return sentences

"""Labeled sentence files: CoNLL-2000 chunking and CoNLL-2003 NER (whitespace columns, word
first, label last, IOB1 or IOB2, -DOCSTART- lines) and CoNLL-U (UD: UPOS tags, heads,
relations). Malformed input is a one-line `file:line: what is wrong` error, raised before any
training starts; outputs are written atomically.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from electra.cvt.tags import is_valid_iob
from electra.data.corpus import iter_lines
from electra.errors import ElectraError
from electra.fileutil import write_atomic


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


def _blocks(path: Path, skip: Sequence[str] = ()) -> Iterator[list[tuple[int, str]]]:
    """Blank-line separated blocks of (line number, line); lines starting with any prefix in
    `skip` end the current block and are dropped."""
    if not path.is_file():
        raise ElectraError(f"{path}: file not found")
    block: list[tuple[int, str]] = []
    for lineno, line in iter_lines(path):
        if not line.strip() or any(line.startswith(p) for p in skip):
            if block:
                yield block
            block = []
            continue
        block.append((lineno, line))
    if block:
        yield block


def read_columns(path: str | Path, check_iob: bool = True, labeled: bool = True
                 ) -> list[Sentence]:
    """CoNLL-2000/2003 files: word first, label in the last column, the same number of
    columns (at least 2) on every line. Labels must be IOB ("O", "B-X", "I-X").
    With `labeled=False` (input to predict) a file of words alone, one per line, is read too."""
    path = Path(path)
    sentences: list[Sentence] = []
    ncols = None
    for block in _blocks(path, skip=("-DOCSTART-",)):
        words, tags = [], []
        for lineno, line in block:
            fields = line.split()
            if ncols is None:
                ncols = len(fields)
                if ncols < 2 and labeled:
                    raise ElectraError(f"{path}:{lineno}: 1 column, expected a word and a label")
            if len(fields) != ncols:
                raise ElectraError(f"{path}:{lineno}: {len(fields)} columns, expected {ncols}")
            if ncols > 1 and check_iob and not is_valid_iob(fields[-1]):
                raise ElectraError(f"{path}:{lineno}: label {fields[-1]!r} is not IOB "
                                   "(O, B-TYPE or I-TYPE)")
            words.append(fields[0])
            if ncols > 1:
                tags.append(fields[-1])
        sentences.append(Sentence(words, tags=tags, where=f"{path}:{block[0][0]}"))
    if not sentences:
        raise ElectraError(f"{path}: no sentences")
    return sentences


def read_conllu(path: str | Path, tree: bool = True) -> list[Sentence]:
    """CoNLL-U: 10 tab-separated columns; multiword-token ranges ("3-4") and empty nodes
    ("5.1") are skipped, the remaining IDs must run 1..n and every HEAD lie in 0..n.
    With `tree=False` (POS tagging, input to predict) HEAD and DEPREL may be "_" and are not
    read."""
    path = Path(path)
    sentences: list[Sentence] = []
    for block in _blocks(path, skip=("#",)):
        s = Sentence([], where=f"{path}:{block[0][0]}")
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
            s.words.append(cols[1])
            s.upos.append(cols[3])
            s.tags.append(cols[3])
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


def write_tagged(path: str | Path, sentences: Sequence[Sentence],
                 preds: Sequence[Sequence[str]]) -> Path:
    """conlleval's input: `word gold predicted` per line (`word predicted` with no gold)."""
    lines = []
    for s, pred in zip(sentences, preds, strict=True):
        for i, word in enumerate(s.words):
            lines.append(" ".join([word, s.tags[i], pred[i]] if s.tags else [word, pred[i]]))
        lines.append("")
    return write_atomic(path, "\n".join(lines) + "\n")


def write_conllu(path: str | Path, sentences: Sequence[Sentence],
                 heads: Sequence[Sequence[int]], rels: Sequence[Sequence[str]]) -> Path:
    """CoNLL-U with the predicted HEAD and DEPREL (UPOS copied from the input when known)."""
    lines = []
    for s, hs, rs in zip(sentences, heads, rels, strict=True):
        for i, word in enumerate(s.words):
            upos = s.upos[i] if s.upos else "_"
            lines.append("\t".join([str(i + 1), word, "_", upos, "_", "_", str(hs[i]), rs[i],
                                    "_", "_"]))
        lines.append("")
    return write_atomic(path, "\n".join(lines) + "\n")

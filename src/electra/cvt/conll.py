"""CVT's prediction files: conlleval columns for tagging, CoNLL-U for parsing, written
atomically. Input files are read by `electra.conll`, shared with fine-tuning; its names are
re-exported here for the modules that import them from this one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from electra.conll import Sentence, read_columns, read_conllu
from electra.fileutil import write_atomic

__all__ = ["Sentence", "read_columns", "read_conllu", "write_conllu", "write_tagged"]


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

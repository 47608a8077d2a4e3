"""BIOES tagging (section 4.3.1): chunking and NER are trained with BIOES labels, which mark
single-token and chunk-final words explicitly, and converted back to IOB2 for scoring.

Input may be IOB1 or IOB2 (CoNLL-2003 is IOB1); both become IOB2 first, so the chunks never
change: `from_bioes(to_bioes(tags)) == iob1_to_iob2(tags)`.
"""

from __future__ import annotations

from collections.abc import Sequence

from electra.tasks.metrics import iob1_to_iob2


def _parts(tag: str) -> tuple[str, str]:
    if tag == "O":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def is_valid_iob(tag: str) -> bool:
    """"O" or "B-X"/"I-X" with a non-empty type X."""
    prefix, kind = _parts(tag)
    return tag == "O" or (prefix in ("B", "I") and bool(kind))


def to_bioes(tags: Sequence[str]) -> list[str]:
    """IOB1/IOB2 -> BIOES: a chunk of one word is S-, its last word E-."""
    iob2 = iob1_to_iob2(tags)
    out: list[str] = []
    for i, tag in enumerate(iob2):
        prefix, kind = _parts(tag)
        if prefix == "O":
            out.append("O")
            continue
        nxt = iob2[i + 1] if i + 1 < len(iob2) else "O"
        continues = _parts(nxt) == ("I", kind)
        if prefix == "B":
            out.append(f"B-{kind}" if continues else f"S-{kind}")
        else:
            out.append(f"I-{kind}" if continues else f"E-{kind}")
    return out


def from_bioes(tags: Sequence[str]) -> list[str]:
    """BIOES -> IOB2. Ill-formed predicted sequences (an E- or I- with no opener) start a new
    chunk, as conlleval reads them, so a model's mistakes are scored, not repaired silently."""
    out: list[str] = []
    prev_open = ""  # type of the chunk still open after the previous word, "" if none
    for tag in tags:
        prefix, kind = _parts(tag)
        if prefix == "O":
            out.append("O")
            prev_open = ""
        elif prefix in ("B", "S"):
            out.append(f"B-{kind}")
            prev_open = kind if prefix == "B" else ""
        else:  # I or E
            out.append(f"I-{kind}" if prev_open == kind else f"B-{kind}")
            prev_open = kind if prefix == "I" else ""
    return out

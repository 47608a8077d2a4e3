"""Chunk label schemes: IOB1, IOB2 and BIOES, one module for every tagger.

CoNLL-2000 is IOB2 (B- starts every chunk), CoNLL-2003 is IOB1 (B- only between two adjacent
chunks of one type). Fine-tuning trains and scores on IOB2; CVT trains on BIOES (section
4.3.1), which marks single-word and chunk-final words explicitly, and converts back to IOB2
for scoring. Both conversions keep the chunks: `from_bioes(to_bioes(tags)) ==
iob1_to_iob2(tags)`.
"""

from __future__ import annotations

from collections.abc import Sequence


def _parts(tag: str) -> tuple[str, str]:
    if tag == "O":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def is_valid_iob(tag: str) -> bool:
    """"O" or "B-X"/"I-X" with a non-empty type X."""
    prefix, kind = _parts(tag)
    return tag == "O" or (prefix in ("B", "I") and bool(kind))


def split_tag(tag: str) -> tuple[str, str]:
    """("B", "NP") from "B-NP"; ("O", "") from "O"; a bare "NP" reads as ("I", "NP"), as
    conlleval reads it (span F1 and the IOB1 conversion read predictions this way)."""
    if tag == "O" or not tag:
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return (prefix, kind) if kind else ("I", prefix)


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 (B- only between two adjacent chunks of one type) to IOB2 (B- starts every chunk);
    the chunks are unchanged, so span F1 is the same on either encoding."""
    out: list[str] = []
    prev, prev_type = "O", ""
    for tag in tags:
        cur, kind = split_tag(tag)
        if cur == "I" and (prev == "O" or prev_type != kind):
            cur = "B"
        out.append("O" if cur == "O" else f"{cur}-{kind}")
        prev, prev_type = cur, kind
    return out


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

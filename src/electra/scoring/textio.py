"""Reading texts and JSON lines for the scoring commands, and writing results atomically."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from electra.data.corpus import iter_json_lines, iter_lines
from electra.errors import ElectraError
from electra.fileutil import write_atomic


def is_jsonl(path: str | Path) -> bool:
    name = Path(path).name.removesuffix(".gz")
    return name.endswith((".jsonl", ".json", ".ndjson"))


def iter_json_objects(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) per non-blank line; a bad line is an error naming FILE:LINE."""
    _check_exists(path)
    for lineno, obj in iter_json_lines(Path(path)):
        if not isinstance(obj, dict):
            raise ElectraError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, obj


def _check_exists(path: str | Path) -> None:
    if not Path(path).is_file():
        raise ElectraError(f"{path}: input file does not exist")


def read_texts(path: str | Path, text_field: str = "text") -> list[tuple[int, str]]:
    """(line number, text) pairs: one text per non-blank line of a plain file, or the
    `text_field` of each object of a JSON lines file (.jsonl/.json/.ndjson, .gz ok). A file
    with no text is an error: a score of nothing is a mistake, not a result."""
    texts = _read_texts(path, text_field)
    if not texts:
        raise ElectraError(f"{path}: no text to score (the file is empty or blank)")
    return texts


def _read_texts(path: str | Path, text_field: str) -> list[tuple[int, str]]:
    if is_jsonl(path):
        out = []
        for lineno, obj in iter_json_objects(path):
            value = obj.get(text_field)
            if not isinstance(value, str):
                raise ElectraError(f"{path}:{lineno}: no string field {text_field!r} "
                                   "(choose it with --text-field)")
            out.append((lineno, value))
        return out
    _check_exists(path)
    return [(n, line) for n, line in iter_lines(Path(path)) if line.strip()]


def write_json_lines_atomic(path: str | Path, rows: Iterable[dict]) -> Path:
    """One JSON object per line, written atomically (no half-written output)."""
    return write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n"
                                      for row in rows))


def write_json_atomic(path: str | Path, obj: dict) -> Path:
    return write_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")

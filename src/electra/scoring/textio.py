"""Reading texts and JSON lines for the scoring commands, and writing results atomically."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from electra.errors import ElectraError


def open_text(path: str | Path) -> IO[str]:
    p = Path(path)
    if not p.is_file():
        raise ElectraError(f"{p}: input file does not exist")
    if p.name.endswith(".gz"):
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")


def is_jsonl(path: str | Path) -> bool:
    name = Path(path).name.removesuffix(".gz")
    return name.endswith((".jsonl", ".json", ".ndjson"))


def iter_json_lines(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) per non-blank line; a bad line is an error naming FILE:LINE."""
    with open_text(path) as handle:
        try:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ElectraError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise ElectraError(f"{path}:{lineno}: expected a JSON object")
                yield lineno, obj
        except UnicodeDecodeError:
            raise ElectraError(f"{path}: not valid UTF-8") from None
        except (OSError, EOFError) as e:  # truncated or corrupt .gz
            raise ElectraError(f"{path}: unreadable ({e})") from None


def read_texts(path: str | Path, text_field: str = "text") -> list[tuple[int, str]]:
    """(line number, text) pairs: one text per non-blank line of a plain file, or the
    `text_field` of each object of a JSON lines file (.jsonl/.json/.ndjson, .gz ok)."""
    if is_jsonl(path):
        out = []
        for lineno, obj in iter_json_lines(path):
            value = obj.get(text_field)
            if not isinstance(value, str):
                raise ElectraError(f"{path}:{lineno}: no string field {text_field!r} "
                                   "(choose it with --text-field)")
            out.append((lineno, value))
        return out
    with open_text(path) as handle:
        try:
            return [(n, line.rstrip("\r\n")) for n, line in enumerate(handle, start=1)
                    if line.strip()]
        except UnicodeDecodeError:
            raise ElectraError(f"{path}: not valid UTF-8") from None


def write_json_lines_atomic(path: str | Path, rows: Iterable[dict]) -> Path:
    """Write to a temporary file beside `path`, then rename: no half-written output."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def write_json_atomic(path: str | Path, obj: dict) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out

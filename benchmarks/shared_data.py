"""The repository's data folder (../shared/data, beside it; see its SOURCES.md) and the text that
benchmarks and experiments prepare from it the same way, so that a benchmark never imports a
study."""

from __future__ import annotations

import gzip
from pathlib import Path

from electra.errors import ElectraError
from electra.fileutil import write_atomic

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
IMDB_REVIEWS = 25_000  # the IMDB part of the CPU recipe's text mix (docs/experiments/cpu-recipe.md)


def imdb_reviews(corpus_dir: Path, out: Path, n: int = IMDB_REVIEWS, skip: int = 0) -> Path:
    """`n` unlabeled IMDB reviews after the first `skip`, as JSON lines, `<br />` turned into
    line breaks (with `skip=0`, what docs/experiments/cpu-recipe.md's `zcat | head | sed`
    writes, byte for byte). An existing `out` is reused as it is: name it after `n` and
    `skip`."""
    if out.is_file():
        return out
    source = corpus_dir / "aclImdb" / "unsup.jsonl.gz"
    if not source.is_file():
        raise ElectraError(f"{source}: not found (the IMDB part of the recipe's text mix)")
    lines = []
    with gzip.open(source, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if len(lines) == n:
                break
            if i < skip:
                continue
            lines.append(line.replace("<br />", "\\n").replace("<br/>", "\\n"))
    write_atomic(out, "".join(lines))
    return out

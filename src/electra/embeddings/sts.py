"""Semantic textual similarity: the cosine of two texts' vectors against gold scores, as
Spearman and Pearson correlations (sentence-transformers' `EmbeddingSimilarityEvaluator` with
cosine similarity; SentEval and MTEB report the same).

Data: a TSV or CSV file with a header naming `sentence1`, `sentence2` and `score` (GLUE's
STS-B `dev.tsv` is one; its other columns are ignored), or JSON lines with those fields. A
folder means its `dev.tsv` (or STS-B/dev.tsv, GLUE's layout).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr, spearmanr

from electra.errors import ElectraError

FIELDS = ("sentence1", "sentence2", "score")


def sts_file(data: str | Path, split: str = "dev") -> Path:
    path = Path(data)
    if path.is_dir():
        for candidate in (path / f"{split}.tsv", path / "STS-B" / f"{split}.tsv",
                          path / f"{split}.jsonl"):
            if candidate.is_file():
                return candidate
        raise ElectraError(f"{path}: no {split}.tsv, STS-B/{split}.tsv or {split}.jsonl")
    if not path.is_file():
        raise ElectraError(f"{path}: no such file")
    return path


def read_sts(path: str | Path) -> list[tuple[str, str, float]]:
    """(sentence1, sentence2, gold score) per row."""
    path = Path(path)
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as handle:
            rows = [(n, json.loads(line)) for n, line in enumerate(handle, 1) if line.strip()]
    else:
        delimiter = "," if path.suffix == ".csv" else "\t"
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle, delimiter=delimiter, quoting=csv.QUOTE_NONE)
            missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
            if missing:
                raise ElectraError(f"{path}:1: the header lacks {', '.join(missing)} (it needs "
                                   f"{', '.join(FIELDS)})")
            rows = list(enumerate(reader, 2))
    pairs = []
    for lineno, row in rows:
        try:
            pairs.append((str(row["sentence1"]), str(row["sentence2"]), float(row["score"])))
        except (KeyError, TypeError, ValueError):
            raise ElectraError(f"{path}:{lineno}: expected sentence1, sentence2 and a numeric "
                               "score") from None
    if len(pairs) < 2:
        raise ElectraError(f"{path}: {len(pairs)} pairs; a correlation needs at least 2")
    return pairs


def sts_scores(embed: Callable[[list[str]], np.ndarray],
               pairs: list[tuple[str, str, float]]) -> dict[str, float]:
    """Spearman and Pearson correlation (x100 is how papers print them) of cosine similarity
    with the gold scores."""
    a = embed([p[0] for p in pairs])
    b = embed([p[1] for p in pairs])
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    cosine = (a * b).sum(1)
    gold = np.array([p[2] for p in pairs])
    return {"spearman": float(spearmanr(gold, cosine)[0]),
            "pearson": float(pearsonr(gold, cosine)[0])}

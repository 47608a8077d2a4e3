"""Minimal-pair evaluation (BLiMP, Warstadt et al. 2020): a model prefers the grammatical
sentence of a pair when its PLL is higher. Ties count as errors, as in BLiMP's own LM
evaluation (the good sentence must score strictly higher)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.errors import ElectraError
from electra.progress import Progress
from electra.scoring.pll import PllScorer
from electra.scoring.textio import iter_json_objects

FIELDS = ("UID", "field", "linguistics_term", "pairID", "sentence_good", "sentence_bad")


@dataclass(frozen=True)
class MinimalPair:
    uid: str  # the paradigm (67 in BLiMP)
    field: str  # morphology, syntax, semantics, syntax_semantics
    phenomenon: str  # BLiMP's linguistics_term (12 phenomena)
    pair_id: str
    good: str
    bad: str


def read_minimal_pairs(path: str | Path, limit: int | None = None) -> list[MinimalPair]:
    """Pairs in file order; with `limit`, the first `limit` pairs of each paradigm (UID)."""
    if limit is not None and limit < 1:
        raise ElectraError(f"--limit must be positive, got {limit}")
    pairs: list[MinimalPair] = []
    per_uid: dict[str, int] = defaultdict(int)
    for lineno, obj in iter_json_objects(path):
        for name in FIELDS:
            if not isinstance(obj.get(name), (str, int)):
                raise ElectraError(f"{path}:{lineno}: missing field {name!r}")
        uid = str(obj["UID"])
        if limit is not None and per_uid[uid] >= limit:
            continue
        per_uid[uid] += 1
        pairs.append(MinimalPair(uid, str(obj["field"]), str(obj["linguistics_term"]),
                                 str(obj["pairID"]), str(obj["sentence_good"]),
                                 str(obj["sentence_bad"])))
    if not pairs:
        raise ElectraError(f"{path}: no minimal pairs")
    return pairs


def pair_accuracy(pairs: Sequence[MinimalPair], good: Sequence[float], bad: Sequence[float]
                  ) -> dict:
    """Share of pairs with good > bad: overall, macro-averaged over paradigms, and per field,
    phenomenon and paradigm."""
    groups: dict[str, dict[str, list[int]]] = {"by_field": defaultdict(lambda: [0, 0]),
                                               "by_phenomenon": defaultdict(lambda: [0, 0]),
                                               "by_uid": defaultdict(lambda: [0, 0])}
    correct_total = 0
    for pair, g, b in zip(pairs, good, bad, strict=True):
        correct = int(g > b)
        correct_total += correct
        for key, value in (("by_field", pair.field), ("by_phenomenon", pair.phenomenon),
                           ("by_uid", pair.uid)):
            groups[key][value][0] += correct
            groups[key][value][1] += 1
    out: dict = {"pairs": len(pairs), "accuracy": correct_total / len(pairs)}
    by_uid = groups["by_uid"]
    out["macro_accuracy"] = sum(c / n for c, n in by_uid.values()) / len(by_uid)
    for key, table in groups.items():
        out[key] = {name: {"accuracy": c / n, "pairs": n} for name, (c, n) in sorted(table.items())}
    return out


def evaluate_minimal_pairs(scorer: PllScorer, pairs: Sequence[MinimalPair],
                           batch_size: int = 32, progress: bool | Progress = False) -> dict:
    """Score every distinct sentence once, then compare each pair."""
    sentences = sorted({s for p in pairs for s in (p.good, p.bad)})
    plls = dict(zip(sentences, scorer.pll(sentences, batch_size, progress), strict=True))
    result = pair_accuracy(pairs, [plls[p.good] for p in pairs], [plls[p.bad] for p in pairs])
    return {"scorer": scorer.name, **result}

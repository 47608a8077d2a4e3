"""Task metrics as the papers report them (dissertation section 2.6): accuracy, binary F1,
Matthews correlation (CoLA), Pearson/Spearman (STS-B), and conlleval's span-level F1 (chunking,
NER). All values are fractions in [0, 1] (correlations in [-1, 1]), not percentages."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from electra.tagschemes import split_tag


def accuracy(preds: Sequence, golds: Sequence) -> float:
    if not golds:
        return 0.0
    return float(np.mean([p == g for p, g in zip(preds, golds, strict=True)]))


def binary_f1(preds: Sequence, golds: Sequence, positive="1") -> float:
    """F1 of the positive class (MRPC, QQP report it for the "1" class)."""
    tp = sum(p == positive and g == positive for p, g in zip(preds, golds, strict=True))
    fp = sum(p == positive and g != positive for p, g in zip(preds, golds, strict=True))
    fn = sum(p != positive and g == positive for p, g in zip(preds, golds, strict=True))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def matthews_corrcoef(preds: Sequence, golds: Sequence, positive="1") -> float:
    """Binary MCC; 0 when undefined (a constant prediction), as scikit-learn returns."""
    p = np.array([x == positive for x in preds])
    g = np.array([x == positive for x in golds])
    tp, tn = float(np.sum(p & g)), float(np.sum(~p & ~g))
    fp, fn = float(np.sum(p & ~g)), float(np.sum(~p & g))
    denom = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if denom == 0 else (tp * tn - fp * fn) / denom


def pearson(preds: Sequence[float], golds: Sequence[float]) -> float:
    from scipy.stats import pearsonr

    if np.std(preds) == 0 or np.std(golds) == 0:
        return 0.0
    return float(pearsonr(preds, golds)[0])


def spearman(preds: Sequence[float], golds: Sequence[float]) -> float:
    from scipy.stats import spearmanr

    if np.std(preds) == 0 or np.std(golds) == 0:
        return 0.0
    return float(spearmanr(preds, golds)[0])


# --- span F1 as conlleval computes it ---------------------------------------------------------


def _end_of_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    # conlleval's endOfChunk: accepts IOB1, IOB2 and IOBES alike.
    return (prev in ("E", "S")
            or (prev in ("B", "I") and tag in ("B", "S", "O"))
            or (prev != "O" and prev_type != kind))


def _start_of_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    return (tag in ("B", "S")
            or (prev in ("E", "S", "O") and tag in ("E", "I"))
            or (tag != "O" and prev_type != kind))


def chunks(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """(start, end inclusive, type) of each chunk in one sentence's tags."""
    found: set[tuple[int, int, str]] = set()
    prev, prev_type, start = "O", "", -1
    for i, tag in enumerate([*tags, "O"]):
        cur, kind = split_tag(tag)
        if start >= 0 and _end_of_chunk(prev, cur, prev_type, kind):
            found.add((start, i - 1, prev_type))
            start = -1
        if _start_of_chunk(prev, cur, prev_type, kind):
            start = i
        prev, prev_type = cur, kind
    return found


def span_f1(pred_sents: Sequence[Sequence[str]], gold_sents: Sequence[Sequence[str]]
            ) -> dict[str, float]:
    """Micro precision/recall/F1 over exactly matching typed chunks (conlleval; IOB1 or IOB2)."""
    correct = n_pred = n_gold = 0
    for pred, gold in zip(pred_sents, gold_sents, strict=True):
        p, g = chunks(pred), chunks(gold)
        correct += len(p & g)
        n_pred += len(p)
        n_gold += len(g)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}

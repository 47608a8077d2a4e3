"""Fine-tuning metrics against scikit-learn, scipy and seqeval (conlleval-compatible mode)."""

from __future__ import annotations

import random

import pytest
from scipy.stats import pearsonr, spearmanr
from seqeval.metrics import f1_score as seqeval_f1
from seqeval.metrics import precision_score, recall_score
from sklearn.metrics import f1_score, matthews_corrcoef

from electra.tagschemes import iob1_to_iob2
from electra.tasks import metrics as M


def _labels(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice("01") for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_metrics_match_sklearn(seed: int) -> None:
    golds, preds = _labels(200, seed), _labels(200, seed + 10)
    assert M.matthews_corrcoef(preds, golds) == pytest.approx(matthews_corrcoef(golds, preds))
    assert M.binary_f1(preds, golds) == pytest.approx(f1_score(golds, preds, pos_label="1"))
    assert M.accuracy(preds, golds) == pytest.approx(
        sum(p == g for p, g in zip(preds, golds, strict=True)) / 200)


def test_mcc_hand_computed_and_degenerate() -> None:
    # tp=2 tn=1 fp=1 fn=0: (2*1 - 1*0) / sqrt(3 * 2 * 2 * 1)
    assert M.matthews_corrcoef(list("1110"), list("1100")) == pytest.approx(2 / 12**0.5)
    assert M.matthews_corrcoef(list("1111"), list("1100")) == 0.0  # constant prediction


def test_correlations_match_scipy() -> None:
    rng = random.Random(3)
    golds = [rng.uniform(0, 5) for _ in range(100)]
    preds = [g + rng.gauss(0, 1) for g in golds]
    assert M.pearson(preds, golds) == pytest.approx(pearsonr(preds, golds)[0])
    assert M.spearman(preds, golds) == pytest.approx(spearmanr(preds, golds)[0])
    assert M.pearson([1.0] * 5, [1, 2, 3, 4, 5]) == 0.0


def test_chunks_iob1_and_iob2() -> None:
    # IOB1: I- starts a chunk after O; B- only splits two adjacent same-type chunks.
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]
    assert M.chunks(iob1) == {(0, 1, "PER"), (2, 2, "PER"), (4, 4, "LOC"), (5, 5, "ORG")}
    iob2 = iob1_to_iob2(iob1)
    assert iob2 == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    assert M.chunks(iob2) == M.chunks(iob1)
    # A stray I- after a different type starts a new chunk (conlleval).
    assert M.chunks(["B-NP", "I-VP", "I-VP"]) == {(0, 0, "NP"), (1, 2, "VP")}


def test_span_f1_hand_computed() -> None:
    gold = [["B-NP", "I-NP", "O", "B-VP"], ["B-PP", "B-NP"]]
    pred = [["B-NP", "I-NP", "O", "B-NP"], ["B-PP", "O"]]
    # gold chunks 4, predicted 3, correct 2 (NP 0-1, PP): P 2/3, R 1/2, F1 4/7
    assert M.span_f1(pred, gold) == pytest.approx(
        {"precision": 2 / 3, "recall": 0.5, "f1": 4 / 7})


def _random_tags(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(["O", "B-A", "I-A", "B-B", "I-B", "O"]) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_span_f1_matches_seqeval_on_iob1_and_iob2(seed: int) -> None:
    rng = random.Random(seed)
    gold = [_random_tags(rng, rng.randint(1, 12)) for _ in range(40)]
    pred = [_random_tags(rng, len(g)) for g in gold]
    ours = M.span_f1(pred, gold)  # raw tags: read as IOB1 (and stray I- as conlleval does)
    assert ours["f1"] == pytest.approx(seqeval_f1(gold, pred))
    assert ours["precision"] == pytest.approx(precision_score(gold, pred))
    assert ours["recall"] == pytest.approx(recall_score(gold, pred))
    gold2 = [iob1_to_iob2(s) for s in gold]
    pred2 = [iob1_to_iob2(s) for s in pred]
    assert M.span_f1(pred2, gold2)["f1"] == pytest.approx(seqeval_f1(gold2, pred2))
    assert M.span_f1(pred2, gold2) == pytest.approx(ours)  # conversion keeps the chunks

"""SQuAD metrics against hand-computed values of the official v1.1 / v2.0 scripts' rules."""

from __future__ import annotations

import pytest

from electra.tasks.squad.metrics import (
    evaluate_v1,
    evaluate_v2,
    exact_match,
    f1_v1,
    f1_v2,
    find_best_thresh,
    normalize_answer,
)


def _dataset(qas: list[dict]) -> dict:
    return {"version": "test", "data": [{"title": "T", "paragraphs": [
        {"context": "unused", "qas": qas}]}]}


def _qa(qid: str, *golds: str) -> dict:
    return {"id": qid, "question": "?", "answers": [{"text": g, "answer_start": 0} for g in golds]}


@pytest.mark.parametrize(("raw", "normalized"), [
    ("The Cat!", "cat"),
    ("an apple, a pear and THE plum.", "apple pear and plum"),
    ("theater another", "theater another"),  # articles only as whole words
    ("  Denver\tBroncos \n", "denver broncos"),
    ("A.", ""),
    ("rock-n-roll's", "rocknrolls"),  # punctuation is deleted, not replaced by a space
    ("Café – “quoted”", "café – “quoted”"),  # only ASCII punctuation goes (string.punctuation)
])
def test_normalize_answer(raw: str, normalized: str) -> None:
    assert normalize_answer(raw) == normalized


def test_token_f1_by_hand() -> None:
    # pred {cat, sat} vs gold {cat, sat, on, mat}: P = 1, R = 1/2, F1 = 2/3.
    assert f1_v1("the cat sat", "a cat sat on the mat") == pytest.approx(2 / 3)
    # Counter overlap, not set overlap: x x y vs x y y share one x and one y: P = R = 2/3.
    assert f1_v1("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1_v1("dog", "cat") == 0.0
    assert exact_match("The Broncos.", "broncos") == 1.0
    # Empty after normalisation: v1.1 gives 0, v2.0 gives 1 only when both sides are empty.
    assert f1_v1("", "") == 0.0
    assert f1_v2("", "") == 1.0
    assert f1_v2("the", "") == 1.0
    assert f1_v2("", "cat") == 0.0


def test_evaluate_v1_max_over_golds_and_missing() -> None:
    data = _dataset([_qa("q1", "Denver Broncos", "the Broncos"), _qa("q2", "1990s", "the 1990s"),
                     _qa("q3", "Paris")])
    predictions = {"q1": "Broncos", "q2": "in the 1990s era"}
    with pytest.warns(UserWarning, match="1 of 3 questions have no prediction"):
        result = evaluate_v1(data, predictions)
    # q1: EM 1 (vs "the Broncos"), F1 1. q2: EM 0; F1 vs "1990s": P 1/3 R 1 -> 1/2. q3: 0.
    assert result["exact_match"] == pytest.approx(100 * 1 / 3)
    assert result["f1"] == pytest.approx(100 * 1.5 / 3)


def test_evaluate_v2_no_answer_and_breakdown() -> None:
    data = _dataset([_qa("a1", "blue sky"), _qa("a2", "red"), _qa("n1"), _qa("n2"),
                     _qa("n3", "the")])  # n3: its only gold normalises to "" -> unanswerable
    predictions = {"a1": "blue", "a2": "red", "n1": "", "n2": "something", "n3": ""}
    result = evaluate_v2(data, predictions)
    # exact: a1 0, a2 1, n1 1, n2 0, n3 1; f1: a1 2/3, a2 1, n1 1, n2 0, n3 1.
    assert result["total"] == 5
    assert result["exact"] == pytest.approx(100 * 3 / 5)
    assert result["f1"] == pytest.approx(100 * (2 / 3 + 3) / 5)
    # HasAns is by the gold list being non-empty (n3 has a gold, so it is "HasAns").
    assert result["HasAns_total"] == 3 and result["NoAns_total"] == 2
    assert result["HasAns_exact"] == pytest.approx(100 * 2 / 3)
    assert result["NoAns_exact"] == pytest.approx(50.0)
    assert "best_exact" not in result
    # The v2.0 script skips (does not zero) a missing prediction.
    del predictions["n2"]
    assert evaluate_v2(data, predictions)["exact"] == pytest.approx(75.0)


def test_evaluate_v2_threshold_and_best_threshold_search() -> None:
    data = _dataset([_qa("q1", "cat"), _qa("q2", "dog"), _qa("q3"), _qa("q4")])
    predictions = {"q1": "cat", "q2": "bird", "q3": "foo", "q4": "bar"}
    na_probs = {"q1": 0.1, "q2": 0.8, "q3": 0.3, "q4": 0.9}
    # Threshold 1.0 (the default): nothing is called unanswerable; only q1 is right.
    assert evaluate_v2(data, predictions, na_probs)["exact"] == pytest.approx(25.0)
    # Threshold 0.5: q2 and q4 become "no answer": q2 (answerable) 0, q4 1; q1 1, q3 0.
    result = evaluate_v2(data, predictions, na_probs, na_prob_thresh=0.5)
    assert result["exact"] == pytest.approx(50.0)
    # Search by hand: start at 2 (both unanswerable right); by na_prob q1 +1 -> 3 (best, at
    # 0.1), q3 -1 -> 2, q2 +0 -> 2, q4 -1 -> 1. Best 3/4 at threshold 0.1.
    assert result["best_exact"] == pytest.approx(75.0)
    assert result["best_exact_thresh"] == pytest.approx(0.1)
    assert result["best_f1"] == pytest.approx(75.0)
    has_ans = {"q1": True, "q2": True, "q3": False, "q4": False}
    scores = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 0.0}
    # With q2 half right: q1 -> 3 (best, 0.1), q3 -> 2, q2 -> 2.5, q4 -> 1.5.
    assert find_best_thresh(predictions, scores, na_probs, has_ans) == (75.0, 0.1)
    # An empty prediction on an unanswerable question costs nothing when the bar is lowered.
    predictions["q3"] = ""
    scores = {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    assert find_best_thresh(predictions, scores, na_probs, has_ans) == (100.0, 0.8)


def test_evaluate_v2_rejects_incomplete_na_probs() -> None:
    data = _dataset([_qa("q1", "cat"), _qa("q2")])
    with pytest.raises(ValueError, match="na_probs lacks 1"):
        evaluate_v2(data, {"q1": "cat", "q2": ""}, {"q1": 0.2})

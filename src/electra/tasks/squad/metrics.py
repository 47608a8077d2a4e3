"""SQuAD exact match and F1, reproducing the official evaluation scripts' numbers.

v1.1 ("evaluate-v1.1.py") and v2.0 ("evaluate-v2.0.py") differ in small ways that change the
scores, so each keeps its own rules here: v1.1 scores every question in the data set (a missing
prediction counts as 0) and gives F1 0 when normalisation leaves nothing; v2.0 skips missing
predictions, treats a question whose gold answers all normalise to "" as unanswerable (gold
[""]), gives F1 1 when both sides are empty, and can search the best no-answer threshold.
"""

from __future__ import annotations

import re
import string
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace (the
    official scripts' `normalize_answer`, in their order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_v1(prediction: str, gold: str) -> float:
    """v1.1 `f1_score`: bag-of-tokens F1 after normalisation; 0 if nothing overlaps."""
    return _token_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal (same rule in v1.1 and v2.0)."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_v2(prediction: str, gold: str) -> float:
    """v2.0 `compute_f1`: like v1.1, except an empty side scores 1 only if both are empty."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return _token_f1(pred_tokens, gold_tokens)


def _max_over(metric: Callable[[str, str], float], prediction: str, golds: list[str]) -> float:
    return max(metric(prediction, gold) for gold in golds)


def _questions(dataset_json: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every question dict of an official-format data set (the file's JSON, or its "data")."""
    articles = dataset_json["data"] if isinstance(dataset_json, Mapping) else dataset_json
    for article in articles:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def evaluate_v1(dataset_json: Mapping[str, Any],
                predictions: Mapping[str, str]) -> dict[str, float]:
    """Official v1.1 scores in percent. Missing predictions count as wrong (and are warned
    about once, with their number, where the official script prints one line each)."""
    total = exact = f1 = 0.0
    missing = 0
    for qa in _questions(dataset_json):
        total += 1
        if qa["id"] not in predictions:
            missing += 1
            continue
        golds = [answer["text"] for answer in qa["answers"]]
        prediction = predictions[qa["id"]]
        exact += _max_over(exact_match, prediction, golds)
        f1 += _max_over(f1_v1, prediction, golds)
    if missing:
        warnings.warn(f"{missing} of {int(total)} questions have no prediction (scored 0)",
                      stacklevel=2)
    if total == 0:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _raw_scores_v2(dataset_json: Mapping[str, Any], predictions: Mapping[str, str]
                   ) -> tuple[dict[str, float], dict[str, float], dict[str, bool]]:
    """v2.0 `get_raw_scores` (+ `make_qid_to_has_ans`): per-question EM and F1, no threshold."""
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    has_ans: dict[str, bool] = {}
    for qa in _questions(dataset_json):
        qid = qa["id"]
        has_ans[qid] = bool(qa["answers"])
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qid not in predictions:
            continue  # the official v2.0 script skips (does not zero) missing predictions
        exact[qid] = _max_over(exact_match, predictions[qid], golds)
        f1[qid] = _max_over(f1_v2, predictions[qid], golds)
    return exact, f1, has_ans


def _apply_threshold(scores: dict[str, float], na_probs: Mapping[str, float],
                     has_ans: dict[str, bool], thresh: float) -> dict[str, float]:
    """`apply_no_ans_threshold`: a question predicted unanswerable (na_prob > thresh) scores 1
    exactly when it is unanswerable."""
    return {qid: (float(not has_ans[qid]) if na_probs[qid] > thresh else score)
            for qid, score in scores.items()}


def _summary(exact: dict[str, float], f1: dict[str, float], qids: list[str]) -> dict[str, float]:
    total = len(qids)
    return {"exact": 100.0 * sum(exact[q] for q in qids) / total,
            "f1": 100.0 * sum(f1[q] for q in qids) / total, "total": total}


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], has_ans: Mapping[str, bool]
                     ) -> tuple[float, float]:
    """The official `find_best_thresh`: start from "predict no-answer everywhere" (every
    unanswerable question right), then lower the no-answer bar one question at a time in order
    of na_prob; returns (best score in percent, the na_prob threshold reaching it)."""
    current = best = float(sum(1 for qid in has_ans if not has_ans[qid]))
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1.0 if predictions[qid] else 0.0
        current += diff
        if current > best:
            best, best_thresh = current, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def evaluate_v2(dataset_json: Mapping[str, Any], predictions: Mapping[str, str],
                na_probs: Mapping[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> dict[str, float]:
    """Official v2.0 scores in percent: exact/f1/total, HasAns_* and NoAns_* breakdowns, and,
    when `na_probs` is given, best_exact/best_f1 with their thresholds."""
    exact_raw, f1_raw, has_ans = _raw_scores_v2(dataset_json, predictions)
    given_probs = na_probs is not None
    probs: Mapping[str, float] = na_probs if na_probs is not None else {
        qid: 0.0 for qid in predictions}
    missing_probs = [qid for qid in exact_raw if qid not in probs]
    if missing_probs:
        raise ValueError(f"na_probs lacks {len(missing_probs)} predicted questions, e.g. "
                         f"{missing_probs[0]!r}")
    exact = _apply_threshold(exact_raw, probs, has_ans, na_prob_thresh)
    f1 = _apply_threshold(f1_raw, probs, has_ans, na_prob_thresh)
    if not exact:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    result: dict[str, float] = _summary(exact, f1, list(exact))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid in exact if has_ans[qid] == wanted]
        if qids:
            for key, value in _summary(exact, f1, qids).items():
                result[f"{prefix}_{key}"] = value
    if given_probs:
        # `find_all_best_thresh` searches on the raw (un-thresholded) scores.
        result["best_exact"], result["best_exact_thresh"] = find_best_thresh(
            predictions, exact_raw, probs, has_ans)
        result["best_f1"], result["best_f1_thresh"] = find_best_thresh(
            predictions, f1_raw, probs, has_ans)
    return result

"""Post-processing of the SQuAD head's beams into answer texts (BERT's max-context rule,
XLNet's null score), and the official output files. The head itself is
`electra.model.squad_head`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.fileutil import write_atomic
from electra.model.squad_head import SquadHeadOutput
from electra.tasks.squad.data import SquadExample, SquadFeature


@dataclass
class RawPrediction:
    """One feature's beam, on the CPU as plain Python values (what post-processing needs)."""

    start_log_probs: list[float]
    start_index: list[int]
    end_log_probs: list[list[float]]
    end_index: list[list[int]]
    cls_logit: float | None = None


def split_outputs(output: SquadHeadOutput) -> list[RawPrediction]:
    """Per-feature beams from a batched inference output."""
    if output.start_top_index is None:
        raise ValueError("not an inference output (call the head without gold positions)")
    cls = output.cls_logits.float().tolist() if output.cls_logits is not None else None
    rows = zip(output.start_top_log_probs.tolist(), output.start_top_index.tolist(),
               output.end_top_log_probs.tolist(), output.end_top_index.tolist(), strict=True)
    return [RawPrediction(s_lp, s_i, e_lp, e_i, cls[b] if cls is not None else None)
            for b, (s_lp, s_i, e_lp, e_i) in enumerate(rows)]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def postprocess_predictions(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    raw: Sequence[RawPrediction],
    max_answer_len: int = 30,
    na_prob_thresh: float = 0.5,
) -> tuple[dict[str, str], dict[str, float]]:
    """Answer text per question id, and (v2, when the beams carry cls logits) na_probs.

    For each example, candidates from all its windows are kept when both ends lie in the
    context, start <= end, the span is at most `max_answer_len` tokens, and the start token has
    its max context in that window (BERT's rule, so a token is judged where it sees the most);
    the best by start + end log-prob is mapped to the original text through the char offsets.
    v2: na_prob = sigmoid(min over windows of the unanswerable logit), since one window holding
    the answer suffices (XLNet keeps the minimum null score); "" when na_prob > na_prob_thresh.
    """
    if len(features) != len(raw):
        raise ValueError(f"{len(features)} features but {len(raw)} raw predictions")
    best: dict[int, tuple[float, str]] = {}
    null_logit: dict[int, float] = {}
    for feature, pred in zip(features, raw, strict=True):
        ex = feature.example_index
        if ex >= len(examples) or examples[ex].qid != feature.qid:
            raise ValueError(f"feature of question {feature.qid!r} does not belong to these "
                             "examples (pass the list the features were made from)")
        if pred.cls_logit is not None:
            null_logit[ex] = min(null_logit.get(ex, math.inf), pred.cls_logit)
        for i, start in enumerate(pred.start_index):
            # A beam may reach past this window's length: its padding, masked in a longer
            # window's batch, ties at the minimum logit with the window's other masked positions.
            if (start >= len(feature.offsets) or feature.offsets[start] is None
                    or not feature.max_context[start]):
                continue
            for j, end in enumerate(pred.end_index[i]):
                if (end >= len(feature.offsets) or feature.offsets[end] is None or end < start
                        or end - start + 1 > max_answer_len):
                    continue
                score = pred.start_log_probs[i] + pred.end_log_probs[i][j]
                if ex not in best or score > best[ex][0]:
                    context = examples[ex].context
                    best[ex] = (score, context[feature.offsets[start][0]:feature.offsets[end][1]])
    predictions: dict[str, str] = {}
    na_probs: dict[str, float] = {}
    for index, example in enumerate(examples):
        text = best[index][1] if index in best else ""
        if index in null_logit:
            na_probs[example.qid] = _sigmoid(null_logit[index])
            if na_probs[example.qid] > na_prob_thresh:
                text = ""
        predictions[example.qid] = text
    return predictions, na_probs


def write_predictions(path: str | Path, predictions: Mapping[str, str]) -> Path:
    """The official predictions file: {qid: answer text} ("" means no answer in v2.0)."""
    return write_atomic(path, json.dumps(dict(predictions), ensure_ascii=False, indent=2))


def write_na_probs(path: str | Path, na_probs: Mapping[str, float]) -> Path:
    """The official v2.0 na-prob file ({qid: probability of no answer}) for the threshold
    search (`evaluate-v2.0.py --na-prob-file`)."""
    return write_atomic(path, json.dumps(dict(na_probs), ensure_ascii=False, indent=2))

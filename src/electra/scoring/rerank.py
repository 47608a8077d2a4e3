"""N-best re-ranking with PLLs (section 5.4.5): choose argmax_x f(x|s) + lambda * PLL(x), with
lambda picked on a dev split out of [0.05, 0.1, ..., 0.95, 1.0] by word error rate.

WER is the standard one: word-level Levenshtein distance (substitutions, insertions and
deletions cost 1) summed over utterances, divided by the number of reference words. Words are
whitespace-separated tokens compared exactly (no case or punctuation normalisation: n-best
lists and references are expected to be normalised alike, as ASR outputs are).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.errors import ElectraError
from electra.progress import Progress
from electra.scoring.pll import PllScorer
from electra.scoring.textio import iter_json_objects

# Section 5.4.5: "I select the best lambda on the dev set out of [0.05, 0.1, ..., 0.95, 1.0]".
LAMBDA_GRID = tuple(round(0.05 * i, 2) for i in range(1, 21))


@dataclass
class Hypothesis:
    text: str
    score: float  # f(x | s): the first-pass system's log score
    pll: float | None = None


@dataclass
class NBestList:
    id: str
    hypotheses: list[Hypothesis]
    reference: str | None = None


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Levenshtein distance between two token sequences (one row of the DP table at a time)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        diagonal, row[0] = row[0], i
        for j, h in enumerate(hyp, start=1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (r != h))
    return row[-1]


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus WER: total word edits / total reference words."""
    edits = words = 0
    for ref, hyp in zip(references, hypotheses, strict=True):
        ref_words = ref.split()
        edits += edit_distance(ref_words, hyp.split())
        words += len(ref_words)
    if words == 0:
        raise ElectraError("WER is undefined: the references have no words")
    return edits / words


def read_nbest(path: str | Path) -> list[NBestList]:
    """JSON lines {"id", "reference"?, "hypotheses": [{"text", "score", "pll"?}, ...]}."""
    lists = []
    for lineno, obj in iter_json_objects(path):
        where = f"{path}:{lineno}"
        hyps = obj.get("hypotheses")
        if not isinstance(hyps, list) or not hyps:
            raise ElectraError(f"{where}: 'hypotheses' must be a non-empty list")
        parsed = []
        for k, h in enumerate(hyps):
            if not isinstance(h, dict) or not isinstance(h.get("text"), str):
                raise ElectraError(f"{where}: hypothesis {k} has no string 'text'")
            if not _is_number(h.get("score")):
                raise ElectraError(f"{where}: hypothesis {k} has no numeric 'score'")
            if "pll" in h and not _is_number(h["pll"]):
                raise ElectraError(f"{where}: hypothesis {k}: 'pll' is not a number")
            parsed.append(Hypothesis(h["text"], float(h["score"]),
                                     float(h["pll"]) if "pll" in h else None))
        reference = obj.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise ElectraError(f"{where}: 'reference' is not a string")
        lists.append(NBestList(str(obj.get("id", len(lists))), parsed, reference))
    if not lists:
        raise ElectraError(f"{path}: no n-best lists")
    return lists


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def add_pll(lists: Sequence[NBestList], scorer: PllScorer, batch_size: int = 32,
            progress: bool | Progress = False) -> None:
    """Fill in missing `pll` values, scoring each distinct text once."""
    todo = sorted({h.text for lst in lists for h in lst.hypotheses if h.pll is None})
    if not todo:
        return
    plls = dict(zip(todo, scorer.pll(todo, batch_size, progress), strict=True))
    for lst in lists:
        for h in lst.hypotheses:
            if h.pll is None:
                h.pll = plls[h.text]


def choose(lst: NBestList, lam: float) -> int:
    """Index of argmax score + lam * PLL (the earliest on ties). lam = 0 is the first pass."""
    def total(h: Hypothesis) -> float:
        if lam == 0:
            return h.score
        if h.pll is None:
            raise ElectraError(f"n-best list {lst.id!r}: a hypothesis has no PLL")
        return h.score + lam * h.pll

    values = [total(h) for h in lst.hypotheses]
    return max(range(len(values)), key=lambda i: (values[i], -i))


def rerank(lists: Sequence[NBestList], lam: float) -> list[int]:
    return [choose(lst, lam) for lst in lists]


def list_wer(lists: Sequence[NBestList], chosen: Sequence[int]) -> float:
    missing = [lst.id for lst in lists if lst.reference is None]
    if missing:
        raise ElectraError(f"n-best list {missing[0]!r} has no 'reference' (needed for WER)")
    return word_error_rate([lst.reference or "" for lst in lists],
                           [lst.hypotheses[i].text for lst, i in zip(lists, chosen, strict=True)])


def tune_lambda(dev: Sequence[NBestList], grid: Sequence[float] = LAMBDA_GRID
                ) -> tuple[float, dict[float, float]]:
    """The grid value with the lowest dev WER (the smallest such lambda on ties)."""
    wers = {lam: list_wer(dev, rerank(dev, lam)) for lam in grid}
    best = min(grid, key=lambda lam: (wers[lam], lam))
    return best, wers


def run_rerank(test: Sequence[NBestList], dev: Sequence[NBestList] | None = None,
               lam: float | None = None, grid: Sequence[float] = LAMBDA_GRID
               ) -> tuple[dict, list[int]]:
    """(summary, chosen indices for `test`). lambda: given, or tuned on `dev`."""
    summary: dict = {}
    if lam is None:
        if not dev:
            raise ElectraError("rerank: give a dev split (--dev FILE) to tune lambda, or "
                               "--lambda")
        lam, wers = tune_lambda(dev, grid)
        summary["dev"] = {"wer_before": list_wer(dev, rerank(dev, 0.0)),
                          "wer_after": wers[lam], "lists": len(dev),
                          "wer_by_lambda": {str(k): v for k, v in wers.items()}}
    summary["lambda"] = lam
    chosen = rerank(test, lam)
    test_summary: dict = {"lists": len(test)}
    if all(lst.reference is not None for lst in test):
        test_summary["wer_before"] = list_wer(test, rerank(test, 0.0))
        test_summary["wer_after"] = list_wer(test, chosen)
    summary["test"] = test_summary
    return summary, chosen

"""What `electra score`, `electra minimal-pairs` and `electra rerank` do, as library calls."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from electra.device import resolve_device
from electra.errors import ElectraError
from electra.progress import Progress
from electra.scoring.load import load_scorer
from electra.scoring.minimal_pairs import evaluate_minimal_pairs, read_minimal_pairs
from electra.scoring.pll import PllScorer
from electra.scoring.rerank import add_pll, read_nbest, run_rerank
from electra.scoring.textio import read_texts, write_json_atomic, write_json_lines_atomic


@dataclass
class ScorerOptions:
    """Which model scores and how (shared by the three commands)."""

    model: str | None = None
    generator: str | None = None
    scorer: str | None = None
    batch_size: int = 32
    bf16: bool = False
    device: str = "auto"
    mask_prob: float | None = None
    positives: str = "n"
    revision: str | None = None  # of a Hub id given as `model`

    def build(self) -> PllScorer:
        if self.model is None:
            raise ElectraError("--model is required")
        if self.batch_size < 1:
            raise ElectraError(f"--batch-size must be positive, got {self.batch_size}")
        device = resolve_device(self.device, self.bf16)
        return load_scorer(self.model, self.generator, self.scorer, device, self.bf16,
                           self.mask_prob, self.positives, self.revision)


def score_file(options: ScorerOptions, input_path: str | Path, out_path: str | Path,
               text_field: str = "text", per_token: bool = False, progress: bool | Progress = False
               ) -> dict:
    """Score every text of INPUT; write JSON lines {"index", "line", "text", "pll",
    "num_tokens", ["truncated"], ["tokens", "token_scores"]} to OUT."""
    texts = read_texts(input_path, text_field)
    scorer = options.build()
    start = time.perf_counter()
    scored = scorer.score([t for _, t in texts], options.batch_size, per_token=True,
                          progress=progress)
    seconds = time.perf_counter() - start
    rows = []
    for index, ((line, _), s) in enumerate(zip(texts, scored, strict=True)):
        row: dict = {"index": index, "line": line, "text": s.text, "pll": s.pll,
                     "num_tokens": len(s.tokens)}
        if s.truncated:
            row["truncated"] = True
        if per_token:
            row["tokens"] = s.tokens
            row["token_scores"] = s.token_scores
        rows.append(row)
    write_json_lines_atomic(out_path, rows)
    return {"out": str(out_path), "texts": len(rows), "scorer": scorer.name,
            "truncated": sum(s.truncated for s in scored), "seconds": round(seconds, 3)}


def minimal_pairs_file(options: ScorerOptions, data: str | Path, limit: int | None = None,
                       out_path: str | Path | None = None, progress: bool | Progress = False
                       ) -> dict:
    pairs = read_minimal_pairs(data, limit)
    scorer = options.build()
    result = {"model": options.model, "data": str(data), "limit_per_uid": limit,
              **evaluate_minimal_pairs(scorer, pairs, options.batch_size, progress)}
    if out_path is not None:
        write_json_atomic(out_path, result)
    return result


def rerank_files(options: ScorerOptions, nbest: str | Path, dev: str | Path | None = None,
                 lam: float | None = None, out_path: str | Path | None = None,
                 progress: bool | Progress = False) -> dict:
    """Re-rank NBEST (lambda given, or tuned on DEV); PLLs from the hypotheses' "pll" fields
    where all have one, else from --model."""
    test_lists = read_nbest(nbest)
    dev_lists = read_nbest(dev) if dev is not None else None
    if lam is not None and lam < 0:
        raise ElectraError(f"--lambda must be >= 0, got {lam}")
    everything = test_lists + (dev_lists or [])
    if any(h.pll is None for lst in everything for h in lst.hypotheses):
        if options.model is None:
            raise ElectraError("rerank: some hypotheses have no 'pll' field; give --model to "
                               "score them")
        add_pll(everything, options.build(), options.batch_size, progress)
    summary, chosen = run_rerank(test_lists, dev_lists, lam)
    if out_path is not None:
        write_json_lines_atomic(out_path, (
            {"id": lst.id, "index": i, "text": lst.hypotheses[i].text,
             "score": lst.hypotheses[i].score, "pll": lst.hypotheses[i].pll}
            for lst, i in zip(test_lists, chosen, strict=True)))
        summary["out"] = str(out_path)
    return summary

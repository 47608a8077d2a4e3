"""Pseudo-log-likelihood scoring (dissertation 5.4.5): scorers, minimal pairs, re-ranking."""

from electra.scoring.load import detect_scorer, load_scorer
from electra.scoring.minimal_pairs import evaluate_minimal_pairs, read_minimal_pairs
from electra.scoring.pll import (
    SCORER_NAMES,
    ElectraTTScorer,
    ElectricScorer,
    MlmScorer,
    PllScorer,
    ScoredText,
    TwoTowerScorer,
)
from electra.scoring.rerank import LAMBDA_GRID, read_nbest, run_rerank, word_error_rate

__all__ = ["LAMBDA_GRID", "SCORER_NAMES", "ElectraTTScorer", "ElectricScorer", "MlmScorer",
           "PllScorer", "ScoredText", "TwoTowerScorer", "detect_scorer", "evaluate_minimal_pairs",
           "load_scorer", "read_minimal_pairs", "read_nbest", "run_rerank", "word_error_rate"]

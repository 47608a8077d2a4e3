"""Pseudo-log-likelihood scoring (dissertation 5.4.5): scorers, minimal pairs, re-ranking.

See docs/scoring.md. The names below load from their modules on first use (PEP 562), so that
importing this package, e.g. for the `electra` command's parser (`electra.scoring.cli`),
imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it
_EXPORTS = {
    "SCORER_NAMES": "load", "detect_scorer": "load", "load_scorer": "load",
    "evaluate_minimal_pairs": "minimal_pairs", "read_minimal_pairs": "minimal_pairs",
    "ElectraTTScorer": "pll", "ElectricScorer": "pll",
    "MlmScorer": "pll", "PllScorer": "pll", "ScoredText": "pll", "TwoTowerScorer": "pll",
    "LAMBDA_GRID": "rerank", "read_nbest": "rerank", "run_rerank": "rerank",
    "word_error_rate": "rerank",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

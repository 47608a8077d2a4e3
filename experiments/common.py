"""What several studies share: the objective ladder they train (Table 5.7), the cells of their
tables, and how a CVT run is named. The repository's data folder and the text benchmarks also
prepare are in `benchmarks.shared_data`; equal-FLOP pre-training is `benchmarks.equal_budget`."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

from electra.errors import ElectraError

# The efficiency ladder's objectives, in Table 5.7's order, and their labels.
LADDER = ("electra", "all-tokens-mlm", "replace-mlm", "electra-15", "mlm")
LADDER_LABELS = {"electra": "ELECTRA", "all-tokens-mlm": "All-Tokens MLM",
                 "replace-mlm": "Replace MLM", "electra-15": "ELECTRA 15%", "mlm": "BERT (MLM)",
                 "random-init": "no pre-training (reference)"}
# Table 5.7 (GLUE dev score, base-sized models) for the side-by-side row.
PAPER_TABLE_5_7 = {"electra": 85.0, "all-tokens-mlm": 84.3, "replace-mlm": 82.4,
                   "electra-15": 82.4, "mlm": 82.2}


def seeds_cell(values: list[float], fmt: str = "{:.1f}") -> str:
    """A table cell with one value per seed, and their median when there are several."""
    text = " / ".join(fmt.format(v) for v in values)
    return text if len(values) == 1 else f"{text} (median {fmt.format(statistics.median(values))})"


def passes_cell(rows: list[dict]) -> str:
    """Median passes over the text, of the runs that recorded it (older runs did not)."""
    known = [r["data_passes"] for r in rows if r["data_passes"] is not None]
    return f"{statistics.median(known):.1f}" if known else "–"


def cvt_method(run: dict) -> str:
    """What a CVT study run trained: "multitask", "cvt" or "supervised"."""
    if len(run["tasks"]) > 1:
        return "multitask"
    return "cvt" if run["cvt"] else "supervised"


def run_main(main: Callable[[], Any]) -> None:
    """A study's command line: its `main()`, with an `ElectraError` as one line and exit 1."""
    try:
        main()
    except ElectraError as e:
        sys.exit(f"error: {e}")

"""Minimal-pair accuracy (BLiMP format): reading, per-group accuracy, the CLI on real lines."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
from test_scoring_models import build_scoring_models

from electra.cli import main
from electra.errors import ElectraError
from electra.scoring import load_scorer
from electra.scoring.minimal_pairs import (
    MinimalPair,
    evaluate_minimal_pairs,
    pair_accuracy,
    read_minimal_pairs,
)

BLIMP = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "blimp" / "blimp.jsonl.gz"
needs_blimp = pytest.mark.skipif(not BLIMP.is_file(), reason=f"BLiMP data absent ({BLIMP})")


def pair(uid: str, field: str, term: str, good: str, bad: str, pid: str = "0") -> dict:
    return {"UID": uid, "field": field, "linguistics_term": term, "pairID": pid,
            "sentence_good": good, "sentence_bad": bad}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def crafted() -> list[MinimalPair]:
    return [MinimalPair("u1", "syntax", "island", "0", "a", "b"),
            MinimalPair("u1", "syntax", "island", "1", "c", "d"),
            MinimalPair("u2", "syntax", "binding", "0", "e", "f"),
            MinimalPair("u3", "semantics", "npi", "0", "g", "h")]


def test_pair_accuracy_groups_and_ties(crafted):
    # u1: one right, one tie (ties count as wrong); u2 right; u3 wrong.
    result = pair_accuracy(crafted, good=[-1.0, -2.0, -3.0, -9.0], bad=[-2.0, -2.0, -4.0, -1.0])
    assert result["pairs"] == 4
    assert result["accuracy"] == 0.5
    assert result["macro_accuracy"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert result["by_uid"] == {"u1": {"accuracy": 0.5, "pairs": 2},
                                "u2": {"accuracy": 1.0, "pairs": 1},
                                "u3": {"accuracy": 0.0, "pairs": 1}}
    assert result["by_field"] == {"semantics": {"accuracy": 0.0, "pairs": 1},
                                  "syntax": {"accuracy": 2 / 3, "pairs": 3}}
    assert result["by_phenomenon"]["binding"] == {"accuracy": 1.0, "pairs": 1}


class CountingScorer:
    """Shorter is better; records what it was asked to score."""

    name = "counting"

    def __init__(self):
        self.calls: list[list[str]] = []

    def pll(self, texts, batch_size=32, progress=False):
        self.calls.append(list(texts))
        return [-float(len(t)) for t in texts]


def test_evaluate_scores_each_distinct_sentence_once():
    pairs = [MinimalPair("u", "f", "t", "0", "ok", "not ok"),
             MinimalPair("u", "f", "t", "1", "ok", "bad one"),
             MinimalPair("u", "f", "t", "2", "a much longer good", "short")]
    scorer = CountingScorer()
    result = evaluate_minimal_pairs(scorer, pairs)
    assert len(scorer.calls) == 1
    assert sorted(scorer.calls[0]) == sorted({"ok", "not ok", "bad one", "a much longer good",
                                              "short"})
    assert result["accuracy"] == pytest.approx(2 / 3) and result["scorer"] == "counting"


def test_read_limit_per_paradigm_and_errors(tmp_path):
    rows = [pair("u1", "f", "t", f"g{i}", f"b{i}", str(i)) for i in range(3)]
    rows += [pair("u2", "f", "t", f"G{i}", f"B{i}", str(i)) for i in range(3)]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    assert len(read_minimal_pairs(path)) == 6
    limited = read_minimal_pairs(path, limit=2)
    assert [(p.uid, p.pair_id) for p in limited] == [("u1", "0"), ("u1", "1"), ("u2", "0"),
                                                      ("u2", "1")]
    broken = rows[:1] + [{k: v for k, v in rows[1].items() if k != "sentence_bad"}]
    with pytest.raises(ElectraError, match=r"b.jsonl:2: missing field 'sentence_bad'"):
        read_minimal_pairs(write_jsonl(tmp_path / "b.jsonl", broken))
    with pytest.raises(ElectraError, match="--limit must be positive"):
        read_minimal_pairs(path, limit=0)


@pytest.fixture(scope="module")
def blimp_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 3 pairs of the first 3 paradigms of the real BLiMP file (1,000 pairs each)."""
    if not BLIMP.is_file():
        pytest.skip(f"BLiMP data absent ({BLIMP})")
    with gzip.open(BLIMP, "rt", encoding="utf-8") as handle:
        chosen = [json.loads(line) for i, line in enumerate(itertools.islice(handle, 3000))
                  if i % 1000 < 3]
    assert len({r["UID"] for r in chosen}) == 3
    return write_jsonl(tmp_path_factory.mktemp("blimp") / "slice.jsonl", chosen)


@needs_blimp
def test_minimal_pairs_cli_on_real_blimp_lines(tmp_path, vocab_dir, blimp_slice, capsys):
    models = build_scoring_models(tmp_path / "models", vocab_dir)
    out = tmp_path / "result.json"
    assert main(["minimal-pairs", "--model", str(models["electric-disc"]), "--data",
                 str(blimp_slice), "--limit", "2", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    pairs = read_minimal_pairs(blimp_slice, limit=2)
    assert printed["pairs"] == len(pairs) and printed["limit_per_uid"] == 2
    assert all(v["pairs"] == 2 for v in printed["by_uid"].values())
    assert set(printed["by_field"]) == {p.field for p in pairs}
    assert set(printed["by_phenomenon"]) == {p.phenomenon for p in pairs}
    scorer = load_scorer(models["electric-disc"])
    good, bad = scorer.pll([p.good for p in pairs]), scorer.pll([p.bad for p in pairs])
    assert printed["accuracy"] == pytest.approx(
        sum(g > b for g, b in zip(good, bad, strict=True)) / len(pairs))

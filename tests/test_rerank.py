"""N-best re-ranking (section 5.4.5): WER, lambda tuning on crafted lists with a known answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_scoring_models import build_scoring_models

from electra.cli import main
from electra.errors import ElectraError
from electra.scoring.rerank import (
    LAMBDA_GRID,
    Hypothesis,
    NBestList,
    choose,
    edit_distance,
    read_nbest,
    run_rerank,
    tune_lambda,
    word_error_rate,
)


def test_lambda_grid_is_the_dissertations():
    assert LAMBDA_GRID[0] == 0.05 and LAMBDA_GRID[-1] == 1.0 and len(LAMBDA_GRID) == 20
    assert LAMBDA_GRID[8] == 0.45


def test_edit_distance_and_wer():
    assert edit_distance("a b c".split(), "a x c".split()) == 1
    assert edit_distance("a b c".split(), []) == 3
    assert edit_distance([], "a b".split()) == 2
    assert edit_distance(list("kitten"), list("sitting")) == 3
    assert edit_distance("the cat sat".split(), "cat sat down".split()) == 2
    # Corpus WER: 1 + 2 edits over 4 + 2 reference words.
    assert word_error_rate(["a b c d", "e f"], ["a b x d", "f e g"]) == pytest.approx(3 / 6)
    with pytest.raises(ElectraError, match="no words"):
        word_error_rate([""], ["a"])


def crafted_lists() -> list[dict]:
    """List 1: the first pass is wrong; the right hypothesis wins once lambda > 1/3.
    List 2: the first pass is right; a wrong one wins once lambda > 0.55.
    So lambda in (1/3, 0.55] gives WER 0, and the grid's smallest such value is 0.35."""
    return [
        {"id": "u1", "reference": "a b c d",
         "hypotheses": [{"text": "a b x d", "score": 0.0, "pll": -10.0},
                        {"text": "a b c d", "score": -1.0, "pll": -7.0}]},
        {"id": "u2", "reference": "e f g h",
         "hypotheses": [{"text": "e f g h", "score": 0.0, "pll": -10.0},
                        {"text": "e f g x", "score": -2.2, "pll": -6.0},
                        {"text": "q", "score": -50.0, "pll": -1.0}]},
    ]


def to_lists(rows: list[dict]) -> list[NBestList]:
    return [NBestList(r["id"], [Hypothesis(**h) for h in r["hypotheses"]], r.get("reference"))
            for r in rows]


def test_tune_lambda_finds_the_known_range():
    dev = to_lists(crafted_lists())
    lam, wers = tune_lambda(dev)
    assert lam == 0.35
    assert wers[0.3] == pytest.approx(1 / 8) and wers[0.35] == 0.0 and wers[0.55] == 0.0
    assert wers[0.6] == pytest.approx(1 / 8)
    summary, chosen = run_rerank(dev, dev)
    assert summary["lambda"] == 0.35
    assert summary["dev"]["wer_before"] == pytest.approx(1 / 8)
    assert summary["dev"]["wer_after"] == 0.0
    assert summary["test"] == {"lists": 2, "wer_before": pytest.approx(1 / 8), "wer_after": 0.0}
    assert chosen == [1, 0]


def test_choose_breaks_ties_by_first_pass_rank():
    lst = NBestList("x", [Hypothesis("a", -1.0, -2.0), Hypothesis("b", -2.0, -1.0)])
    assert choose(lst, 1.0) == 0  # -3 vs -3: keep the earlier
    assert choose(lst, 0.0) == 0
    with pytest.raises(ElectraError, match="no PLL"):
        choose(NBestList("y", [Hypothesis("a", 0.0)]), 0.5)


def test_run_rerank_needs_dev_or_lambda():
    with pytest.raises(ElectraError, match="--dev FILE"):
        run_rerank(to_lists(crafted_lists()))
    summary, chosen = run_rerank(to_lists(crafted_lists()), lam=1.0)
    assert "dev" not in summary and chosen == [1, 1]  # -8.2 beats -10 and -51


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_nbest_errors(tmp_path):
    good = crafted_lists()[0]
    broken = tmp_path / "n.jsonl"
    broken.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(ElectraError, match=r"n.jsonl:2: invalid JSON"):
        read_nbest(broken)
    bad = dict(good, hypotheses=[{"text": "a"}])
    with pytest.raises(ElectraError, match=r"m.jsonl:1: hypothesis 0 has no numeric 'score'"):
        read_nbest(write_jsonl(tmp_path / "m.jsonl", [bad]))
    with pytest.raises(ElectraError, match="non-empty list"):
        read_nbest(write_jsonl(tmp_path / "e.jsonl", [dict(good, hypotheses=[])]))


def test_rerank_cli_with_precomputed_pll(tmp_path, capsys):
    dev = write_jsonl(tmp_path / "dev.jsonl", crafted_lists())
    test = write_jsonl(tmp_path / "test.jsonl", crafted_lists()[::-1])
    out = tmp_path / "chosen.jsonl"
    assert main(["rerank", "--nbest", str(test), "--dev", str(dev), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["lambda"] == 0.35
    assert summary["test"]["wer_before"] == pytest.approx(1 / 8)
    assert summary["test"]["wer_after"] == 0.0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["index"], r["text"]) for r in rows] == [("u2", 0, "e f g h"),
                                                                 ("u1", 1, "a b c d")]


def test_rerank_cli_scores_with_a_model(tmp_path, vocab_dir, capsys):
    models = build_scoring_models(tmp_path / "models", vocab_dir)
    rows = crafted_lists()
    for row in rows:
        for h in row["hypotheses"]:
            del h["pll"]
    dev = write_jsonl(tmp_path / "dev.jsonl", rows)
    assert main(["rerank", "--nbest", str(dev), "--dev", str(dev)]) == 1
    assert "give --model" in capsys.readouterr().err
    assert main(["rerank", "--nbest", str(dev), "--dev", str(dev), "--model",
                 str(models["electric-disc"])]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["lambda"] in LAMBDA_GRID
    assert summary["dev"]["wer_after"] <= summary["dev"]["wer_before"]
    assert len(summary["dev"]["wer_by_lambda"]) == 20

"""`electra score`: inputs, outputs, scorer choice from metadata, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from test_scoring_models import build_scoring_models

from electra.cli import main
from electra.errors import ElectraError
from electra.scoring import load_scorer

TEXTS = ["The cat sat on the mat.", "Who should Derek hug?", "a b c"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, vocab_dir: Path) -> dict[str, Path]:
    return build_scoring_models(tmp_path_factory.mktemp("scoring"), vocab_dir)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_score_text_file_per_token(tmp_path, models, capsys):
    src = tmp_path / "in.txt"
    src.write_text(TEXTS[0] + "\n\n" + TEXTS[1] + "\n" + TEXTS[2] + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(models["electric-disc"]), "--input", str(src),
                 "--out", str(out), "--per-token", "--batch-size", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scorer"] == "electric" and summary["texts"] == 3
    rows = read_rows(out)
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert [r["line"] for r in rows] == [1, 3, 4]  # the blank line is skipped
    assert [r["text"] for r in rows] == TEXTS
    expected = load_scorer(models["electric-disc"]).score(TEXTS, per_token=True)
    for row, want in zip(rows, expected, strict=True):
        assert row["pll"] == pytest.approx(want.pll, abs=1e-5)
        assert row["tokens"] == want.tokens and row["num_tokens"] == len(want.tokens)
        assert row["token_scores"] == pytest.approx(want.token_scores, abs=1e-5)


def test_score_jsonl_gz_with_text_field_and_mlm(tmp_path, models, capsys):
    src = tmp_path / "in.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as handle:
        for i, text in enumerate(TEXTS):
            handle.write(json.dumps({"id": i, "sentence": text}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(models["mlm"]), "--input", str(src),
                 "--text-field", "sentence", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["scorer"] == "mlm"
    rows = read_rows(out)
    assert "tokens" not in rows[0]
    want = load_scorer(models["mlm"]).pll(TEXTS)
    assert [r["pll"] for r in rows] == pytest.approx(want, abs=1e-5)


def test_score_electra_tt_needs_generator(tmp_path, models, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(models["electra-tt-disc"]), "--input", str(src),
                 "--out", str(out)]) == 1
    assert "pass --generator DIR" in capsys.readouterr().err
    assert main(["score", "--model", str(models["electra-tt-disc"]), "--generator",
                 str(models["two-tower"]), "--input", str(src), "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["scorer"] == "electra-tt"
    assert len(read_rows(out)) == 3


def test_score_errors_name_file_and_line(tmp_path, models, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": oops}\n')
    out = tmp_path / "out.jsonl"
    model = str(models["mlm"])
    assert main(["score", "--model", model, "--input", str(bad), "--out", str(out)]) == 1
    assert f"{bad}:2: invalid JSON" in capsys.readouterr().err
    no_field = tmp_path / "nofield.jsonl"
    no_field.write_text('{"sentence": "x"}\n')
    assert main(["score", "--model", model, "--input", str(no_field), "--out", str(out)]) == 1
    assert f"{no_field}:1: no string field 'text'" in capsys.readouterr().err
    assert main(["score", "--model", model, "--input", str(tmp_path / "missing.txt"),
                 "--out", str(out)]) == 1
    assert "missing.txt: input file does not exist" in capsys.readouterr().err
    src = tmp_path / "ok.txt"
    src.write_text("hello\n")
    assert main(["score", "--model", str(models["electra-disc"]), "--input", str(src),
                 "--out", str(out)]) == 1
    assert "gives no pseudo-log-likelihoods" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # refused at the flag, a usage error
        main(["score", "--model", model, "--input", str(src), "--out", str(out),
              "--batch-size", "0"])
    assert "--batch-size: must be positive" in capsys.readouterr().err
    assert not out.exists()  # nothing written by any failed run


TINY_RUN = {
    "preset": "tiny",
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"generator_multiplier": 0.5},
    "train": {"steps": 2, "batch_size": 4, "warmup_steps": 1, "log_every": 1,
              "save_every": 100, "seed": 1},
}


@pytest.mark.parametrize("objective", ["electric", "electra-tt", "electra"])
def test_score_reads_the_training_loops_exports(tmp_path, data_dir, objective, capsys):
    """Pre-train 2 steps, then score the exports as they are: the scorer is picked from
    config.json's electra_toolkit.objective (ELECTRA: its MLM generator)."""
    from electra.objectives import objective_class

    try:
        objective_class(objective)
    except ElectraError:
        pytest.skip(f"objective {objective!r} is not implemented in this version")
    config = tmp_path / "run.json"
    config.write_text(json.dumps(TINY_RUN))
    out = tmp_path / "run"
    assert main(["pretrain", "--config", str(config), "--data", str(data_dir), "--out",
                 str(out), "--objective", objective, "--quiet"]) == 0
    capsys.readouterr()
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    scores = tmp_path / "scores.jsonl"
    final = out / "final"
    argv = {"electric": ["--model", str(final / "discriminator")],
            "electra-tt": ["--model", str(final / "discriminator"), "--generator",
                           str(final / "generator")],
            "electra": ["--model", str(final / "generator")]}[objective]
    assert main(["score", *argv, "--input", str(src), "--out", str(scores)]) == 0
    expected = "mlm" if objective == "electra" else objective
    assert json.loads(capsys.readouterr().out)["scorer"] == expected
    rows = read_rows(scores)
    assert len(rows) == 3 and all(isinstance(r["pll"], float) for r in rows)


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_score_refuses_an_input_with_no_text(tmp_path, models, capsys, content):
    src = tmp_path / "in.txt"
    src.write_text(content)
    assert main(["score", "--model", str(models["mlm"]), "--input", str(src),
                 "--out", str(tmp_path / "out.jsonl")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"electra score: error: {src}: no text to score (the file is empty or blank)")
    assert not (tmp_path / "out.jsonl").exists()


def test_score_writes_progress_lines_without_a_terminal(tmp_path, models, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    assert main(["score", "--model", str(models["mlm"]), "--input", str(src),
                 "--out", str(tmp_path / "out.jsonl")]) == 0
    lines = capsys.readouterr().err.splitlines()  # captured: not a terminal
    assert len(lines) == 1 and lines[0].startswith("score (mlm) pass ")
    assert main(["score", "--model", str(models["mlm"]), "--input", str(src), "--quiet",
                 "--out", str(tmp_path / "quiet.jsonl")]) == 0
    assert capsys.readouterr().err == ""

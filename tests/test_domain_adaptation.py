"""experiments/domain_adaptation.py at toy sizes: the start model, both continued models (each
from the start's weights and tokenizer), fine-tuning against one shared random baseline, the
table; a second call trains nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import domain_adaptation

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "corpus" / "aclImdb" / "unsup.jsonl.gz").is_file()
                    or not (SHARED / "glue" / "SST-2").is_dir(), reason="no IMDB or SST-2 data")
def test_study_runs_caches_and_tabulates(tmp_path, corpus_file, make_corpus):
    argv = ["--work", str(tmp_path / "w"), "--corpus", str(corpus_file), "--general",
            str(make_corpus(40, 3)), "--start-steps", "4", "--continue-steps", "2",
            "--reviews", "60", "--tasks", "SST-2", "--seeds", "1",
            "--max-train-examples", "16"]
    result = domain_adaptation.main(argv)
    assert set(result["models"]) == {"start", "in-domain", "general", "random"}
    for name in ("in-domain", "general"):
        run = json.loads((tmp_path / "w" / name / "run.json").read_text())
        assert run["init"]["from"].endswith("start/pretrain/final/discriminator")
        settings = json.loads((tmp_path / "w" / name / "settings.json").read_text())
        assert settings["train"]["steps"] == 2
    assert "(b) + in-domain (IMDB)" in result["markdown"]
    stamp = (tmp_path / "w" / "in-domain" / "final" / "discriminator" / "model.safetensors"
             ).stat().st_mtime_ns
    again = domain_adaptation.main(argv)
    assert again["models"] == result["models"]
    assert (tmp_path / "w" / "in-domain" / "final" / "discriminator" / "model.safetensors"
            ).stat().st_mtime_ns == stamp
    # a finished run as (a): nothing is pre-trained from scratch
    start = tmp_path / "w" / "start" / "pretrain"
    other = domain_adaptation.main(["--work", str(tmp_path / "w2"), *argv[2:],
                                    "--start-model", str(start)])
    assert not (tmp_path / "w2" / "start").exists()
    assert other["models"]["start"] == result["models"]["start"]
    run = json.loads((tmp_path / "w2" / "in-domain" / "run.json").read_text())
    assert run["init"]["from"] == str(start / "final" / "discriminator")

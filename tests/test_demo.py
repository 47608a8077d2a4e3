"""`electra demo` end to end on a small synthetic corpus (the real one needs a download)."""

from __future__ import annotations

import json
import random

import pytest

from electra.demo import run_demo
from electra.errors import ElectraError


def _corpus(tmp_path):
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    lines = [" ".join(rng.choices(words, k=rng.randint(8, 30))) + "." for _ in range(3000)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(lines) + "\n")
    return path


@pytest.mark.slow  # ~10 s of CPU: vocabulary, packing, 2 steps, evaluation, export
def test_demo_runs_the_tiny_local_preset_by_default(tmp_path, capsys):
    report = run_demo(corpus=[str(_corpus(tmp_path))], out_dir=tmp_path / "demo", steps=2,
                      vocab_size=400, batch_size=4)
    out = capsys.readouterr().out
    assert "tiny-local" in out
    assert "AutoModelForPreTraining.from_pretrained(path, trust_remote_code=True)" in out
    assert report["steps"] == 2
    # 2 steps of batch 4: each training example read 8 / N times on average
    assert report["data_passes"] == pytest.approx(8 / report["train_examples"])
    assert f"each read {8 / report['train_examples']:.1f} times" in out
    config = json.loads((tmp_path / "demo" / "pretrain" / "config.json").read_text())["config"]
    assert config["model"]["position_bias"] == "alibi"
    assert config["objective"]["disc_bias_init"] == "base-rate"
    with pytest.raises(ElectraError, match="tiny-local"):
        run_demo(corpus=[str(_corpus(tmp_path))], out_dir=tmp_path / "d2", preset="small")
    assert not (tmp_path / "d2").exists()  # refused before anything is written

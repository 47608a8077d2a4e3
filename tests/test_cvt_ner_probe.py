"""experiments.cvt_ner_probe: the primary module's dev F1 as the training run scored it, each
auxiliary view's F1, and statistics of the teacher's soft targets."""

from __future__ import annotations

import json

from cvt_helpers import TINY, write_ner, write_unlabeled

from electra.cli import main
from experiments import cvt_ner_probe


def test_the_probe_scores_the_model_as_its_run_did(tmp_path, capsys):
    d = write_ner(tmp_path / "ner")
    raw = write_unlabeled(tmp_path / "raw.txt")
    out = tmp_path / "out"
    sets = [a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]
    assert main(["cvt", "--tasks", "ner", "--data", str(d), "--unlabeled", str(raw), "--out",
                 str(out), "--steps", "60", *sets, "--quiet"]) == 0
    capsys.readouterr()
    [found] = cvt_ner_probe.main([str(out / "model"), "--data", str(d), "--unlabeled",
                                  str(raw), "--sentences", "10"])
    trained = json.loads((out / "results.json").read_text())["scores"]["ner"]["f1"]
    assert found["dev_f1"]["primary"] == round(trained, 4)
    assert found["dev_f1"]["primary"] > 0  # it learned something of the repeated sentences
    assert set(found["dev_f1"]) == {"primary", "fwd", "bwd", "future", "past", "full"}
    dev, unlabeled = found["teacher_dev"], found["teacher_unlabeled"]
    assert dev["words"] == 6 and unlabeled["words"] > 10
    assert dev["gold_entity_words"] == round(4 / 6, 4)  # EU, German, Peter, Blackburn
    for stats in (dev, unlabeled):
        assert 0.0 <= stats["argmax_o"] <= 1.0 and 0.0 <= stats["sure"] <= 1.0
        assert stats["entropy"] >= 0.0

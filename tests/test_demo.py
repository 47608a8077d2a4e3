"""`electra demo` end to end on a small synthetic corpus (the real one needs a download)."""

from __future__ import annotations

import json
import random

import pytest

from electra.demo.check import CHECKS, CheckSettings, find_check_data, format_check
from electra.demo.run import run_demo
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
                      vocab_size=400, batch_size=4, check=False)
    out = capsys.readouterr().out
    assert "tiny-local" in out
    assert "AutoModelForPreTraining.from_pretrained(path, trust_remote_code=True)" in out
    assert report["steps"] == 2
    # 2 steps of batch 4: each training example read 8 / N times on average
    assert report["data_passes"] == pytest.approx(8 / report["train_examples"])
    assert f"each read {8 / report['train_examples']:.1f} times" in out
    config = json.loads((tmp_path / "demo" / "pretrain" / "settings.json").read_text())
    assert config["model"]["position_bias"] == "alibi"
    assert config["objective"]["disc_bias_init"] == "base-rate"
    with pytest.raises(ElectraError, match="tiny-local"):
        run_demo(corpus=[str(_corpus(tmp_path))], out_dir=tmp_path / "d2", preset="small")
    assert not (tmp_path / "d2").exists()  # refused before anything is written


@pytest.mark.skipif(find_check_data(None) is None, reason="needs ../shared/data/conll2000")
@pytest.mark.slow  # ~30 s of CPU: a 2-step demo, then 2 x 2 short fine-tunings
def test_demo_ends_with_the_downstream_check(tmp_path, capsys):
    """The pre-trained discriminator and random weights of its shape, both fine-tuned on
    CoNLL-2000 chunking with the same seeds; the summary prints both medians, their difference
    and a verdict."""
    settings = CheckSettings(train_examples=64, seeds=2, epochs=1)
    report = run_demo(corpus=[str(_corpus(tmp_path))], out_dir=tmp_path / "demo", steps=2,
                      vocab_size=400, batch_size=4, check_settings=settings)
    check = report["downstream_check"]
    assert set(check["scores"]) == {"pretrained", "random"}
    assert all(len(v) == 2 and all(0 <= x <= 100 for x in v) for v in check["scores"].values())
    assert check["gain"] == pytest.approx(check["medians"]["pretrained"]
                                          - check["medians"]["random"])
    assert check["paid"] == (check["gain"] > 0 and check["gain"] > check["spread"])
    out = capsys.readouterr().out
    assert check["task"] == "chunk" and check["metric"] == "f1"
    assert f"{check['seconds']:.0f} s downstream check" in out  # what the check costs
    assert ("downstream check: CoNLL-2000 chunking, test-set F1, fine-tuned on 64 sentences, "
            "1 epoch, 2 seeds") in out
    assert "python -m experiments.ladder_on_mix" in out
    random_cfg = json.loads((tmp_path / "demo" / "check" / "random_init" / "config.json")
                            .read_text())
    trained_cfg = json.loads((tmp_path / "demo" / "pretrain" / "final" / "discriminator"
                              / "config.json").read_text())
    trained_cfg.pop("electra_toolkit")  # the pre-training run's record (steps, FLOPs)
    assert random_cfg == trained_cfg  # only the weights differ


def test_the_check_looks_for_the_test_data_beside_the_checkout(tmp_path, monkeypatch):
    """The default place is ../shared/data next to this repository (an editable install),
    whether or not it is there: the check's own tests skip on `find_check_data`, so a wrong
    default would only show as skips. $ELECTRA_CHECK_DATA comes first; a folder without the
    task's files is passed over."""
    from pathlib import Path

    from electra.demo import check

    root = Path(__file__).resolve().parents[1]
    assert check._CHECKOUT_DATA == root.parent / "shared" / "data"
    (tmp_path / "train.txt").write_text("He NN B-NP\n")
    monkeypatch.setenv(check.CHECK_DATA_ENV, str(tmp_path))
    assert find_check_data(None, "chunk") != tmp_path  # test.txt is missing
    (tmp_path / "test.txt").write_text("He NN B-NP\n")
    assert find_check_data(None, "chunk") == tmp_path
    assert find_check_data(None, "SST-2") != tmp_path
    assert find_check_data(tmp_path, "SST-2") is None
    assert check.check_data_candidates(None, "SST-2") == [tmp_path, check._CHECKOUT_DATA / "glue"]


def test_the_check_tasks_the_cli_offers_are_the_checks():
    """The CLI lists the tasks without importing the check (torch); they must not drift."""
    from electra.cli import build_parser
    from electra.demo import check

    demo = build_parser().subcommand_parsers["demo"]
    assert tuple(demo.arguments["check_task"].action.choices) == tuple(check.CHECKS)


@pytest.mark.parametrize("task, expected", [("chunk", "train.txt and test.txt"),
                                            ("SST-2", "SST-2/train.tsv and SST-2/dev.tsv")])
def test_demo_check_data_without_the_tasks_files_is_refused_before_anything_is_written(
        tmp_path, task, expected):
    with pytest.raises(ElectraError, match=f"--check-data .*no {expected} there"):
        run_demo(corpus=[str(_corpus(tmp_path))], out_dir=tmp_path / "d", check_data=tmp_path,
                 check_settings=CHECKS[task])
    assert not (tmp_path / "d").exists()


def test_demo_check_verdicts():
    base = {"task": "SST-2", "metric": "dev_accuracy", "train_examples": 10000, "epochs": 1.0,
            "label": "SST-2 dev accuracy",
            "seeds": 3, "scores": {"pretrained": [70.0, 71.0, 72.0],
                                   "random": [68.0, 68.5, 69.0]},
            "medians": {"pretrained": 71.0, "random": 68.5}, "spread": 2.0}
    paid = "\n".join(format_check({**base, "gain": 2.5, "paid": True}))
    assert "+2.5" in paid and "pre-training paid" in paid and "tagger gains first" not in paid
    assert "SST-2 dev accuracy, fine-tuned on 10,000 sentences, 1 epoch, 3 seeds" in paid
    chunk = {**base, "task": "chunk", "label": "CoNLL-2000 chunking, test-set F1", "epochs": 3.0}
    paid_chunk = "\n".join(format_check({**chunk, "gain": 3.5, "paid": True}))
    assert "tagger gains first" in paid_chunk and "3 epochs" in paid_chunk
    unclear = "\n".join(format_check({**base, "gain": 1.0, "paid": False}))
    assert "less than the seeds' spread" in unclear
    worse = "\n".join(format_check({**base, "gain": -4.1, "paid": False}))
    assert "did not pay yet" in worse and "-4.1" in worse


def test_the_demo_budget_leaves_pretraining_what_set_up_and_the_check_do_not_need():
    from electra.demo.run import AFTER_PRETRAINING_SECONDS, CHECK_SECONDS, pretraining_budget

    assert pretraining_budget(600, 25, check=True, device="cpu") == (
        600 - 25 - AFTER_PRETRAINING_SECONDS - CHECK_SECONDS["cpu"])
    assert pretraining_budget(600, 25, check=False, device="cpu") == (
        600 - 25 - AFTER_PRETRAINING_SECONDS)
    with pytest.raises(ElectraError, match=r"--budget 120s leaves 0 s .* or --steps N") as info:
        pretraining_budget(120, 25, check=True, device="cpu")
    assert "\n" not in str(info.value)


def test_the_summary_says_what_the_budget_bought():
    from electra.config import PretrainConfig
    from electra.demo.run import format_summary

    cfg = PretrainConfig.from_preset("tiny-local")
    report = {"steps": 812, "tokens": 812 * 32 * 128, "train_flops": 1e14, "tokens_per_s": 9e3,
              "train_seconds": 390.0, "total_seconds": 570.0, "train_examples": 9000,
              "heldout_examples": 180, "data_passes": 2.9, "precision": "fp32",
              "budget": {"seconds": 402.0, "spent_seconds": 398.5},
              "heldout_untrained": {}, "heldout_trained": {}, "final": {},
              "downstream_check": {"skipped": "not asked for (--no-check)"}}
    text = format_summary(report, cfg)
    assert "812 (batch 32 x 128 tokens; bought by 402 s of pre-training budget, 398 s spent)" \
        in text
    assert "tiny-local, fp32" in text


def test_demo_steps_and_budget_together_are_refused(tmp_path, capsys):
    from electra.cli import main

    assert main(["demo", "--out", str(tmp_path / "d"), "--steps", "5", "--budget", "5m"]) == 1
    assert capsys.readouterr().err.strip() == ("electra demo: error: --steps and --budget "
                                               "together: give one")

"""experiments/ladder_on_mix.py: the ladder with the CPU recipe builds the recipe's text, trains
and fine-tunes each model into its cached place with one shared random baseline, and
tabulates only what finished."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.shared_data import SHARED, imdb_reviews
from experiments import ladder_on_mix as ladder

IMDB = SHARED / "corpus" / "aclImdb" / "unsup.jsonl.gz"
GLUE = SHARED / "glue"


@pytest.mark.skipif(not IMDB.is_file() or shutil.which("zcat") is None, reason="no IMDB text")
def test_imdb_part_is_what_readmes_shell_pipeline_writes(tmp_path):
    out = imdb_reviews(SHARED / "corpus", tmp_path / "imdb.jsonl", n=300)
    shell = subprocess.run(
        f"zcat {IMDB} | head -300 | sed 's#<br />#\\\\n#g; s#<br/>#\\\\n#g'", shell=True,
        capture_output=True, check=True).stdout
    assert out.read_bytes() == shell
    lines = out.read_text(encoding="utf-8").rstrip("\n").split("\n")  # not str.splitlines: U+2028
    assert len(lines) == 300 and all("<br" not in json.loads(line)["text"] for line in lines)
    unseen = imdb_reviews(SHARED / "corpus", tmp_path / "unseen.jsonl", n=100,
                                 skip=250)
    assert unseen.read_bytes().split(b"\n")[:50] == shell.split(b"\n")[250:300]


def _fake_model(work: Path, variant: str, seed: int, deltas: dict, steps: int,
                finished_pretraining: bool = True) -> None:
    """What a finished model leaves: the pre-training summary and the transfer results."""
    run = ladder.run_dir(work, variant, seed)
    run.mkdir(parents=True)
    if finished_pretraining:
        (run / "summary.json").write_text(json.dumps(
            {"steps": steps, "flops": 5.2e14, "train_seconds": 3900.0, "data_passes": 2.1}))
        probe = "heldout_auc_unigram" if "mlm" not in variant else "heldout_mlm_acc"
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, "flops": s * 5.8e10, probe: 0.5 + s / 20000}) + "\n"
            for s in (0, 4500, 9000)))
    tasks = {t: {"metric": "accuracy", "pretrained": {"median": 0.5 + d},
                 "random": {"median": 0.5}, "delta_median": d} for t, d in deltas.items()}
    transfer = work / "transfer" / f"{variant}-s{seed}"
    transfer.mkdir(parents=True)
    (transfer / "results.json").write_text(json.dumps({"tasks": tasks}))


def test_table_has_every_finished_model_and_only_those(tmp_path):
    electra, mlm = "base-rate+alibi-steep", "mlm+alibi-steep"
    _fake_model(tmp_path, electra, 2, {"CoLA": 0.08, "SST-2": 0.03, "RTE": 0.02}, 9000)
    _fake_model(tmp_path, electra, 3, {"CoLA": 0.09, "SST-2": 0.02, "RTE": 0.06}, 9000)
    _fake_model(tmp_path, mlm, 1, {"CoLA": 0.07, "SST-2": 0.05, "RTE": 0.06}, 14637)
    # pre-training not finished (a resumable run's transfer dir from an older attempt): left out
    _fake_model(tmp_path, f"{electra}-gen1", 1, {"CoLA": 0.0, "SST-2": 0.0, "RTE": 0.0}, 7587,
                finished_pretraining=False)
    result = ladder.tabulate(tmp_path)
    assert sorted(result["models"]) == [electra, mlm]
    assert [m["seed"] for m in result["models"][electra]] == [2, 3]
    # a summary written before `timed_steps` existed timed the whole run
    assert result["models"][mlm][0]["timed_steps"] == 14637
    table = result["markdown"].splitlines()
    assert table[2] == ("| ELECTRA | 2, 3 | 9,000 | 2.1 | 58.0 / 59.0 (median 58.5) | "
                        "53.0 / 52.0 (median 52.5) | 52.0 / 56.0 (median 54.0) | "
                        "+4.3 / +5.7 (median +5.0) | 85.0 |")
    assert "| BERT (MLM) | 1 | 14,637 | 2.1 | 57.0 | 55.0 | 56.0 | +6.0 | 82.2 |" in table
    assert any(line.startswith("| All-Tokens MLM | – |") and "not run" in line for line in table)
    assert "| no pre-training (random init) | | 0 | | 50.0 | 50.0 | 50.0 | | |" in table
    assert "| 0.5 | 2, 3 | 9,000 | +4.3 / +5.7 (median +5.0) |" in table
    assert "| 1 | – |  | not run |" in table
    assert json.loads((tmp_path / "results.json").read_text())["models"] == result["models"]
    assert (tmp_path / "results.md").read_text() == result["markdown"]
    assert Path(result["plot"]).is_file()
    assert Path(result["curves"]).is_file()


@pytest.mark.slow
@pytest.mark.skipif(not (GLUE / "RTE").is_dir() or not IMDB.is_file(), reason="no data")
def test_two_models_end_to_end_share_one_random_baseline(tmp_path, monkeypatch):
    """At a budget of 4 ELECTRA steps on 300 IMDB reviews: each model pre-trains, exports its
    encoder (ELECTRA: the discriminator, MLM: the model), fine-tunes, and the second reuses the
    first's random baseline instead of training it again."""
    glue = tmp_path / "glue"
    for task in ("CoLA", "SST-2", "RTE"):
        (glue / task).mkdir(parents=True)
        for split, n in (("train", 24), ("dev", 16)):
            lines = (GLUE / task / f"{split}.tsv").read_text().splitlines()
            (glue / task / f"{split}.tsv").write_text(
                "\n".join(lines[:n] if task == "CoLA" else lines[:n + 1]) + "\n")
    imdb = imdb_reviews(SHARED / "corpus", tmp_path / "imdb.jsonl", n=300)
    monkeypatch.setattr(ladder, "mix_corpus", lambda args: [str(imdb)])
    work = tmp_path / "work"
    common = ["--work", str(work), "--glue", str(glue), "--finetune-seeds", "1",
              "--budget-steps", "4"]
    first = ladder.main(["--only", "base-rate+alibi-steep", *common])
    baseline = work / "transfer" / "baseline" / "random" / "RTE" / "job.json"
    stamp = baseline.stat().st_mtime_ns
    second = ladder.main(["--only", "mlm+alibi-steep", *common])
    assert baseline.stat().st_mtime_ns == stamp
    assert not (work / "transfer" / "mlm+alibi-steep-b4-s1" / "random").exists()
    assert list(first["models"]) == ["base-rate+alibi-steep"]
    assert sorted(second["models"]) == ["base-rate+alibi-steep", "mlm+alibi-steep"]
    electra_run = ladder.run_dir(work, "base-rate+alibi-steep", 1, 4)
    assert ladder.exported_encoder(electra_run).name == "discriminator"
    assert ladder.exported_encoder(ladder.run_dir(work, "mlm+alibi-steep", 1, 4)).name == "model"
    mlm = second["models"]["mlm+alibi-steep"][0]
    assert mlm["steps"] > second["models"]["base-rate+alibi-steep"][0]["steps"]  # equal FLOPs
    assert mlm["random"] == first["models"]["base-rate+alibi-steep"][0]["random"]

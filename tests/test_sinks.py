"""`--report-to tensorboard,wandb,mlflow`: each sink gets the settings as hyperparameters, every
row of metrics.jsonl and the final results, offline (WANDB_MODE=offline, an MLflow file store);
a missing package or an unknown sink is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cvt_helpers import TINY as CVT_TINY
from cvt_helpers import write_chunk
from sink_helpers import mlflow_runs, wandb_run

from electra.cli import main
from electra.errors import ElectraError
from electra.runtime.metrics_log import METRICS, scalars
from electra.runtime.sinks import flatten, parse_report_to, require_sinks
from tests.conftest import SHARED_DATA
from tests.test_cli_errors import TINY_SETS

pytest.importorskip("wandb")
pytest.importorskip("mlflow")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_step(metrics: list[dict]) -> dict[str, dict[int, float]]:
    """metrics.jsonl as {key: {step: value}}, the numbers a sink receives."""
    out: dict[str, dict[int, float]] = {}
    for row in metrics:
        for key, value in scalars(row).items():
            out.setdefault(key, {})[row["step"]] = value
    return out


def test_pretrain_reports_to_wandb_and_mlflow_what_metrics_jsonl_holds(tmp_path, data_dir):
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(data_dir), "--out", str(out), "--quiet", "--steps",
                 "4", "--batch-size", "8", "--log-every", "1", "--warmup-steps", "1",
                 "--report-to", "wandb,mlflow", *TINY_SETS]) == 0
    expected = by_step(rows(out / METRICS))
    assert set(expected) >= {"loss", "disc_loss", "lr", "flops"}

    (run,) = mlflow_runs(out / "mlruns")
    assert run["name"] == "run" and run["status"] == "FINISHED"
    assert {k: v for k, v in run["metrics"].items() if not k.startswith("final/")} == expected
    assert run["params"]["train.steps"] == "4" and run["params"]["objective.name"] == "electra"
    assert run["metrics"]["final/flops"] == {4: expected["flops"][4]}

    wandb = wandb_run(out)
    logged: dict[str, dict[int, float]] = {}
    for row in wandb["history"]:
        for key, value in row.items():
            if not key.startswith("_"):
                logged.setdefault(key, {})[row["_step"]] = value
    assert logged.keys() == expected.keys()
    for key, values in expected.items():
        assert logged[key] == pytest.approx(values), key
    assert wandb["config"]["train.steps"] == 4
    assert wandb["summary"]["flops"] == pytest.approx(expected["flops"][4])


@pytest.mark.skipif(not (SHARED_DATA / "conll2000").is_dir(), reason="CoNLL-2000 absent")
def test_finetune_reports_each_seed_with_its_scores(tmp_path, tiny_model):
    out = tmp_path / "ft"
    assert main(["finetune", "--model", str(tiny_model), "--task", "chunk", "--data",
                 str(SHARED_DATA / "conll2000"), "--out", str(out), "--max-train-examples",
                 "32", "--max-eval-examples", "20", "--epochs", "1", "--seeds", "2",
                 "--log-every", "1", "--quiet", "--report-to", "mlflow"]) == 0
    results = json.loads((out / "results.json").read_text())
    runs = {}
    for seed in (1, 2):
        runs.update({r["name"]: r for r in mlflow_runs(out / f"seed{seed}" / "mlruns")})
    assert set(runs) == {"ft/seed1", "ft/seed2"}
    for seed, entry in zip((1, 2), results["seeds"], strict=True):
        run = runs[f"ft/seed{seed}"]
        expected = by_step(rows(out / f"seed{seed}" / METRICS))
        assert {k: v for k, v in run["metrics"].items() if not k.startswith("final/")} == \
            expected
        assert run["metrics"]["final/f1"] == {entry["steps"]: pytest.approx(
            entry["scores"]["f1"])}
        assert run["params"]["finetune.seed"] == str(seed)


def test_cvt_reports_its_dev_scores(tmp_path):
    data = write_chunk(tmp_path / "chunk")
    out = tmp_path / "cvt"
    sets = [a for k, v in CVT_TINY.items() for a in ("--set", f"cvt.{k}={v}")]
    assert main(["cvt", "--tasks", "chunk", "--data", str(data), "--no-cvt", "--out",
                 str(out), "--steps", "50", "--quiet", "--report-to", "mlflow", *sets]) == 0
    (run,) = mlflow_runs(out / "mlruns")
    results = json.loads((out / "results.json").read_text())
    assert run["metrics"]["final/chunk/f1"] == {50: pytest.approx(results["scores"]["chunk"]["f1"])}
    assert {k: v for k, v in run["metrics"].items() if not k.startswith("final/")} == \
        by_step(rows(out / METRICS))
    assert run["params"]["train.cvt"] == "False"


def test_an_unknown_sink_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--data", "d", "--out", "o", "--report-to", "wandb,neptune"])
    assert "--report-to: unknown 'neptune'; choose from tensorboard, wandb, mlflow" in \
        capsys.readouterr().err
    assert parse_report_to("none") == () and parse_report_to(" mlflow,wandb,mlflow") == (
        "mlflow", "wandb")


def test_a_missing_package_is_one_line_naming_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ElectraError, match=r"--report-to wandb needs the wandb package: pip "
                       r"install -e '\.\[tracking\]' in the electra checkout"):
        require_sinks(["mlflow", "wandb"])


def test_settings_flatten_to_section_dot_key():
    assert flatten({"train": {"steps": 4, "lr": None}, "tasks": ["a", "b"]}) == {
        "train.steps": 4, "train.lr": None, "tasks": '["a", "b"]'}

"""Training curves: the metrics logger (metrics.jsonl + TensorBoard scalars), `pretrain` and
`finetune --tensorboard`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train import pretrain_argv, read_metrics, tiny_config_file

from electra.cli import main
from electra.errors import ElectraError
from electra.train import metrics_log
from electra.train.metrics_log import METRICS, MetricsLogger

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="tensorboard not installed (pip install 'electra[plot]')")

def tb_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard would show for `log_dir`, as (step, value) lists."""
    acc = event_accumulator.EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- the logger ---------------------------------------------------------------------------


def test_logger_writes_jsonl_and_tensorboard_scalars(tmp_path):
    records = [{"step": 2, "loss": 3.5, "disc_auc": 0.5, "flops": 1e12, "lr": 1e-4},
               {"step": 4, "loss": 3.0, "disc_auc": 0.6, "flops": 2e12, "lr": 2e-4}]
    with MetricsLogger(tmp_path, tensorboard=True) as logger:
        for r in records:
            logger.log(r)
        # an extra record (held-out evaluation): its own line, only its keys, and strings or
        # bools are kept in the JSON but are not scalars
        logger.log_at(4, {"heldout_auc_unigram": 0.52, "split": "heldout", "ok": True})
    text = (tmp_path / METRICS).read_text()
    extra = {"step": 4, "heldout_auc_unigram": 0.52, "split": "heldout", "ok": True}
    # byte for byte what the pre-training loop wrote before the logger existed
    assert text == "".join(json.dumps(r) + "\n" for r in [*records, extra])
    scalars = tb_scalars(tmp_path / "tensorboard")
    assert set(scalars) == {"loss", "disc_auc", "flops", "lr", "heldout_auc_unigram"}
    assert scalars["loss"] == [(2, 3.5), (4, 3.0)]
    assert scalars["flops"] == [(2, pytest.approx(1e12, rel=1e-7)),
                                (4, pytest.approx(2e12, rel=1e-7))]  # float32 in TensorBoard
    assert scalars["heldout_auc_unigram"] == [(4, pytest.approx(0.52))]


def test_resume_drops_later_lines_and_tensorboard_points(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=True) as logger:
        for step in (1, 2, 3, 4):
            logger.log({"step": step, "loss": float(step)})
    # resumed from the step-2 checkpoint: steps 3 and 4 are trained (and logged) again
    with MetricsLogger(tmp_path, resume_step=2, tensorboard=True) as logger:
        assert [r["step"] for r in _lines(tmp_path / METRICS)] == [1, 2]
        for step in (3, 4):
            logger.log({"step": step, "loss": 10.0 + step})
    assert [r["loss"] for r in _lines(tmp_path / METRICS)] == [1.0, 2.0, 13.0, 14.0]
    assert tb_scalars(tmp_path / "tensorboard")["loss"] == [(1, 1.0), (2, 2.0), (3, 13.0),
                                                            (4, 14.0)]


def test_inactive_logger_writes_nothing(tmp_path):
    logger = MetricsLogger(tmp_path / "out", tensorboard=True, active=False)
    logger.log({"step": 1, "loss": 1.0})
    logger.close()
    assert not (tmp_path / "out").exists()


def test_record_without_step_is_refused(tmp_path):
    with MetricsLogger(tmp_path) as logger, pytest.raises(ValueError, match="step"):
        logger.log({"loss": 1.0})


def test_missing_tensorboard_is_one_line_with_the_install_hint(monkeypatch, tmp_path, capsys):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name == "torch.utils.tensorboard":
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(ElectraError, match=r"pip install 'electra\[plot\]'"):
        metrics_log.require_tensorboard()
    # the command refuses before it creates anything
    out = tmp_path / "run"
    assert main(pretrain_argv(tiny_config_file(tmp_path), tmp_path / "no-data", out,
                              "--tensorboard")) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "electra[plot]" in err[0]
    assert not out.exists()


# --- the training loops -------------------------------------------------------------------


def test_pretrain_tensorboard_event_files(data_dir, tmp_path):
    out = tmp_path / "run"
    argv = pretrain_argv(tiny_config_file(tmp_path), data_dir, out, "--steps", "4",
                         "--tensorboard")
    assert main(argv) == 0
    records = read_metrics(out)  # training lines, and held-out probes where the data has some
    assert [r["step"] for r in records if "loss" in r] == [2, 4]
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    scalars = tb_scalars(out / "tensorboard")
    assert [s for s, _ in scalars["disc_loss"]] == [2, 4]
    for record in records:  # every number of every line is a scalar at its step
        for key, value in metrics_log.scalars(record).items():
            at_step = [v for s, v in scalars[key] if s == record["step"]]
            assert at_step and at_step[-1] == pytest.approx(value, rel=1e-6), key


def _user_task(directory: Path, rows: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", rows), ("dev", 20)):
        lines = ["text\tlabel"] + [f"the of {'is ' * (i % 4)}to\t{'yes' if i % 2 else 'no'}"
                                   for i in range(n)]
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n")


def test_finetune_logs_curves_and_dev_scores_per_seed(tiny_model, tmp_path):
    _user_task(tmp_path / "data", 96)
    out = tmp_path / "ft"
    assert main(["finetune", "--model", str(tiny_model), "--task", "user", "--text-a", "text",
                 "--label", "label", "--data", str(tmp_path / "data"), "--out", str(out),
                 "--epochs", "1", "--seeds", "2", "--log-every", "2", "--tensorboard",
                 "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text())
    for seed in results["seeds"]:
        lines = _lines(out / f"seed{seed['seed']}" / METRICS)
        train, dev = lines[:-1], lines[-1]
        assert [r["step"] for r in train] == [2, 3]  # every 2 steps and the last (3 steps)
        assert train[-1]["epoch"] == 1.0
        assert all(0.0 <= r["train_acc"] <= 1.0 and r["loss"] > 0 and r["lr"] > 0
                   for r in train)
        assert dev == {"step": 3, "dev_accuracy": seed["scores"]["accuracy"]}
        scalars = tb_scalars(out / "tensorboard" / f"seed{seed['seed']}")
        assert scalars["dev_accuracy"] == [(3, pytest.approx(seed["scores"]["accuracy"]))]
        assert [s for s, _ in scalars["loss"]] == [2, 3]

"""Training curves: the metrics logger (metrics.jsonl + TensorBoard scalars), `pretrain` and
`finetune --tensorboard`, and `electra plot`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train import pretrain_argv, read_metrics, tiny_config_file

from electra.cli import main
from electra.errors import ElectraError
from electra.runtime import metrics_log
from electra.runtime.metrics_log import METRICS, MetricsLogger

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="tensorboard not installed (pip install -e '.[plot]')")
pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
    with pytest.raises(ElectraError, match=r"pip install -e '\.\[plot\]' in the electra checkout"):
        metrics_log.require_tensorboard()
    # the command refuses before it creates anything
    out = tmp_path / "run"
    assert main(pretrain_argv(tiny_config_file(tmp_path), tmp_path / "no-data", out,
                              "--tensorboard")) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "pip install -e '.[plot]' in the electra checkout" in err[0]
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


# --- electra plot -------------------------------------------------------------------------


def _synthetic_run(path: Path, scale: float, steps: int = 10, heldout_every: int = 5) -> Path:
    path.mkdir(parents=True)
    lines = []
    for step in range(1, steps + 1):
        lines.append({"step": step, "loss": scale / step, "gen_loss": 1.0, "disc_loss": 0.5,
                      "gen_acc": 0.1, "disc_acc": 0.9, "lr": 1e-3, "flops": step * scale * 1e9})
        if step % heldout_every == 0:  # held-out probes carry no flops: interpolated
            lines.append({"step": step, "heldout_auc_unigram": 0.5 + step / 100})
    (path / METRICS).write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_plot_two_runs_writes_a_png(tmp_path, capsys):
    from electra.runtime.plot import plot_runs

    a = _synthetic_run(tmp_path / "electra", 1.0)
    b = _synthetic_run(tmp_path / "mlm", 2.0)
    fig = plot_runs([a, b])
    metrics = ["loss", "disc_acc", "disc_loss", "gen_acc", "gen_loss", "heldout_auc_unigram"]
    assert [ax.get_title() for ax in fig.axes] == [m for m in metrics for _ in range(2)]
    assert [ax.get_xlabel() for ax in fig.axes[:2]] == ["step", "training FLOPs"]
    assert all(len(ax.get_lines()) == 2 for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["electra", "mlm"]
    auc_vs_flops = fig.axes[-1].get_lines()[1]  # run b's AUC against FLOPs, interpolated
    assert list(auc_vs_flops.get_xdata()) == [5 * 2e9, 10 * 2e9]
    assert list(auc_vs_flops.get_ydata()) == [0.55, 0.6]

    out = tmp_path / "curves.png"
    assert main(["plot", str(a), str(b), "--out", str(out), "--x", "flops",
                 "--metrics", "loss,heldout_auc_unigram"]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    printed = json.loads(capsys.readouterr().out)
    assert printed["runs"] == ["electra", "mlm"]
    assert printed["panels"] == ["loss vs training FLOPs",
                                 "heldout_auc_unigram vs training FLOPs"]


def test_plot_finetune_out_has_a_curve_per_seed(tmp_path):
    from electra.runtime.plot import plot_runs

    for seed in (1, 2):
        (tmp_path / "ft" / f"seed{seed}").mkdir(parents=True)
        (tmp_path / "ft" / f"seed{seed}" / METRICS).write_text(
            json.dumps({"step": 2, "loss": 0.7, "train_acc": 0.5}) + "\n"
            + json.dumps({"step": 2, "dev_accuracy": 0.6}) + "\n")
    fig = plot_runs([tmp_path / "ft"])  # no flops: steps only, two columns of panels
    assert [ax.get_title() for ax in fig.axes] == ["loss", "dev_accuracy", "train_acc"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["seed1", "seed2"]


def test_plot_skip_missing_drops_metrics_no_run_logs(tmp_path):
    """Runs of different objectives log different probes: `skip_missing` draws those logged."""
    from electra.runtime.plot import plot_runs

    run = _synthetic_run(tmp_path / "electra", 1.0)
    fig = plot_runs([run], ["heldout_auc_unigram", "heldout_mlm_acc"], x="flops",
                    skip_missing=True)
    assert [ax.get_title() for ax in fig.axes] == ["heldout_auc_unigram"]
    with pytest.raises(ElectraError, match="heldout_mlm_acc in no run"):
        plot_runs([run], ["heldout_mlm_acc"], x="flops", skip_missing=True)


@pytest.mark.parametrize("case", ["no_metrics_file", "unknown_metric", "no_flops", "bad_suffix",
                                  "bad_line"])
def test_plot_errors_name_the_problem(case, tmp_path, capsys):
    run = _synthetic_run(tmp_path / "run", 1.0)
    args = {"no_metrics_file": ([str(tmp_path / "empty")], f"{tmp_path / 'empty' / METRICS}"),
            "unknown_metric": ([str(run), "--metrics", "loss,heldout_auc_uniform"],
                               "heldout_auc_uniform in no run"),
            "bad_suffix": ([str(run), "--out", str(tmp_path / "x.nope")], "unknown image format")}
    if case == "no_flops":
        (tmp_path / "ft").mkdir()
        (tmp_path / "ft" / METRICS).write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
        args[case] = ([str(tmp_path / "ft"), "--x", "flops"], "no run logs 'flops'")
    if case == "bad_line":
        with open(run / METRICS, "a") as f:
            f.write("{not json\n")
        args[case] = ([str(run)], f"{run / METRICS}:13: invalid JSON")
    (tmp_path / "empty").mkdir()
    argv, message = args[case]
    if "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path / "x.png")]
    assert main(["plot", *argv]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("electra plot: error:")
    assert message in err[0]
    assert not (tmp_path / "x.png").exists()

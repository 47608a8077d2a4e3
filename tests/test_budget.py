"""Pre-training on a budget (electra.pretraining.budget): durations and FLOPs parsed, a FLOPs
budget that buys exactly its steps, a time budget planned from the run's own step time that
ends within it with the schedule ending at the last step, a resumed run that counts the time
already spent, and the schedule whose end can move without a jump (electra.runtime.optim)."""

from __future__ import annotations

import json
import time

import pytest
import torch
from test_gpu_path import _tiny

from electra.cli import main
from electra.errors import ElectraError
from electra.pretraining.budget import (
    BUDGET_FILE,
    TimeBudget,
    at_fractions,
    capped_warmup,
    parse_duration,
    parse_flops,
    steps_for_flops,
)
from electra.pretraining.loop import pretrain
from electra.runtime.optim import Schedule, lr_multiplier

# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("45m", 2700), ("2h", 7200),
                                           ("1h30m", 5400), ("1.5h", 5400), ("120", 120),
                                           ("2 min", 120), ("1d", 86400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "1h30", "-5m", "0s", "m5"])
def test_bad_durations_are_one_line_errors(text):
    with pytest.raises(ElectraError, match="--budget") as info:
        parse_duration(text)
    assert "\n" not in str(info.value)


def test_flops_budgets():
    assert parse_flops("1e15") == 1e15
    for bad in ("lots", "0", "-1e3", "inf"):
        with pytest.raises(ElectraError, match="--budget-flops"):
            parse_flops(bad)
    assert steps_for_flops(10.5e9, 1e9) == 10
    with pytest.raises(ElectraError, match="buys no step"):
        steps_for_flops(1e8, 1e9)


def test_points_at_fractions_of_any_run():
    """`parts` evenly spaced points, the last step always among them; the same as every
    total // parts steps where that divides."""
    assert [s for s in range(1, 21) if at_fractions(s, 20, 4)] == [5, 10, 15, 20]
    assert [s for s in range(1, 11) if at_fractions(s, 10, 3)] == [4, 7, 10]
    assert [s for s in range(1, 3) if at_fractions(s, 2, 10)] == [1, 2]
    assert capped_warmup(10_000, 3_000) == 300 and capped_warmup(100, 3_000) == 100


# ----------------------------------------------------------------------------- the schedule


def test_the_schedule_is_electras_until_its_end_moves():
    schedule = Schedule(10, 100)
    assert [schedule(s) for s in range(101)] == [lr_multiplier(s, 10, 100) for s in range(101)]


@pytest.mark.parametrize("new_total", [60, 200])
def test_a_moved_end_keeps_the_learning_rate_continuous_and_ends_at_zero(new_total):
    schedule = Schedule(20, 100)
    before = schedule(15)
    schedule.replan(15, new_total, warmup_steps=18)
    assert schedule(15) == pytest.approx(before)  # no jump where the plan changed
    values = [schedule(s) for s in range(15, new_total + 1)]
    assert max(abs(b - a) for a, b in zip(values, values[1:], strict=False)) < 0.1
    assert max(values) == schedule(18)  # warm-up ends where asked, then decay only
    assert all(b <= a for a, b in zip(values[3:], values[4:], strict=False))
    assert schedule(new_total) == 0.0 and schedule(new_total - 1) > 0.0


def test_a_warmup_shortened_below_the_current_step_ends_at_the_next_one():
    schedule = Schedule(20, 100)
    schedule.replan(15, 60, warmup_steps=5)
    assert schedule.warm_factor(15) == pytest.approx(0.75) and schedule.warm_factor(16) == 1.0


def test_the_moved_schedule_is_saved_with_the_scheduler():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, Schedule(5, 50))
    scheduler.lr_lambdas[0].replan(3, 30, 4)
    state = scheduler.state_dict()
    fresh = torch.optim.lr_scheduler.LambdaLR(torch.optim.AdamW(model.parameters(), lr=1.0),
                                              Schedule(5, 50))
    fresh.load_state_dict(state)
    assert fresh.lr_lambdas[0].total == 30
    assert [fresh.lr_lambdas[0](s) for s in range(31)] == [
        scheduler.lr_lambdas[0](s) for s in range(31)]


# ----------------------------------------------------------------------------- runs


def test_steps_and_a_budget_together_are_refused_in_one_line(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["pretrain", "--data", str(data_dir), "--out", str(out), "--steps", "5",
                 "--budget", "2m"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["electra pretrain: error: --steps and a budget (--budget, --budget-flops) "
                   "together: give one"]
    assert not out.exists()


def test_a_flops_budget_buys_exactly_its_steps(data_dir, tmp_path):
    """At the run's own FLOPs per step (what `electra flops` counts): 7.5 steps' worth is 7."""
    probe = pretrain(_tiny(1, 1), data_dir, tmp_path / "one", device="cpu",
                     show_progress=False)
    per_step = probe["flops"]
    cfg = _tiny(1000, 1, budget_flops=7.5 * per_step, warmup_steps=1000)
    summary = pretrain(cfg, data_dir, tmp_path / "out", device="cpu", show_progress=False)
    assert summary["steps"] == 7 and summary["flops"] == 7 * per_step
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["plan"] == {"steps": 7, "warmup_steps": 1}  # warm-up: a tenth of the run
    assert run["budget"]["flops"] == 7 * per_step and run["budget"]["steps"] == 7
    settings = json.loads((tmp_path / "out" / "settings.json").read_text())
    assert settings["train"]["budget_flops"] == 7.5 * per_step  # as asked


def test_a_run_is_planned_once_and_changes_no_setting(data_dir, tmp_path):
    """`pretrain` resolves the precision, the data's vocabulary and the steps a FLOPs budget
    buys into its plan (electra.pretraining.plan): the caller's configuration is untouched,
    settings.json keeps what was asked and run.json where and how the run trained."""
    import copy

    from electra.precision import resolve_precision

    probe = pretrain(_tiny(1, 1), data_dir, tmp_path / "one", device="cpu",
                     show_progress=False)
    cfg = _tiny(1000, 1, budget_flops=3.5 * probe["flops"], warmup_steps=1000)
    cfg.train.precision = "auto"
    before = copy.deepcopy(cfg)
    summary = pretrain(cfg, data_dir, tmp_path / "out", device="cpu", show_progress=False)
    assert cfg == before and summary["steps"] == 3
    settings = json.loads((tmp_path / "out" / "settings.json").read_text())
    native = resolve_precision("auto", torch.device("cpu"))  # fp32, or bf16 where native
    assert (settings["train"]["steps"], settings["train"]["precision"]) == (1000, native)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["run"] == {"device": "cpu", "world_size": 1, "precision": native,
                          "requested_precision": "auto", "resumed": False, "report_to": []}


def _logged(out, key="lr"):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if f'"{key}"' in line]


def _check_ends_within(summary: dict, out, seconds: float) -> None:
    """Within the budget; the schedule's plan ends at the last step, which trained at the
    schedule's last learning rate."""
    report = summary["budget"]
    assert report["seconds"] == seconds and report["spent_seconds"] <= seconds
    plan = report["plans"][-1]
    assert summary["steps"] == plan["steps"] == report["steps"]
    last = _logged(out)[-1]
    assert last["step"] == summary["steps"]
    saved = json.loads((out / "settings.json").read_text())
    schedule = Schedule(1, 1)
    schedule.__dict__.update(torch.load(
        out / "checkpoints" / f"step_{summary['steps']:08d}" / "trainer.pt",
        weights_only=False)["scheduler"]["lr_lambdas"][0])
    peak = saved["train"]["learning_rate"]
    assert last["lr"] == pytest.approx(peak * schedule(summary["steps"] - 1), rel=1e-9)
    assert schedule(summary["steps"]) == 0.0
    for phase in ("set_up", "checkpoint", "export", "train"):  # no probes: eval_every 0
        assert report["phases"][phase] >= 0, phase


@pytest.mark.slow  # two runs of 8 s of training each
def test_a_time_budget_ends_within_it_and_a_resumed_run_counts_the_time_spent(
        data_dir, tmp_path, monkeypatch):
    """A run stopped after a checkpoint and resumed (the time since that checkpoint counted
    from OUT/budget.json, as after a kill -9) still ends within its budget, at the schedule's
    last step."""
    from resume_helpers import interrupted_and_resumed

    def run(out, resume=False):
        cfg = _tiny(1, 1, budget_seconds=8.0, checkpoints_per_run=4, warmup_steps=5)
        return pretrain(cfg, data_dir, out, resume=resume, device="cpu", show_progress=False)

    whole = run(tmp_path / "whole")
    _check_ends_within(whole, tmp_path / "whole", 8.0)
    assert whole["budget"]["plans"][0]["why"] == "first plan"

    started = time.perf_counter()
    resumed = interrupted_and_resumed(run, tmp_path / "out", monkeypatch, stop_after=None)
    wall = time.perf_counter() - started
    _check_ends_within(resumed, tmp_path / "out", 8.0)
    assert resumed["budget"]["plans"][0]["why"] == "first plan"  # kept in the checkpoint
    assert wall < 8.0 + 6.0  # both processes together: the budget plus their two set-ups
    assert json.loads((tmp_path / "out" / BUDGET_FILE).read_text())["spent_seconds"] > 0


def test_a_resumed_budget_counts_the_steps_after_the_checkpoint(tmp_path):
    """kill -9 after a checkpoint: OUT/budget.json (the last log line) is later than the
    checkpoint's record, and the steps done since count as spent."""
    (tmp_path / BUDGET_FILE).write_text(json.dumps({"spent_seconds": 50.0}))
    meta = {"budget": {"spent_seconds": 40.0, "phases": {"set_up": 2.0, "probe": 1.0}}}
    budget = TimeBudget.resumed(120.0, tmp_path, meta)
    assert budget.spent_before == 50.0 and budget.left() == pytest.approx(70.0, abs=0.5)
    assert budget.phases["lost_after_checkpoint"] == 10.0
    assert budget.due_check(step=10, total=100) == "resumed"  # once, then at the fractions
    assert budget.due_check(step=11, total=100) is None
    assert budget.due_check(step=25, total=100) == "check at 25% of the run"
    (tmp_path / BUDGET_FILE).write_text("{cut sh")
    assert TimeBudget.resumed(120.0, tmp_path, meta).spent_before == 40.0


def test_a_plan_counts_probes_every_n_steps_at_the_total_it_plans():
    """With probes every N steps the time kept back grows with the total: the plan is the
    total whose steps and probes fit, not one priced at a placeholder's probes."""
    budget = TimeBudget(100.0)
    budget.step_seconds = 0.1

    def rest(total):  # a probe every 50 steps, 1 s each
        return (total // 50 + 1) * 1.0

    total = budget.affordable_steps(0, rest)
    assert 0.1 * total + rest(total) <= budget.left() + 0.2
    assert total > 700  # ~1,000 steps' time, less ~15 probes


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 0.0, -5.0])
def test_budgets_must_be_finite_and_positive(bad):
    from electra.config import TrainConfig

    with pytest.raises(ElectraError, match="positive number"):
        TrainConfig(budget_seconds=bad).validate()
    with pytest.raises(ElectraError, match="positive number"):
        TrainConfig(budget_flops=bad).validate()


def test_a_resume_with_more_steps_continues_the_schedule_to_the_new_end(data_dir, tmp_path):
    """A resume may ask for more steps than the run was started with: the schedule then
    decays to the new end (the steps after the old end do not train at learning rate 0)."""
    pretrain(_tiny(2, 1), data_dir, tmp_path / "out", device="cpu", show_progress=False)
    pretrain(_tiny(4, 1), data_dir, tmp_path / "out", resume=True, device="cpu",
             show_progress=False)
    lrs = {r["step"]: r["lr"] for r in _logged(tmp_path / "out")}
    peak = _tiny(4, 1).train.learning_rate
    assert lrs[3] == pytest.approx(peak * lr_multiplier(2, 1, 4))
    assert lrs[4] == pytest.approx(peak * lr_multiplier(3, 1, 4)) and lrs[4] > 0


def test_a_resumed_run_keeps_the_precision_it_trained_in(data_dir, tmp_path):
    """`auto` is resolved once: resumed (on this or another machine) the run keeps it."""
    pretrain(_tiny(2, 1, precision="fp16"), data_dir, tmp_path / "out", device="cpu",
             show_progress=False)
    cfg = _tiny(3, 1)
    assert cfg.train.precision == "auto"
    pretrain(cfg, data_dir, tmp_path / "out", resume=True, device="cpu", show_progress=False)
    run = json.loads((tmp_path / "out" / "run.json").read_text())["run"]
    assert (run["precision"], run["requested_precision"], run["resumed"]) == \
        ("fp16", "fp16", True)
    assert cfg.train.precision == "auto"  # the plan's, not the caller's
    assert "loss_scale" in _logged(tmp_path / "out")[-1]


def test_settings_written_with_bf16_are_read_as_the_precision_they_meant():
    from electra.config import TrainConfig, merge
    from electra.finetuning.settings import FinetuneSettings

    for legacy, meant in ((True, "bf16"), (False, "fp32"), (None, "auto")):
        settings = FinetuneSettings()
        merge(settings, {"bf16": legacy})
        assert settings.precision == meant
        train = TrainConfig()
        merge(train, {"bf16": legacy})
        assert train.precision == meant

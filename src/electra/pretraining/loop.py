"""The pre-training loop: `losses = objective(batch)`, AdamW, checkpoints, metrics, export.

One loop for one process or many (`torchrun`): `train.batch_size` is the number of examples
per optimizer step over all processes and accumulation steps, so hyper-parameters and FLOPs
do not depend on the hardware.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from electra.config import PretrainConfig, TrainConfig
from electra.data.dataset import PretrainingDataset, check_batchable, iterate_batches
from electra.device import backend_of, to_device
from electra.errors import ElectraError
from electra.fileutil import reported_write_failures, space_advice
from electra.model.card import RunFacts
from electra.model.encoder import compile_layers, known_padding, mask_has_padding
from electra.objectives import ObjectiveContext, build_objective, metrics_from_counts
from electra.precision import autocast, make_scaler
from electra.pretraining.budget import TimeBudget, at_fractions, capped_warmup
from electra.pretraining.checkpoint_export import (
    export_extra,
    export_networks,
    special_ids_for,
    step_flops,
)
from electra.pretraining.heldout import HeldoutProbe
from electra.pretraining.init_from import InitSource, check_vocabulary, load_weights
from electra.pretraining.plan import (
    AUTO,
    UNPLANNED_STEPS,
    RunPlan,
    make_plan,
    requested_precision,
    wants_resume,
)
from electra.pretraining.step import WholeStep
from electra.progress import Progress
from electra.runtime import checkpoint
from electra.runtime.distributed import (
    DistInfo,
    all_reduce_max,
    barrier,
    cleanup,
    init_distributed,
)
from electra.runtime.metrics_log import MetricsLogger
from electra.runtime.optim import build_optimizer, build_scheduler, schedule_of
from electra.runtime.sinks import require_sinks
from electra.runtime.skeleton import LogWindow, StepLoop, Update
from electra.settings import (
    RUN_FILE,
    SETTINGS_FILE,
    Sources,
    holds_run,
    read_run,
    write_run_record,
    write_settings,
)


def continue_hint(resume: bool | str) -> str:
    """How a stopped run continues: the same command, with --resume unless it has one."""
    return ("run the same command again" if resume == AUTO
            else "run the same command with --resume auto")


def _check_run_dir(out: Path, cfg: PretrainConfig, data: PretrainingDataset, data_dir: Path,
                   resume: bool) -> None:
    """A new run needs an empty OUT; a resumed one needs the same model and vocabulary."""
    if not resume:
        if holds_run(out):
            raise ElectraError(f"{out} already holds a run; pass --resume to continue it or "
                               "choose another --out")
        return
    if not holds_run(out):
        raise ElectraError(f"{out}: nothing to resume (no {SETTINGS_FILE})")
    settings, record = read_run(out)
    if record.get("vocab_checksum") != data.vocab_checksum:
        raise ElectraError(f"{data_dir}: built with another vocabulary than the run in {out} "
                           "(vocab checksum differs)")
    if settings.get("model") != cfg.to_dict()["model"]:
        raise ElectraError(f"{out}: the model configuration differs from the run being resumed")


def _schedule_notes(tc: TrainConfig) -> list[str]:
    """What a user should hear about the learning-rate schedule before the run starts."""
    if tc.budget_seconds is None and tc.warmup_steps >= tc.steps:
        return [f"the warm-up (train.warmup_steps {tc.warmup_steps}) is as long as the run "
                f"({tc.steps} steps): the learning rate never reaches its peak; --warmup-steps "
                "N shortens it"]
    return []


def pretrain(cfg: PretrainConfig, data_dir: str | Path, out_dir: str | Path,
             resume: bool | str = False, device: str = "auto",
             show_progress: bool | Progress = True,
             tensorboard: bool = False, init: InitSource | None = None,
             sources: Sources | None = None, notes: Sequence[str] = (),
             report_to: Sequence[str] = ()) -> dict[str, Any]:
    """Pre-train, checkpoint, export OUT/final/{discriminator,generator}; return a summary.
    `cfg` is not changed: the run trains its plan's copy (`electra.pretraining.plan`), which
    OUT/settings.json records (`run_config(OUT)` reads it back). `report_to`: sinks that also
    get the metrics (`electra.runtime.sinks`: tensorboard, wandb, mlflow); `tensorboard=True`
    is `report_to=("tensorboard",)`.
    `init`: start from these weights (`electra.pretraining.init_from`; `cfg.model` must already be
    the checkpoint's, see `adopt_checkpoint`) instead of random ones. `sources`: where each
    setting came from (`electra.settings.resolve`), for OUT/run.json. `notes`: lines printed on
    stderr once every check has passed. `show_progress`: a `Progress` (`electra.progress`;
    True: the bar, False: nothing), on the main process only.

    `resume`: False, OUT must not hold a run; True, it must, and the run continues from its
    latest checkpoint; "auto", it continues where OUT holds a run and starts otherwise.

    On SIGTERM or SIGUSR1 the current step is finished, a checkpoint written and `Preempted`
    raised (the CLI exits with EXIT_PREEMPTED); `resume=True` (or "auto") then continues
    exactly.

    With `train.budget_seconds` the run's time counts from this call and ends with its export
    (`electra.pretraining.budget`); with `train.budget_flops` the steps are what the FLOPs buy."""
    from electra.runtime.speed import configure_process_for_speed

    started = time.perf_counter()
    data_dir, out = Path(data_dir), Path(out_dir)
    report_to = tuple(dict.fromkeys([*report_to, *(["tensorboard"] if tensorboard else [])]))
    require_sinks(report_to)
    configure_process_for_speed()
    requested = requested_precision(cfg, wants_resume(resume, out), out)
    info = init_distributed(device, bf16=requested == "bf16")
    try:
        data = PretrainingDataset(data_dir)
        plan = make_plan(cfg, data, data_dir, out, resume, requested, info, report_to)
        return _pretrain(plan, data, info, show_progress, init, started, sources, notes)
    finally:
        cleanup(info)


@dataclass
class _Run:
    """What set-up hands to the steps and the export: one run's plan, data, networks and
    state. `steps` and `warmup_steps` are the schedule's length: the plan's, or a time
    budget's as it plans them (`_follow_budget`)."""

    plan: RunPlan
    info: DistInfo
    data: PretrainingDataset
    context: ObjectiveContext
    objective: torch.nn.Module
    model: torch.nn.Module  # the objective, or its DDP wrapper
    update: Update
    step: int
    skipped: int
    latest: Path | None
    step_flops: int
    steps: int
    warmup_steps: int
    init: InitSource | None = None
    sources: Sources | None = None
    whole_step: WholeStep | None = None  # train.compile_step
    overflows: int = 0  # fp16 updates skipped for an overflow, before this process
    budget: TimeBudget | None = None  # train.budget_seconds
    planned: bool = True  # False until a time budget's steps are planned

    @property
    def cfg(self) -> PretrainConfig:
        return self.plan.cfg

    @property
    def out(self) -> Path:
        return self.plan.out

    @property
    def data_dir(self) -> Path:
        return self.plan.data_dir

    @property
    def asked(self) -> bool | str:
        return self.plan.asked_resume


def _pretrain(plan: RunPlan, data: PretrainingDataset, info: DistInfo,
              show_progress: bool | Progress, init: InitSource | None = None,
              started: float | None = None, sources: Sources | None = None,
              notes: Sequence[str] = ()) -> dict[str, Any]:
    run = _set_up(plan, data, info, init, started, sources, notes)
    summary = _train_steps(run, show_progress, plan.report_to)
    with _phase(run.budget, "export"):
        summary["final"] = _export(run)
    barrier(info)
    if plan.cfg.train.budgeted:
        summary["budget"] = _budget_report(run, summary)
        if info.is_main:
            _write_run_record(run, {"budget": summary["budget"]})
    return summary


def _budget_report(run: _Run, summary: dict[str, Any]) -> dict[str, Any]:
    """What a budgeted run bought: the budget, the steps, tokens and FLOPs reached and (for a
    time budget) the time of each phase and the plans made."""
    tc = run.cfg.train
    report: dict[str, Any] = {"steps": run.step, "warmup_steps": run.warmup_steps,
                              "tokens": run.step * tc.batch_size * run.data.seq_len,
                              "flops": summary["flops"]}
    if tc.budget_flops is not None:
        report["budget_flops"] = tc.budget_flops
    if run.budget is not None:
        report.update(run.budget.report())
        report["phases"]["train"] = round(run.budget.spent() - sum(run.budget.phases.values()),
                                          3)
    return report


def _set_up(plan: RunPlan, data: PretrainingDataset, info: DistInfo,
            init: InitSource | None = None, started: float | None = None,
            sources: Sources | None = None, notes: Sequence[str] = ()) -> _Run:
    """Check data, config and OUT; build the objective (from `init`'s weights when given) and
    its optimizer; restore a checkpoint when resuming; write OUT/settings.json and OUT/run.json
    (only once nothing can be refused any more)."""
    cfg, out, tc = plan.cfg, plan.out, plan.cfg.train
    _check_plan(plan, data, info, init)
    torch.manual_seed(tc.seed)  # identical initial weights on every rank
    context = ObjectiveContext(special=special_ids_for(plan.data_dir),
                               token_counts=data.token_counts)
    objective = build_objective(cfg.model, cfg.objective, context=context)
    latest = checkpoint.find_latest(out) if plan.resume else None
    if init is not None and latest is None:  # a resumed run's weights are in its checkpoint
        load_weights(objective, init)
    objective.to(info.device)
    if tc.compile and not tc.compile_step:
        compile_layers(objective)
    optimizer = build_optimizer(objective, tc)  # fused on CUDA (adamw_impl)
    scheduler = build_scheduler(optimizer, tc)
    torch.manual_seed(tc.seed * 1000 + info.rank)  # masking/dropout streams differ per rank
    update = Update(optimizer, scheduler, [p for p in objective.parameters() if p.requires_grad],
                    tc.max_grad_norm, tc.skip_nonfinite, scaler=make_scaler(info.device,
                                                                            tc.precision))
    restored = _restore(plan, latest, objective, update, info)
    budget = _time_budget(plan, restored.meta, started, objective)
    # A run stopped after its last checkpoint but before its export resumes to export only.
    exported = all((out / "final" / name / "model.safetensors").is_file()
                   for name in objective.exportable())
    if plan.resume and (restored.step > restored.steps
                        or (restored.step == restored.steps and exported)):
        raise ElectraError(f"{out}: already trained {restored.step} steps (>= --steps "
                           f"{restored.steps})")
    # Written only now, so that a resume refused above leaves OUT as it was.
    barrier(info)  # every rank checks OUT before rank 0 writes into it
    if info.is_main:
        for note in [*notes, *(init.notes if init is not None else ()), *_schedule_notes(tc)]:
            print(f"note: {note}", file=sys.stderr)
    whole_step = (WholeStep(objective, optimizer, tc.max_grad_norm, tc.precision,
                            _window_values, compile=True, device=info.device)
                  if tc.compile_step else None)
    run = _Run(plan, info, data, context, objective, _distributed(objective, info), update,
               restored.step, restored.skipped, latest, step_flops(cfg, data.seq_len),
               restored.steps, restored.warmup_steps, init, sources, whole_step,
               restored.overflows, budget,
               planned=budget is None or restored.steps != UNPLANNED_STEPS)
    if info.is_main:
        _write_run_files(run, plan.asked, fresh=latest is None and not holds_run(out))
    if budget is not None:
        budget.phases["set_up"] = budget.phases.get("set_up", 0.0) + (
            time.perf_counter() - budget.started)
    return run


def _check_plan(plan: RunPlan, data: PretrainingDataset, info: DistInfo,
                init: InitSource | None) -> None:
    """What the run's data, configuration and OUT must be, each refused in one line before
    anything is built or written."""
    cfg, tc = plan.cfg, plan.cfg.train
    if data.seq_len > cfg.model.max_position_embeddings:
        raise ElectraError(f"{plan.data_dir}: sequence length {data.seq_len} exceeds "
                           f"model.max_position_embeddings ({cfg.model.max_position_embeddings}"
                           f", preset {cfg.preset}); prepare shorter sequences or use a preset "
                           f"with more positions (the modern ones have 8192)")
    if init is not None:
        check_vocabulary(init, plan.data_dir, data.vocab_checksum, data.vocab_size)
    cfg.model.arch.load("transformers")  # a run ends in its export: refused now, not then
    per_step = info.world_size * tc.grad_accum
    if tc.batch_size % per_step:
        raise ElectraError(f"train.batch_size {tc.batch_size} is not divisible by processes x "
                           f"grad_accum = {per_step}")
    check_batchable(data, tc.batch_size // per_step, info.world_size)
    _check_run_dir(plan.out, cfg, data, plan.data_dir, plan.resume)
    if tc.compile_step and info.enabled:
        raise ElectraError("train.compile_step compiles one process's whole step; under "
                           "torchrun use train.compile (the layers) instead")
    if tc.compile_step and tc.precision == "fp16":
        raise ElectraError("train.compile_step does not take fp16 (its loss scaling decides "
                           "on the host); use --precision fp32 (or bf16 where it is native), or "
                           "drop --compile-step")


@dataclass(frozen=True)
class _Restored:
    """Where a run starts: step 0, or a checkpoint's step, counters and meta; and the
    schedule's length it continues with."""

    step: int
    steps: int
    warmup_steps: int
    skipped: int = 0
    overflows: int = 0
    meta: dict = dataclasses.field(default_factory=dict)


def _restore(plan: RunPlan, latest: Path | None, objective: torch.nn.Module, update: Update,
             info: DistInfo) -> _Restored:
    """Load the latest checkpoint into the networks, optimizer, schedule and loss scale. A
    time-budgeted run continues with the plan its schedule holds; another may ask for more
    steps (or another warm-up) than before, unless a time budget once planned its schedule."""
    tc = plan.cfg.train
    if latest is None:
        return _Restored(0, tc.steps, tc.warmup_steps)
    optimizer, scheduler = update.optimizer, update.scheduler
    step = checkpoint.load(latest, objective, optimizer, scheduler, info.rank,
                           world_size=info.world_size, scaler=update.scaler)
    meta = checkpoint.read_meta(latest)
    counts = {"skipped": int(meta.get("skipped_nonfinite", 0)),
              "overflows": int(meta.get("skipped_overflow", 0)), "meta": meta}
    schedule = schedule_of(scheduler)
    if tc.budget_seconds is not None:  # the plan the run made, in its schedule
        return _Restored(step, schedule.total, schedule.warmup, **counts)
    if schedule.changed_at is None:
        schedule.warmup, schedule.total = tc.warmup_steps, tc.steps
        for group, base in zip(optimizer.param_groups, scheduler.base_lrs, strict=True):
            group["lr"] = base * schedule(scheduler.last_epoch)  # the next step's, now
    elif (schedule.total, schedule.warmup) != (tc.steps, tc.warmup_steps):
        raise ElectraError(f"{plan.out}: this run's time budget planned {schedule.total} steps "
                           f"({schedule.warmup} of warm-up); resume it with the same "
                           f"--budget, or with --steps {schedule.total} --warmup-steps "
                           f"{schedule.warmup}")
    return _Restored(step, tc.steps, tc.warmup_steps, **counts)


def _time_budget(plan: RunPlan, meta: dict, started: float | None,
                 objective: torch.nn.Module) -> TimeBudget | None:
    """A time-budgeted run's clock: from this process's start, with a resumed run's time
    already spent (its checkpoint's meta)."""
    seconds = plan.cfg.train.budget_seconds
    if seconds is None:
        return None
    budget = (TimeBudget.resumed(seconds, plan.out, meta) if plan.resume
              else TimeBudget(seconds))
    if started is not None:  # this process's set-up counts too
        budget.started = started
    budget.model_bytes = sum(p.numel() * p.element_size() for p in objective.parameters())
    return budget


def _distributed(objective: torch.nn.Module, info: DistInfo) -> torch.nn.Module:
    """The objective under DDP when there are several processes. An objective whose phases
    leave some networks idle (two-stage) asks DDP to allow it. gradient_as_bucket_view: the
    gradients are views into DDP's all-reduce buckets, which saves a gradient-sized copy
    (memory and time) every step."""
    if not info.enabled:
        return objective
    return DistributedDataParallel(
        objective, device_ids=[info.device.index] if backend_of(info.device).indexed else None,
        find_unused_parameters=getattr(objective, "find_unused_parameters", False),
        gradient_as_bucket_view=True)


def _train_steps(run: _Run, show_progress: bool | Progress, report_to: Sequence[str]
                 ) -> dict[str, Any]:
    """Train from `run.step` to `train.steps`: log, probe and checkpoint on their cadences;
    on a time budget, plan and re-plan the steps (`_follow_budget`)."""
    tc, info, objective, budget = run.cfg.train, run.info, run.objective, run.budget
    batches = iterate_batches(run.data, tc.batch_size // (info.world_size * tc.grad_accum),
                              tc.seed, start_batch=run.step * tc.grad_accum, rank=info.rank,
                              world_size=info.world_size)
    logger = MetricsLogger(run.out, resume_step=run.step, report_to=report_to,
                           active=info.is_main, write_failed=lambda reason, what:
                           _write_failed(run, reason, what))
    logger.hyperparameters(run.cfg.to_dict())
    probe = HeldoutProbe.for_run(run.data_dir, run.data, run.context, tc, info)
    if probe is not None and run.step == 0:
        with _phase(budget, "probe"):
            logger.log(probe.record(objective, 0, 0.0))

    window = LogWindow()
    last_record: dict[str, Any] = {}
    start_time = time.perf_counter()
    run.model.train()
    with logger, StepLoop(run.steps, run.step, "pretrain",
                          show_progress if info.is_main else Progress.OFF, info,
                          nonfinite_hint=lambda: _nonfinite_hint(run),
                          skip_nonfinite=tc.skip_nonfinite) as loop:
        loop.skipped, loop.overflows = run.skipped, run.overflows
        while loop.running:
            objective.on_step_start(loop.step, run.steps)
            lr = run.update.lr
            if run.whole_step is not None:
                finite = _whole_step(run, batches, window, loop)
            else:
                finite = _eager_step(run, batches, window, loop)
            window.end_step(keep=finite)
            step = loop.end_step()
            if budget is not None:
                _follow_budget(run, loop, probe)
            if (loop.due(tc.log_every) or _checkpoint_due(run, loop) or loop.stopping
                    or (probe is not None and probe.due(step, run.steps))):
                loop.settle()  # the device is read here anyway

            if loop.due(tc.log_every):
                record = _log_record(run, loop, window, lr)
                logger.log(record)
                if info.is_main:
                    loop.report({k: f"{record[k]:.3f}" for k in
                                      ("loss", "disc_acc", "gen_acc", "mlm_acc") if k in record})
                last_record = record
            if probe is not None and probe.due(step, run.steps):
                with _phase(budget, "probe"):
                    logger.log(probe.record(objective, step, step * run.step_flops))
            if _checkpoint_due(run, loop) or loop.stopping:
                with _phase(budget, "checkpoint"):
                    run.latest = _save_checkpoint(
                        run.out, objective, run.update, step, run.cfg, run.data, info,
                        {"skipped_nonfinite": loop.skipped, "skipped_overflow": loop.overflows,
                         **({"budget": budget.state()} if budget is not None else {})},
                        continue_hint(run.asked))
                if budget is not None and info.is_main:  # the checkpoint's own time counts
                    budget.write_heartbeat(run.out)
            if loop.stopping:
                loop.preempt(f"; checkpoint {run.latest} written; " + (
                    "run the same command again to continue" if run.asked == AUTO
                    else "continue with the same command plus --resume"))
        logger.finish({**last_record, "flops": loop.step * run.step_flops})
    run.step = loop.step
    examples = run.step * tc.batch_size
    # data_passes: how often the run read its training text; at small scale transfer fell
    # where this was large (docs/experiments/cpu-recipe.md).
    # train_seconds times this call only: a resumed run's earlier steps are not in it.
    return {"steps": run.step, "flops": run.step * run.step_flops,
            "train_seconds": time.perf_counter() - start_time,
            "timed_steps": run.step - loop.first_step, "examples": examples,
            "data_passes": examples / len(run.data), "last": last_record, "final": {},
            "out": str(run.out), "world_size": info.world_size}


def _nonfinite_hint(run: _Run) -> str:
    """What a non-finite loss's error adds: where the run can continue from."""
    where = (f"the last good checkpoint is {run.latest} (continue from it with --resume, "
             "e.g. with a lower --lr)" if run.latest is not None else "no checkpoint written yet")
    return f"{where}; --skip-nonfinite skips such steps instead"


def _log_record(run: _Run, loop: StepLoop, window: LogWindow, lr: float) -> dict[str, Any]:
    """A metrics line at the loop's step: the window's means, lr, cumulative FLOPs, and the
    counters of skipped steps, loss scale and budget a run has."""
    tc, step, budget = run.cfg.train, loop.step, run.budget
    record = {"step": step, **_record(*window.flush(run.info)), "lr": lr,
              "flops": step * run.step_flops}
    if tc.skip_nonfinite:
        record["skipped_nonfinite"] = loop.skipped
    if run.update.scaler is not None:
        record["skipped_overflow"] = loop.overflows
        record["loss_scale"] = run.update.scaler.get_scale()
    if budget is not None:
        record["budget_spent_s"] = round(budget.spent(), 2)
        if run.info.is_main:
            budget.write_heartbeat(run.out)
    return record


def _write_failed(run: _Run, reason: str, what: str) -> str:
    """A failed write during the steps (a metrics line), as one line: the latest checkpoint
    and the command that continues."""
    latest = (f"the latest complete checkpoint is step {checkpoint.step_of(run.latest.name)}"
              if run.latest is not None else "no complete checkpoint yet")
    return f"{what}: {reason}; {latest}; {space_advice(reason)} and {continue_hint(run.asked)}"


def _phase(budget: TimeBudget | None, name: str) -> contextlib.AbstractContextManager:
    return budget.phase(name) if budget is not None else contextlib.nullcontext()


def _checkpoint_due(run: _Run, loop: StepLoop) -> bool:
    """Every `save_every` steps; on a budget at `checkpoints_per_run` points of the run."""
    tc = run.cfg.train
    if tc.budgeted:
        return run.planned and at_fractions(loop.step, run.steps, tc.checkpoints_per_run)
    return loop.due(tc.save_every)


def _follow_budget(run: _Run, loop: StepLoop, probe: HeldoutProbe | None) -> None:
    """After each step of a time-budgeted run: time the first steps, then plan the steps
    that fit the budget; check the plan at CHECK_FRACTIONS of the run (and once after a resume)
    and re-plan where it would overrun or end early. Under torchrun every process takes the
    same decisions at the same steps (the most cautious one's)."""
    budget, tc, step, info = run.budget, run.cfg.train, loop.step, run.info
    if not budget.calibrated:
        budget.calibrated = _on_all_ranks(not budget.calibrating(step), info)
        if not budget.calibrated:
            return
    why = budget.due_check(step, run.steps) if run.planned else "first plan"
    if why is None:
        return
    budget.observe(step)

    def rest(total: int) -> float:
        """Seconds a run ending at `total` needs besides its steps from here: the probes and
        checkpoints still due (this step's among them: they follow this call) and the
        export."""
        done = step - 1
        probes = probe.left(done, total) if probe is not None else 0
        checkpoints = tc.checkpoints_per_run - done * tc.checkpoints_per_run // max(1, total)
        return (probes * budget.mean("probe") + checkpoints * budget.mean("checkpoint")
                + budget.mean("export") + budget.margin())

    wanted = run.steps
    if not run.planned or budget.needs_new_plan(step, run.steps, rest(run.steps)):
        wanted = budget.affordable_steps(step, rest)
    total = max(step + 1, _smallest_over_ranks(wanted, info))
    if run.planned and total == run.steps:
        return
    warmup = capped_warmup(tc.warmup_steps, total) if not run.planned else run.warmup_steps
    schedule_of(run.update.scheduler).replan(step, total, warmup)
    run.steps, run.warmup_steps = total, warmup
    loop.set_total(total)
    budget.record_plan(step, total, warmup, why)
    run.planned = True
    if info.is_main:
        _write_run_record(run)


def _on_all_ranks(flag: bool, info: DistInfo) -> bool:
    """Whether `flag` holds on every process."""
    if not info.enabled:
        return flag
    return not bool(all_reduce_max(torch.tensor([int(not flag)], device=info.device),
                                   info).item())


def _smallest_over_ranks(value: int, info: DistInfo) -> int:
    """The least of `value` over all processes (each times its own steps)."""
    if not info.enabled:
        return value
    return -int(all_reduce_max(torch.tensor([-value], device=info.device), info).item())


def _write_run_files(run: _Run, settings: dict[str, Any], fresh: bool) -> None:
    """OUT/settings.json and OUT/run.json. A failed write (a full disk) is one line; a new
    run's OUT then holds neither, so the same command starts it again."""
    def describe(reason: str) -> str:
        return (f"{run.out}: {reason} while writing {SETTINGS_FILE} and {RUN_FILE}"
                f"{' (neither kept)' if fresh else ''}; {space_advice(reason)} and run the "
                "same command again")

    with reported_write_failures(describe):
        try:
            run.out.mkdir(parents=True, exist_ok=True)
            write_settings(run.out, settings)
            _write_run_record(run)
        except Exception:
            if fresh:
                for name in (SETTINGS_FILE, RUN_FILE):
                    (run.out / name).unlink(missing_ok=True)
            raise


def _write_run_record(run: _Run, extra: dict | None = None) -> None:
    """OUT/run.json: the data, its vocabulary, the start model, where each setting came from,
    where and how it ran (`run`: the plan's device, precision, resume and sinks), a budget's
    plan (`plan`: the steps and warm-up it fixed) and, at the end, what it bought."""
    record = {"data": str(run.data_dir), "vocab_checksum": run.data.vocab_checksum,
              "init": run.init.describe() if run.init is not None else None,
              "settings": SETTINGS_FILE,
              "sources": run.sources.to_json() if run.sources is not None else None,
              "run": run.plan.record()}
    if run.cfg.train.budgeted and run.planned:
        record["plan"] = {"steps": run.steps, "warmup_steps": run.warmup_steps}
    write_run_record(run.out, {**record, **(extra or {})})


def _eager_step(run: _Run, batches, window: LogWindow, loop: StepLoop) -> bool | torch.Tensor:
    """One optimizer step, module by module: each micro-batch's forward and backward, then
    `loop.update`. Returns whether the update was applied (a device flag where it was
    decided on the device)."""
    tc, info = run.cfg.train, run.info
    step_loss = torch.zeros((), device=info.device)
    for micro in range(tc.grad_accum):
        host = next(batches)
        # Padding is decided on the host batch, where it is free: asked of the device copy it
        # would be a sync per encoder call on CUDA (see `known_padding`).
        padded = mask_has_padding(host["attention_mask"])
        batch = to_device(host, info.device)  # pinned + non-blocking on CUDA
        sync = micro == tc.grad_accum - 1 or not info.enabled
        with (contextlib.nullcontext() if sync else run.model.no_sync()), \
                autocast(info.device, tc.precision), known_padding(padded):
            output = run.model(batch)
            run.update.backward(output.loss / tc.grad_accum)
        step_loss += output.loss.detach().float()
        window.add(_window_values(output, batch["attention_mask"]))
    return loop.update(run.update, step_loss)


def _whole_step(run: _Run, batches, window: LogWindow, loop: StepLoop) -> torch.Tensor:
    """One optimizer step as one compiled function (`train.compile_step`, see
    `electra.pretraining.step`); the schedule advances on the host."""
    hosts = [next(batches) for _ in range(run.cfg.train.grad_accum)]
    padded = any(mask_has_padding(h["attention_mask"]) for h in hosts)
    result = run.whole_step([to_device(h, run.info.device) for h in hosts], padded)
    for values in result.values:
        window.add(values)
    with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": the
        warnings.simplefilter("ignore")  # update was the compiled step's, not optimizer.step
        run.update.scheduler.step()
    return loop.count_update(result.finite)


def _export(run: _Run) -> dict[str, str]:
    """OUT/final/<network>: each exportable network in Hugging Face format (main rank). A
    failed write removes OUT/final (a resume writes it again) and is one error."""
    if not run.info.is_main:
        return {}
    extra = export_extra(run.step, run.step * run.step_flops, run.data.vocab_checksum,
                         run.cfg.objective.name,
                         run.init.describe() if run.init is not None else None)
    final = run.out / "final"
    card = RunFacts(preset=run.cfg.preset, data_dir=run.data_dir,
                    tokens=run.step * run.cfg.train.batch_size * run.data.seq_len)

    def describe(reason: str) -> str:
        latest = (f"the latest complete checkpoint is step {checkpoint.step_of(run.latest.name)}"
                  if run.latest is not None else "no complete checkpoint")
        return (f"{run.out}: {reason} while writing the export {final} (partial files "
                f"removed); {latest}; {space_advice(reason)} and {continue_hint(run.asked)}")

    with reported_write_failures(describe):
        try:
            return export_networks(run.objective, final, run.data_dir / "tokenizer", extra,
                                       card)
        except Exception:
            shutil.rmtree(final, ignore_errors=True)
            raise


def _window_values(output, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    values = {"loss": output.loss.detach(), **output.losses, **output.counts,
              "_tokens": attention_mask.sum()}
    return {k: v.detach().float() for k, v in values.items()}


def _record(total: dict[str, float], n: int, elapsed: float) -> dict[str, float]:
    """A log line from a window's totals: mean losses over its micro-batches, the objective's
    metrics from its counts, tokens/s."""
    if not n:  # every step since the last line was skipped (on all ranks)
        return {}
    record = {"loss": total["loss"] / n}
    for k in sorted(total):
        if k.endswith("_loss"):  # every named loss of the objective
            record[k] = total[k] / n
    record.update(metrics_from_counts(total))
    record["tokens_per_s"] = total["_tokens"] / elapsed if elapsed > 0 else 0.0
    return record


def _save_checkpoint(out, objective, update: Update, step, cfg, data, info,
                     counts: dict[str, int], continue_with: str = checkpoint.CONTINUE) -> Path:
    """Write the checkpoint of `step` on every rank together; return its final path. Its meta
    points to the run's settings and record (OUT/settings.json, OUT/run.json). `counts`: the
    skipped steps so far, for the metrics of a resumed run; `continue_with`: how the run
    continues after a failed write."""
    return checkpoint.save(
        out, step, lambda tmp: checkpoint.write_main(tmp, objective, update.optimizer,
                                                     update.scheduler, step,
                                                     scaler=update.scaler),
        {"settings": SETTINGS_FILE, "run": RUN_FILE, "vocab_checksum": data.vocab_checksum,
         "world_size": info.world_size, **counts}, keep=cfg.train.keep_checkpoints, info=info,
        keep_every=cfg.train.keep_every, continue_with=continue_with)

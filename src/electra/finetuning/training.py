"""The fine-tuning loop: a `TrainPlan` says what one run iterates (batches, their collation,
the objective), `train_model` runs it (AdamW with layer-wise LR decay, the shared training
skeleton, a metrics log, gradient accumulation, checkpoints a rerun continues from exactly), so
single-task, multi-task and distilled training are one loop."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.device import to_device
from electra.finetuning.data import feature_lengths, train_batches
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.optim import build_optimizer
from electra.finetuning.resume import SeedCheckpoints
from electra.finetuning.settings import FinetuneSettings
from electra.precision import autocast, make_scaler
from electra.progress import Progress
from electra.runtime import checkpoint
from electra.runtime.metrics_log import MetricsLogger
from electra.runtime.skeleton import LogWindow, StepLoop, Update
from electra.tasks import Task

LOOP_STATE = "loop.pt"  # in a checkpoint: the batch position, running metrics, log window


def train_step(model: FinetuneModel, task: Task, batch: dict[str, torch.Tensor], loop: StepLoop,
               update: Update, precision: str) -> tuple[torch.Tensor, object, bool]:
    """One optimizer step: forward under the precision's autocast, backward (loss-scaled under
    fp16), then the shared update (clipping to 1.0 as the official optimizer does, the
    non-finite guard, AdamW, the schedule); returns the detached loss, the head output and
    whether the update was applied (fp16 skips the steps whose scaled gradients overflow).
    Shared with benchmarks/finetune_speed.py, so what it times is what training runs."""
    device = batch["input_ids"].device
    with autocast(device, precision):
        logits = model(batch)
    loss = task.loss(logits, batch)
    update.backward(loss)
    applied = loop.update(update, loss.detach())
    return loss.detach(), logits, bool(applied)


def accumulated_step(model: FinetuneModel, task: Task, micro: list[tuple[dict, float]],
                     loop: StepLoop, update: Update, precision: str
                     ) -> tuple[torch.Tensor, tuple[int, int], bool]:
    """`train_step` over one batch's micro-batches (`--grad-accum`): each (batch, weight) is
    forwarded and its loss times `weight` (its share of what the whole batch's loss averages
    over, `micro_batches`) backpropagated, so the accumulated gradient is the whole batch's,
    then one update. Returns the whole batch's loss, its (correct, counted) predictions and
    whether the update was applied."""
    total = None
    correct = counted = 0
    for batch, weight in micro:
        with autocast(batch["input_ids"].device, precision):
            logits = model(batch)
        loss = task.loss(logits, batch) * weight
        update.backward(loss)
        total = loss.detach() if total is None else total + loss.detach()
        hits, labels = task.hits(logits, batch)
        correct, counted = correct + hits, counted + labels
    applied = loop.update(update, total)
    return total, (correct, counted), bool(applied)


def micro_batches(idx: list[int], collate: Callable[[list[int], float], dict], progress: float,
                  micro_size: int, units: Callable[[dict], int]) -> list[tuple[dict, float]]:
    """One step's examples cut into micro-batches of `micro_size` (a short last batch gives
    fewer), each collated (padded to its own longest sequence; `progress` as `TrainPlan.collate`
    takes it) with its weight: its share of the units the loss averages over
    (`Task.loss_units`: labelled tokens for tagging, rows otherwise). Micro-batches without any
    such unit add nothing to the gradient and are left out."""
    parts = [collate(idx[s:s + micro_size], progress) for s in range(0, len(idx), micro_size)]
    counts = [units(b) for b in parts]
    whole = sum(counts)
    if not whole:  # nothing to average over: the loss is not finite either way
        return [(b, 1.0 / len(parts)) for b in parts]
    return [(b, n / whole) for b, n in zip(parts, counts, strict=True) if n]


class EpochBatches:
    """The batches of consecutive epochs (`epoch(generator)`, the generator seeded once with
    the run's seed), with a position a checkpoint can hold: the epochs begun and the batches
    taken from the last. `restore` replays the epochs from the seed, so plans whose sampler
    carries state from one epoch to the next (multi-task sampling) continue exactly too."""

    def __init__(self, epoch: Callable[[torch.Generator], list[list[int]]], seed: int) -> None:
        self._epoch = epoch
        self._generator = torch.Generator().manual_seed(seed)
        self._batches: list[list[int]] = []
        self.epochs = 0
        self.taken = 0

    def __next__(self) -> list[int]:
        while self.taken >= len(self._batches):
            self._batches = self._epoch(self._generator)
            self.epochs, self.taken = self.epochs + 1, 0
        self.taken += 1
        return self._batches[self.taken - 1]

    def state(self) -> dict[str, int]:
        return {"epochs": self.epochs, "taken": self.taken}

    def restore(self, state: dict[str, int]) -> None:
        for _ in range(state["epochs"]):
            self._batches = self._epoch(self._generator)
        self.epochs, self.taken = state["epochs"], state["taken"]


@dataclass
class TrainPlan:
    """What one training run iterates, so single-task, multi-task and distilled training share
    `train_model`: `epoch(gen)` gives one epoch of batches (index lists), `collate(idx,
    progress)` the batch (with distillation targets for the fraction `progress` of training
    done), and `objective` the loss and accuracy counts (a Task, or a mixture of tasks)."""

    name: str
    steps_per_epoch: int
    epoch: Callable[[torch.Generator], list[list[int]]]
    collate: Callable[[list[int], float], dict]
    objective: object


def single_task_plan(task: Task, features: list[dict], settings: FinetuneSettings, pad_id: int,
                     targets: Callable[[dict, list[int], float], dict] | None = None
                     ) -> TrainPlan:
    """Length-grouped batches of one task; `targets(batch, idx, progress)` adds distillation
    targets when a teacher is given."""
    lengths = feature_lengths(features)

    def collate(idx: list[int], progress: float) -> dict:
        batch = task.collate([features[i] for i in idx], pad_id)
        return targets(batch, idx, progress) if targets else batch

    return TrainPlan(task.name, math.ceil(len(features) / settings.batch_size),
                     lambda gen: train_batches(lengths, settings.batch_size, gen,
                                               settings.length_sorted), collate, task)


def train_model(model, plan: TrainPlan, settings: FinetuneSettings, lr: float, decay: float,
                epochs: float, seed: int, device: torch.device, show_progress: bool | Progress,
                logger: MetricsLogger, checkpoints: SeedCheckpoints | None = None
                ) -> tuple[float, int]:
    """Train in place, logging the mean loss (and accuracy) of every `log_every` steps; returns
    the last running loss and the number of steps. A step takes `settings.batch_size` examples
    in `settings.grad_accum` micro-batches.

    `checkpoints`: where this seed's checkpoints go, every `checkpoints.every` steps and when
    SIGTERM or SIGUSR1 arrives (the step is finished, a checkpoint written and `Preempted`
    raised); training continues from `checkpoints.resume_from` when it is set, exactly as if
    it had not stopped (weights, AdamW, schedule, loss scale, RNG, batch position, running
    metrics and the log window)."""
    total = max(1, int(math.ceil(plan.steps_per_epoch * epochs)))
    opt, sched = build_optimizer(model, lr, decay, model.encoder.config.num_hidden_layers, total,
                                 settings.warmup_fraction, settings.lr_decay_style,
                                 settings.weight_decay, settings.adam_eps)
    update = Update(opt, sched, list(model.parameters()), max_grad_norm=1.0,
                    scaler=make_scaler(device, settings.precision))
    model.train()
    running = None
    correct = seen = 0
    window = LogWindow()
    batches = EpochBatches(plan.epoch, seed)
    start, overflows = 0, (0, 0)
    if checkpoints is not None and checkpoints.resume_from is not None:
        start = checkpoint.load(checkpoints.resume_from, model, opt, sched, 0,
                                scaler=update.scaler)
        state = torch.load(checkpoints.resume_from / LOOP_STATE, weights_only=False)
        batches.restore(state["batches"])
        running, correct, seen = state["running"], state["correct"], state["seen"]
        window.sums, window.count = state["window_sums"], state["window_count"]
        overflows = state["overflows"], state["overflows_in_a_row"]

    def write(tmp: Path) -> None:
        checkpoint.write_main(tmp, model, opt, sched, loop.step, scaler=update.scaler)
        torch.save({"batches": batches.state(), "running": running, "correct": correct,
                    "seen": seen, "window_sums": window.sums, "window_count": window.count,
                    "overflows": loop.overflows, "overflows_in_a_row": loop.overflows_in_a_row},
                   tmp / LOOP_STATE)

    with StepLoop(total, start, f"{plan.name} seed {seed}", show_progress,
                  nonfinite_hint=lambda: "try a lower --lr") as loop:
        loop.overflows, loop.overflows_in_a_row = overflows
        while loop.running:
            idx = next(batches)
            progress = loop.step / total
            step_lr = update.lr  # the head's
            loss, counts, applied = _optimizer_step(model, plan, idx, progress, settings, device,
                                                    loop, update)
            if applied:  # an fp16 step skipped for an overflow counts in no metric
                value = float(loss)
                running = value if running is None else 0.95 * running + 0.05 * value
                hits, labels = counts
                correct, seen = correct + hits, seen + labels
                window.add({"loss": value, "hits": hits, "labels": labels})
            window.end_step()
            post = {"loss": f"{running:.4f}"} if running is not None else {}
            if seen:
                post["acc"] = f"{correct / seen:.3f}"
            step = loop.end_step(post)
            if loop.due(settings.log_every):
                record = {"step": step, "epoch": step / plan.steps_per_epoch,
                          **_train_record(*window.flush()[:2]), "lr": step_lr}
                if update.scaler is not None:
                    record["skipped_overflow"] = loop.overflows
                    record["loss_scale"] = update.scaler.get_scale()
                logger.log(record)
                loop.report(post)
            saved = None
            if checkpoints is not None and (loop.due(checkpoints.every) or loop.stopping):
                saved = checkpoints.save(step, write)
            if loop.stopping:
                loop.preempt(f" ({plan.name}, seed {seed}); " + (
                    f"checkpoint {saved} written; run the same command again to continue"
                    if saved is not None else "no checkpoint written"))
    return float(running or 0.0), loop.step


def _optimizer_step(model, plan: TrainPlan, idx, progress: float, settings: FinetuneSettings,
                    device: torch.device, loop: StepLoop, update: Update):
    """One optimizer step on the examples `idx`, in `settings.grad_accum` micro-batches where
    there are more than one: (loss, (hits, labels), whether the update was applied)."""
    micro_size = settings.batch_size // settings.grad_accum
    if len(idx) <= micro_size:
        batch = to_device(plan.collate(idx, progress), device)
        loss, logits, applied = train_step(model, plan.objective, batch, loop, update,
                                           settings.precision)
        return loss, plan.objective.hits(logits, batch) if applied else (0, 0), applied
    units = getattr(plan.objective, "loss_units", lambda b: len(b["input_ids"]))
    micro = [(to_device(b, device), w) for b, w in micro_batches(
        idx, plan.collate, progress, micro_size, units)]
    return accumulated_step(model, plan.objective, micro, loop, update, settings.precision)


def _train_record(total: dict[str, float], steps: int) -> dict[str, float]:
    """Mean loss and accuracy of a log window (a smoother curve than single steps)."""
    if not steps:  # every step of the window was skipped (fp16 overflows)
        return {}
    record = {"loss": total["loss"] / steps}
    if total["labels"]:
        record["train_acc"] = total["hits"] / total["labels"]
    return record

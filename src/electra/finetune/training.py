"""The fine-tuning loop: a `TrainPlan` says what one run iterates (batches, their collation,
the objective), `train_model` runs it (AdamW with layer-wise LR decay, the shared training
skeleton, a metrics log), so single-task, multi-task and distilled training are one loop."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from electra.device import to_device
from electra.finetune.data import feature_lengths, train_batches
from electra.finetune.heads import FinetuneModel
from electra.finetune.optim import build_optimizer
from electra.finetune.settings import FinetuneSettings
from electra.precision import autocast, make_scaler
from electra.progress import Progress
from electra.runtime.metrics_log import MetricsLogger
from electra.runtime.skeleton import LogWindow, StepLoop, Update, batches_forever
from electra.tasks import Task


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
                logger: MetricsLogger) -> tuple[float, int]:
    """Train in place, logging the mean loss (and accuracy) of every `log_every` steps; returns
    the last running loss and the number of steps. On SIGTERM or SIGUSR1 the current step is
    finished and `Preempted` raised: fine-tuning keeps no checkpoints (a run takes minutes to
    hours), so the message says to run the command again."""
    gen = torch.Generator().manual_seed(seed)
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
    batches = batches_forever(lambda: plan.epoch(gen))
    with StepLoop(total, 0, f"{plan.name} seed {seed}", show_progress,
                  nonfinite_hint=lambda: "try a lower --lr") as loop:
        while loop.running:
            batch = to_device(plan.collate(next(batches), loop.step / total), device)
            step_lr = update.lr  # the head's
            loss, logits, applied = train_step(model, plan.objective, batch, loop, update,
                                               settings.precision)
            if applied:  # an fp16 step skipped for an overflow counts in no metric
                value = float(loss)
                running = value if running is None else 0.95 * running + 0.05 * value
                hits, labels = plan.objective.hits(logits, batch)
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
            if loop.stopping:
                loop.preempt(f" ({plan.name}, seed {seed}); fine-tuning keeps no checkpoints: "
                             "run the same command again to start over")
    return float(running or 0.0), loop.step


def _train_record(total: dict[str, float], steps: int) -> dict[str, float]:
    """Mean loss and accuracy of a log window (a smoother curve than single steps)."""
    if not steps:  # every step of the window was skipped (fp16 overflows)
        return {}
    record = {"loss": total["loss"] / steps}
    if total["labels"]:
        record["train_acc"] = total["hits"] / total["labels"]
    return record

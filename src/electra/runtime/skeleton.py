"""The skeleton every training loop shares: pre-training, fine-tuning (single- and multi-task)
and CVT differ in what a step computes, not in how a step is driven.

`StepLoop` owns what surrounds a step: the progress (`electra.progress`: a bar on a terminal,
a plain line per log interval elsewhere, or nothing), the stop signals
(SIGTERM/SIGUSR1 finish the step; the caller checkpoints if it can and `preempt` raises
`Preempted`, which the CLI turns into exit status 75), the optimizer update (gradient clipping,
the non-finite guard, the optimizer and schedule steps) and the cadence of log lines and
checkpoints. `LogWindow` sums a step's values between two log lines. A loop reads:

    with StepLoop(total, start, "pretrain", show_progress) as loop:
        while loop.running:
            loss = ...forward and backward...
            finite = loop.update(update, loss)
            window.end_step(keep=finite)
            loop.end_step()
            if loop.due(log_every): logger.log(record); loop.report({"loss": ...})
            if loop.due(save_every) or loop.stopping: ...checkpoint...
            if loop.stopping: loop.preempt("; checkpoint ... written; continue with --resume")
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from electra.errors import ElectraError, Preempted
from electra.progress import Progress, StepProgress
from electra.runtime.distributed import DistInfo, all_reduce_max, all_reduce_sum
from electra.runtime.preempt import StopSignals


@dataclass
class Update:
    """One optimizer update: clip the gradients of `params` to `max_grad_norm` (None: no
    clipping), step the optimizer and its schedule, clear the gradients. `skip_nonfinite`: a
    step whose loss or gradient norm is not finite is skipped (the schedule advances) instead
    of stopping the run with an error. `after` runs after every applied update (CVT's EMA).
    `scaler`: fp16's dynamic loss scaler (`electra.precision.make_scaler`); losses go through
    `backward`, so that they are scaled when it is set."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    params: list[torch.nn.Parameter]
    max_grad_norm: float | None = 1.0
    skip_nonfinite: bool = False
    after: Callable[[], None] | None = None
    scaler: torch.amp.GradScaler | None = None

    def backward(self, loss: torch.Tensor) -> None:
        """`loss.backward()`, scaled by the fp16 loss scale when there is one."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    @property
    def lr(self) -> float:
        """The largest learning rate of the groups (a fine-tuned model's head's)."""
        return max(group["lr"] for group in self.optimizer.param_groups)


_NONE_YET = 2**62  # no unsettled step


class StepLoop:
    """Drives `total` steps from `start`: see the module docstring. Under torchrun (`dist`),
    the non-finite and stop decisions are all-reduced so that every rank takes them together.
    `nonfinite_hint` ends the error of a non-finite step (what the user can do about it);
    `skip_nonfinite` is the `Update`'s, for the updates skipped on the device (`settle`).
    `show_progress`: a `Progress` (or its name), True for the bar, False for nothing."""

    def __init__(self, total: int, start: int = 0, desc: str = "train",
                 show_progress: bool | str | Progress = False, dist: DistInfo | None = None,
                 nonfinite_hint: Callable[[], str] = lambda: "",
                 skip_nonfinite: bool = False) -> None:
        self.total = total
        self.step = start
        self.first_step = start
        self.desc = desc
        self.dist = dist
        self.nonfinite_hint = nonfinite_hint
        self.skipped = 0
        self.skip_nonfinite = skip_nonfinite
        # fp16: updates skipped because the scaled gradients overflowed (the scale backs off).
        self.overflows = 0
        self.overflows_in_a_row = 0
        # Non-finite steps counted on the device and not yet read (see `settle`).
        self._unsettled: torch.Tensor | int = 0
        self._unsettled_since = _NONE_YET
        self._stop = False
        self._signals = StopSignals()
        self._progress = StepProgress(show_progress, total, start, desc)

    def __enter__(self) -> StepLoop:
        self._signals.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.close()
        self._signals.__exit__(*exc)

    @property
    def running(self) -> bool:
        return self.step < self.total

    @property
    def stopping(self) -> bool:
        """A stop signal arrived (on any rank) and steps remain: checkpoint, then `preempt`."""
        return self._stop and self.step < self.total

    def update(self, update: Update, loss: torch.Tensor) -> bool | torch.Tensor:
        """After the backward pass(es): clip, check that the loss and gradient norm are finite,
        then step (or skip, or raise). Returns whether the update was applied.

        Where the optimizer can skip an update on the device (torch's fused AdamW, on CUDA)
        and one process trains, nothing here waits for the device: the returned flag is a
        device tensor and the check is `settle`'s, when the loop next reads the device.
        Elsewhere one host sync per call (free on CPU)."""
        if update.scaler is not None:
            return self._scaled_update(update, loss)
        if update.max_grad_norm:
            norm = torch.nn.utils.clip_grad_norm_(update.params, update.max_grad_norm)
        else:
            norm = torch.zeros((), device=loss.device)
        if self._skips_on_device(update):
            finite = torch.isfinite(norm) & torch.isfinite(loss)
            update.optimizer.found_inf = (~finite).float()  # the fused kernel's skip flag
            try:
                update.optimizer.step()
            finally:
                del update.optimizer.found_inf
            update.scheduler.step()
            update.optimizer.zero_grad(set_to_none=True)
            return self.count_update(finite)
        finite, self._stop = self._flags(norm, loss)
        if finite:
            update.optimizer.step()
            update.scheduler.step()
            if update.after is not None:
                update.after()
        elif update.skip_nonfinite:
            self.skipped += 1
            _advance_schedule_only(update)
        else:
            hint = self.nonfinite_hint()
            raise ElectraError(
                f"non-finite loss or gradient at step {self.step + 1} (loss {float(loss):.4g}, "
                f"gradient norm {float(norm):.4g}); the update was not applied and nothing was "
                f"saved from it{'; ' + hint if hint else ''}")
        update.optimizer.zero_grad(set_to_none=True)
        return finite

    def _scaled_update(self, update: Update, loss: torch.Tensor) -> bool:
        """`update` under fp16 loss scaling: unscale, clip, then step and let the scale grow;
        or, where the scaled values overflowed, skip the update (the schedule advances, the
        scale backs off, `overflows` counts it). Non-finite values at a scale of 1 or below,
        or `MAX_OVERFLOWS_IN_A_ROW` overflows in a row, are divergence: the non-finite error."""
        from electra.precision import MAX_OVERFLOWS_IN_A_ROW

        scaler = update.scaler
        scaler.unscale_(update.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(update.params, update.max_grad_norm or math.inf)
        finite, self._stop = self._flags(norm, loss)
        if finite:
            scaler.step(update.optimizer)
            scaler.update()
            update.scheduler.step()
            if update.after is not None:
                update.after()
            self.overflows_in_a_row = 0
        else:
            scale = scaler.get_scale()
            if scale > 1 and self.overflows_in_a_row + 1 < MAX_OVERFLOWS_IN_A_ROW:
                self.overflows += 1
                self.overflows_in_a_row += 1
                # An overflow in the gradients is recorded by unscale_ and backs the scale off;
                # one in the loss alone is not, so the back-off is asked for.
                scaler.update(None if not bool(torch.isfinite(norm))
                              else scale * scaler.get_backoff_factor())
                _advance_schedule_only(update)
            elif update.skip_nonfinite:
                scaler.update()
                self.skipped += 1
                _advance_schedule_only(update)
            else:
                hint = self.nonfinite_hint()
                raise ElectraError(
                    f"non-finite loss or gradient at step {self.step + 1} under fp16 (loss "
                    f"{float(loss):.4g}, loss scale {scale:g}, {self.overflows_in_a_row + 1} "
                    f"overflow(s) in a row): values that stay non-finite however far the loss "
                    f"scale backs off are divergence, not an fp16 overflow; the update was not "
                    f"applied and nothing was saved from it{'; ' + hint if hint else ''}; "
                    f"or train with --precision bf16 or fp32")
        update.optimizer.zero_grad(set_to_none=True)
        return finite

    def _skips_on_device(self, update: Update) -> bool:
        return (update.after is None and update.scaler is None
                and not (self.dist is not None and self.dist.enabled)
                and any(g.get("fused") for g in update.optimizer.param_groups))

    def count_update(self, finite: torch.Tensor) -> torch.Tensor:
        """Account for an update applied on the device only where `finite` (a 0-dim bool
        tensor) holds, without reading it: `settle` does, at the next log line or checkpoint.
        Returns `finite`."""
        self._unsettled = self._unsettled + (~finite).int()
        self._unsettled_since = min(self._unsettled_since, self.step + 1)
        self._stop = self._signals.requested
        return finite

    def settle(self) -> None:
        """Read the non-finite steps counted on the device since the last call (one sync):
        with `skip_nonfinite` they count as skipped, otherwise the run stops with the error
        (none of those updates was applied, so nothing saved afterwards holds them)."""
        bad = int(self._unsettled) if isinstance(self._unsettled, torch.Tensor) else 0
        first, self._unsettled, self._unsettled_since = self._unsettled_since, 0, _NONE_YET
        if not bad:
            return
        if self.skip_nonfinite:
            self.skipped += bad
            return
        hint = self.nonfinite_hint()
        raise ElectraError(
            f"non-finite loss or gradient in {bad} of steps {first}-{self.step}; those updates "
            f"were not applied and nothing was saved from them{'; ' + hint if hint else ''}")

    def _flags(self, norm: torch.Tensor, loss: torch.Tensor) -> tuple[bool, bool]:
        """(finite, stop requested): under torchrun one MAX all-reduce of two ints makes every
        rank take the same decision at the same step."""
        bad = ~(torch.isfinite(norm) & torch.isfinite(loss))
        stop = self._signals.requested
        if self.dist is None or not self.dist.enabled:
            return not bool(bad), stop
        flags = torch.stack([bad.to(torch.int32),
                             torch.tensor(int(stop), dtype=torch.int32, device=bad.device)])
        bad_any, stop_any = all_reduce_max(flags, self.dist).tolist()
        return not bad_any, bool(stop_any)

    def end_step(self, postfix: dict[str, Any] | None = None) -> int:
        """Count the step done; returns the number of steps done. `postfix`: what the bar
        shows beside it (values the loop holds on the host anyway)."""
        self.step += 1
        self._progress.advance(postfix)
        return self.step

    def set_total(self, total: int) -> None:
        """A new number of steps (a time budget's plan)."""
        self.total = total
        self._progress.set_total(total)

    def due(self, every: int) -> bool:
        """Every `every` steps, and at the last step."""
        return bool(every) and (self.step % every == 0 or self.step == self.total)

    def report(self, values: dict[str, Any]) -> None:
        """At a log point, the numbers just logged (host values: nothing is read from the
        device here): the bar's postfix on a terminal, one flushed line where there is none
        (step and total, `values`, steps/s, elapsed time, ETA)."""
        self._progress.report(values)

    def preempt(self, what: str = "") -> NoReturn:
        """Stop for a signal: `what` says what was saved and how to continue."""
        self._progress.close()
        raise Preempted(f"stopped by {self._signals.name or 'a stop signal'} after step "
                        f"{self.step} of {self.total}{what}")


def _advance_schedule_only(update: Update) -> None:
    """A skipped update: the schedule advances as if it had been applied."""
    with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()"
        warnings.simplefilter("ignore")
        update.scheduler.step()


class LogWindow:
    """Sums named values (tensors or floats) between two log lines without syncing the device
    every step. A step's micro-batches are held until `end_step` says whether the step counts (a
    skipped non-finite step does not)."""

    def __init__(self) -> None:
        self.pending: list[dict[str, torch.Tensor | float]] = []
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.count = 0  # micro-batches kept since the last flush
        self.t0 = time.perf_counter()

    def add(self, values: dict[str, torch.Tensor | float]) -> None:
        self.pending.append(values)

    def end_step(self, keep: bool | torch.Tensor = True) -> None:
        """`keep`: whether the step counts; a 0-dim bool tensor (an update skipped on the
        device or not) is applied without reading it."""
        if isinstance(keep, torch.Tensor):
            for values in self.pending:
                for k, v in values.items():
                    v = torch.where(keep, v, 0.0)
                    self.sums[k] = self.sums[k] + v if k in self.sums else v
                self.count = self.count + keep.int()
        else:
            for values in self.pending if keep else ():
                for k, v in values.items():  # in micro-batch order
                    self.sums[k] = self.sums[k] + v if k in self.sums else v
                self.count += 1
        self.pending.clear()

    def flush(self, dist: DistInfo | None = None) -> tuple[dict[str, float], int, float]:
        """(totals over all ranks, micro-batches summed over all ranks, seconds since the last
        flush), and start a new window. Tensor sums are all-reduced in one call."""
        totals: dict[str, float] = {}
        keys = sorted(k for k, v in self.sums.items() if isinstance(v, torch.Tensor))
        if keys:
            device = dist.device if dist is not None else self.sums[keys[0]].device
            stacked = torch.stack([self.sums[k].to(device) for k in keys])
            if dist is not None:
                stacked = all_reduce_sum(stacked, dist)
            totals.update(zip(keys, stacked.tolist(), strict=True))
        totals.update({k: float(v) for k, v in self.sums.items() if k not in totals})
        count = int(self.count) * (dist.world_size if dist is not None else 1)
        elapsed = time.perf_counter() - self.t0
        self.reset()
        return totals, count, elapsed

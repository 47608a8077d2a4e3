"""Pre-training on a budget: `--budget DURATION` (wall-clock) and `--budget-flops X`.

A FLOPs budget is exact before the first step: the steps it buys at the run's own FLOPs per
step (`objective_step_flops`, what `electra flops` counts), rounded down.

A time budget is planned, not guessed. The run times its first steps (after the first, which
pays for compilation and warm caches), then fixes the number of steps that fits the time
left, keeping back what the rest of the run needs besides steps: the held-out probes still due,
the checkpoints and the final export, each timed as it happens (estimated until then). The
learning-rate schedule (`electra.runtime.optim.Schedule`) is then ELECTRA's warm-up and
linear decay over exactly those steps, and the run ends at the last one. The plan is checked
at CHECK_FRACTIONS of the run and whenever a run resumes; where it would overrun (a slower
machine, a busier one) or finish well early, the remaining steps are re-planned and the
schedule bends continuously to end at the new last step.

Why a fixed step count rather than a schedule over elapsed time (as cramming does): the steps
of a run, its checkpoints, probes and FLOPs stay step-indexed, so the plan is recorded
(run.json, the checkpoints) and a run can be repeated exactly with `--steps` and
`--warmup-steps`; a schedule driven by the clock would give each run's learning rates from
its own timing noise.

Time spent counts across interruptions: each checkpoint records the budget spent until then,
and `OUT/budget.json`, rewritten at every log line, the budget spent until the last line, so
that a run killed without warning (kill -9) and resumed also counts the steps it redoes.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.fileutil import write_atomic

BUDGET_FILE = "budget.json"
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
# The steps timed before the plan is made (after the first), and the least time they span.
CALIBRATION_STEPS = 5
CALIBRATION_SECONDS = 3.0
# Checks of the plan: at these fractions of the run. A plan is changed where it would overrun
# the budget, or end earlier than this share of it.
CHECK_FRACTIONS = (0.25, 0.5, 0.75, 0.9)
EARLY_SHARE = 0.05
# A warm-up longer than this share of the steps a budget buys is shortened to it.
MAX_WARMUP_SHARE = 0.1
# Before a checkpoint or an export has been timed, what one is assumed to take: a fixed cost
# and its bytes (weights, and for a checkpoint Adam's two moments) at this rate.
FIRST_GUESS_FIXED_SECONDS = 0.2
FIRST_GUESS_BYTES_PER_SECOND = 100e6


def parse_duration(text: str) -> float:
    """Seconds in `90s`, `45m`, `2h`, `1h30m`, `1.5h` or a plain number of seconds."""
    raw = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        seconds = float(raw)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([a-z]+)", raw)
        if not parts or "".join(n + u for n, u in parts) != raw or any(
                u not in _UNITS for _, u in parts):
            raise ElectraError(f"--budget {text!r}: expected a duration such as 90s, 45m, 2h or "
                               "1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ElectraError(f"--budget {text!r}: must be more than 0 seconds")
    return seconds


def parse_flops(text: str) -> float:
    """FLOPs in `1e15`, `2.5e17` or `1200000`."""
    try:
        flops = float(text)
    except ValueError:
        raise ElectraError(f"--budget-flops {text!r}: expected a number such as 1e15") from None
    if not math.isfinite(flops) or flops <= 0:
        raise ElectraError(f"--budget-flops {text!r}: must be a positive number")
    return flops


def steps_for_flops(budget_flops: float, step_flops: int) -> int:
    """The steps `budget_flops` buys at `step_flops` each (at least 1)."""
    steps = int(budget_flops // step_flops)
    if steps < 1:
        raise ElectraError(f"--budget-flops {budget_flops:.4g} buys no step: one step of this run "
                           f"costs {step_flops:.4g} FLOPs")
    return steps


def capped_warmup(warmup_steps: int, steps: int) -> int:
    """The warm-up of a budgeted run: the configured one, at most a tenth of its steps."""
    return min(warmup_steps, max(1, int(steps * MAX_WARMUP_SHARE)))


def at_fractions(step: int, total: int, parts: int) -> bool:
    """Whether `step` (1-based) is the first step at or past one of k/`parts` of `total`
    (k = 1..parts): `parts` evenly spaced points of any run, the last step included."""
    if total <= 0 or parts <= 0:
        return False
    return step * parts // total > (step - 1) * parts // total or step == total


@dataclass
class TimeBudget:
    """The clock of a run on a time budget: what is spent (this process's time since
    `started`, plus what earlier processes spent), what each phase took, and the plan."""

    seconds: float
    spent_before: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    phases: dict[str, float] = field(default_factory=dict)
    timed: dict[str, list[float]] = field(default_factory=dict)  # this process's, per phase
    plans: list[dict[str, Any]] = field(default_factory=list)
    step_seconds: float | None = None
    recheck: bool = False  # check the plan once its steps are timed (a resumed run)
    calibrated: bool = False  # the step time is known (on every process)
    # (step, time, overhead) where the step timing began: steps are timed without the probes,
    # checkpoints and export between them, which the plan counts apart.
    _timing: tuple[int, float, float] | None = None
    _last_check: tuple[int, float, float] | None = None
    _checked: set[float] = field(default_factory=set)
    model_bytes: int = 0  # the weights' size, for the first guesses

    @classmethod
    def resumed(cls, seconds: float, out: Path, checkpoint_meta: dict | None) -> TimeBudget:
        """A run's budget, counting what earlier processes spent: the checkpoint's record, or
        OUT/budget.json's if later (a run killed after its last checkpoint redoes steps)."""
        saved = (checkpoint_meta or {}).get("budget", {})
        spent = float(saved.get("spent_seconds", 0.0))
        phases = {k: float(v) for k, v in saved.get("phases", {}).items()}
        path = out / BUDGET_FILE
        try:
            beat = float(json.loads(path.read_text())["spent_seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            beat = 0.0  # none, or cut short: the checkpoint's record stands
        if beat > spent:  # steps after the checkpoint, done again now
            phases["lost_after_checkpoint"] = phases.get("lost_after_checkpoint", 0.0) + (
                beat - spent)
            spent = beat
        plans = list(saved.get("plans", []))
        return cls(seconds, spent_before=spent, phases=phases, recheck=True, plans=plans,
                   step_seconds=plans[-1]["step_seconds"] if plans else None)

    def spent(self) -> float:
        return self.spent_before + time.perf_counter() - self.started

    def left(self) -> float:
        return self.seconds - self.spent()

    @contextmanager
    def phase(self, name: str):
        """Time a phase (set_up, train, probe, checkpoint, export, ...)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.phases[name] = self.phases.get(name, 0.0) + seconds
            self.timed.setdefault(name, []).append(seconds)

    def mean(self, name: str) -> float:
        """A phase's mean duration so far in this process, or its first guess."""
        if self.timed.get(name):
            return sum(self.timed[name]) / len(self.timed[name])
        copies = {"checkpoint": 3, "export": 1}.get(name, 0)
        return FIRST_GUESS_FIXED_SECONDS + copies * self.model_bytes / FIRST_GUESS_BYTES_PER_SECOND

    def overhead(self) -> float:
        """Seconds spent in this process on what is not a step (probes, checkpoints)."""
        return sum(sum(self.timed.get(name, ())) for name in ("probe", "checkpoint", "export"))

    def calibrating(self, step: int) -> bool:
        """Call after each step: whether the step time is still unknown. The first step of a
        process (compilation, first-touch) is not timed. A resumed run starts from the step
        time of its last plan (and checks it at once); a run whose budget is nearly spent
        stops timing early rather than overrun while it times."""
        now = time.perf_counter()
        if self._timing is None:
            self._timing = self._last_check = (step, now, self.overhead())
            return self.step_seconds is None
        if self.step_seconds is not None:
            return False
        first, t0, _ = self._timing
        timed = now - t0
        if step - first >= CALIBRATION_STEPS and timed >= CALIBRATION_SECONDS or (
                step > first and timed >= 0.1 * self.left()):
            self.observe(step)
            return False
        return True

    def _seconds_per_step(self, since: tuple[int, float, float], step: int) -> float | None:
        first, t0, overhead = since
        if step <= first:
            return None
        return (time.perf_counter() - t0 - (self.overhead() - overhead)) / (step - first)

    def observe(self, step: int) -> None:
        """The step time: the larger of the mean since the timing began and the mean since
        the last check, so that a machine that became slower is not averaged away."""
        overall = self._seconds_per_step(self._timing, step)
        recent = self._seconds_per_step(self._last_check, step)
        times = [t for t in (overall, recent, None if overall or recent else self.step_seconds)
                 if t is not None]
        if times:
            self.step_seconds = max(times)
        self._last_check = (step, time.perf_counter(), self.overhead())

    def margin(self) -> float:
        """Slack kept against the step time's noise: 1% of the budget (at least a second)
        and two steps."""
        return max(1.0, 0.01 * self.seconds) + 2 * (self.step_seconds or 0.0)

    def affordable_steps(self, step: int, rest: Callable[[int], float]) -> int:
        """The last step this run can reach from `step`, keeping `rest(total)` seconds for
        what a run ending at `total` does besides its steps (probes, checkpoints, export).
        `rest` grows with the total (probes every N steps), so the answer is refined from the
        steps the time alone would buy."""
        assert self.step_seconds is not None
        total = step + max(0, int(self.left() / self.step_seconds))
        for _ in range(4):
            total = step + max(0, int((self.left() - rest(total)) / self.step_seconds))
        return total

    def due_check(self, step: int, total: int) -> str | None:
        """Why the plan is checked at `step` ("resumed", or the point of the run reached), or
        None: once after a resume, then at each of CHECK_FRACTIONS of the run."""
        if self.recheck:
            self.recheck = False
            self._checked.update(f for f in CHECK_FRACTIONS if step >= f * total)
            return "resumed"
        for fraction in CHECK_FRACTIONS:
            if fraction not in self._checked and step >= fraction * total:
                self._checked.add(fraction)
                return f"check at {fraction:.0%} of the run"
        return None

    def needs_new_plan(self, step: int, total: int, rest: float) -> bool:
        """The current plan would overrun, or would end more than EARLY_SHARE of the budget
        early."""
        if self.step_seconds is None:
            return False
        finish = self.spent() + (total - step) * self.step_seconds + rest
        return finish > self.seconds or self.seconds - finish > EARLY_SHARE * self.seconds

    def record_plan(self, step: int, total: int, warmup: int, why: str) -> None:
        """Note a plan; the checks of points it has passed are done."""
        self._checked.update(f for f in CHECK_FRACTIONS if step >= f * total)
        self.plans.append({"at_step": step, "steps": total, "warmup_steps": warmup,
                           "step_seconds": round(self.step_seconds or 0.0, 5),
                           "spent_seconds": round(self.spent(), 2), "why": why})

    def state(self) -> dict[str, Any]:
        """What a checkpoint or OUT/budget.json records."""
        return {"seconds": self.seconds, "spent_seconds": round(self.spent(), 3),
                "phases": {k: round(v, 3) for k, v in self.phases.items()},
                "plans": self.plans}

    def write_heartbeat(self, out: Path) -> None:
        write_atomic(out / BUDGET_FILE, json.dumps(self.state()) + "\n")

    def report(self) -> dict[str, Any]:
        return {**self.state(), "left_seconds": round(self.left(), 3)}

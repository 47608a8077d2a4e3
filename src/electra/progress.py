"""How a long command shows its progress: a bar on a terminal, plain lines where there is none.

Where stderr is not a terminal (an `sbatch` job's slurm-*.out, `nohup`, a CI log) a progress
bar is noise, and without it nothing would reach the log between a command's set-up notes and
its end. `Progress.LINES` writes one plain line per interval instead: a training loop's at
its log cadence (`log_every`, where the loop already holds the numbers, so no extra device
read), corpus preparation's every `LINE_INTERVAL_S` seconds and once at the end. Each line is
flushed at once, so `tail -f` sees it.

`electra.cli_support.show_progress` chooses the mode for a command; library functions take
`show_progress` as a `Progress`, its name ("bar", "lines", "off") or a bool (True: the bar,
False: nothing), read by `progress_mode`. Torch-free: the data commands use it too.
"""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any, TextIO

LINE_INTERVAL_S = 30.0  # between two lines of a command without steps (prepare, vocab)


class Progress(str, enum.Enum):
    """BAR: tqdm's bar (a terminal). LINES: one plain line per interval (a log file or pipe).
    OFF: nothing (`--quiet`; a torchrun process other than the main one)."""

    BAR = "bar"
    LINES = "lines"
    OFF = "off"


def progress_mode(value: bool | str | Progress | None) -> Progress:
    """A `show_progress` argument as a `Progress`: True is the bar and False (or None)
    nothing; a `Progress` or its name as it is."""
    if isinstance(value, Progress):
        return value
    if value is None or isinstance(value, bool):
        return Progress.BAR if value else Progress.OFF
    try:
        return Progress(value)
    except ValueError:
        raise ValueError(f"show_progress must be a bool or one of "
                         f"{', '.join(p.value for p in Progress)}, got {value!r}") from None


def format_duration(seconds: float) -> str:
    """45s, 1m27s, 2h05m: a log line's elapsed time and ETA."""
    whole = max(0, int(round(seconds)))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _value(value: Any) -> str:
    """A metric as the line shows it: strings as given, floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _rate(steps_per_s: float, unit: str = "step") -> str:
    """2.31 steps/s; below one step a second, as tqdm does, 4.20 s/step."""
    return (f"{steps_per_s:.2f} {unit}s/s" if steps_per_s >= 1
            else f"{1 / steps_per_s:.2f} s/{unit}")


def step_line(desc: str, step: int, total: int, values: Mapping[str, Any],
              steps_per_s: float | None, elapsed_s: float, unit: str = "step") -> str:
    """`pretrain step 200/1000 (20%) | loss 3.412 | disc_acc 0.871 | 2.31 steps/s | elapsed
    1m27s | eta 5m46s`: the ETA is the steps left at `steps_per_s` (None when unknown).
    `unit` names what is counted (`score (mlm) text 120/400 ...`)."""
    parts = [f"{desc} {unit} {step}/{total} ({100 * step // max(total, 1)}%)"]
    parts += [f"{key} {_value(value)}" for key, value in values.items()]
    known = steps_per_s is not None and steps_per_s > 0
    parts.append(_rate(steps_per_s, unit) if known else f"? {unit}s/s")
    parts.append(f"elapsed {format_duration(elapsed_s)}")
    parts.append(f"eta {format_duration((total - step) / steps_per_s)}" if known else "eta ?")
    return " | ".join(parts)


def count_line(desc: str, documents: int, tokens: int | None, elapsed_s: float,
               done: bool = False) -> str:
    """`preparing: 12,288 docs | 3,145,728 tokens | 812 docs/s | 207,884 tokens/s | elapsed
    15s` (`preparing: done, ...` at the end); tokens where the command counts them."""
    rate = 1.0 / elapsed_s if elapsed_s > 0 else 0.0
    parts = [f"{desc}: {'done, ' if done else ''}{documents:,} docs"]
    if tokens is not None:
        parts.append(f"{tokens:,} tokens")
    parts.append(f"{documents * rate:,.0f} docs/s")
    if tokens is not None:
        parts.append(f"{tokens * rate:,.0f} tokens/s")
    parts.append(f"elapsed {format_duration(elapsed_s)}")
    return " | ".join(parts)


def _write(stream: IO[str] | None, line: str) -> None:
    print(line, file=stream if stream is not None else sys.stderr, flush=True)


class StepProgress:
    """A training loop's progress over `total` steps from `start` (`electra.runtime.skeleton.
    StepLoop` holds one): `advance` after each step, `report` at each log point with the
    numbers the loop logs. The bar shows them as its postfix; a line carries them with the step,
    steps/s since the previous line, the time since the loop began and the ETA at that rate."""

    def __init__(self, mode: bool | str | Progress, total: int, start: int = 0,
                 desc: str = "train", stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter, unit: str = "step",
                 line_every_s: float | None = None) -> None:
        """`line_every_s`: for work without a log cadence (scoring), a line that often, and
        one at `close`."""
        self.mode = progress_mode(mode)
        self.total = total
        self.step = start
        self.desc = desc
        self.unit = unit
        self.line_every_s = line_every_s
        self._stream = stream
        self._clock = clock
        self._started = clock()
        self._last = (start, self._started)  # (step, time) of the previous line
        self._bar = None
        if self.mode is Progress.BAR:
            from tqdm import tqdm  # imported here: the CLI's parser imports this module

            self._bar = tqdm(total=total, initial=start, desc=desc, unit=unit, file=stream,
                             dynamic_ncols=True)

    def advance(self, postfix: Mapping[str, Any] | None = None, n: int = 1) -> None:
        """`n` steps done; `postfix`: what the bar shows beside it from now on."""
        self.step += n
        if self._bar is not None:
            if postfix is not None:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(n)
        elif (self.mode is Progress.LINES and self.line_every_s is not None
              and self._clock() - self._last[1] >= self.line_every_s):
            self.report({})

    def set_total(self, total: int) -> None:
        self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def report(self, values: Mapping[str, Any]) -> None:
        """The loop's numbers at a log point: the bar's postfix, or one flushed line."""
        if self._bar is not None:
            self._bar.set_postfix(values)
        elif self.mode is Progress.LINES:
            now = self._clock()
            last_step, last_time = self._last
            rate = (self.step - last_step) / (now - last_time) if now > last_time else None
            self._last = (self.step, now)
            _write(self._stream, step_line(self.desc, self.step, self.total, values, rate,
                                           now - self._started, self.unit))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif (self.mode is Progress.LINES and self.line_every_s is not None
              and self.step != self._last[0]):
            self.report({})  # where it ended, unless the last line said so

    def __enter__(self) -> StepProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CountProgress:
    """Documents (and tokens) done by a command without steps (`prepare`, `vocab`): the bar
    counts documents; lines come every `interval_s` seconds and once at the end (`close`
    without an error). A context manager."""

    def __init__(self, mode: bool | str | Progress, desc: str, interval_s: float = LINE_INTERVAL_S,
                 stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.mode = progress_mode(mode)
        self.desc = desc
        self.documents = 0
        self.tokens: int | None = None
        self.interval_s = interval_s
        self._stream = stream
        self._clock = clock
        self._started = self._last = clock()
        self._bar = None
        if self.mode is Progress.BAR:
            from tqdm import tqdm

            self._bar = tqdm(desc=desc, unit=" docs", file=stream)

    def update(self, documents: int, tokens: int | None = None) -> None:
        """`documents` more done (and `tokens` more, where counted)."""
        self.documents += documents
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens
        if self._bar is not None:
            self._bar.update(documents)
        elif self.mode is Progress.LINES:
            now = self._clock()
            if now - self._last >= self.interval_s:
                self._last = now
                _write(self._stream, count_line(self.desc, self.documents, self.tokens,
                                                now - self._started))

    def close(self, failed: bool = False) -> None:
        """The final line (none after an error: the error is the last word)."""
        if self._bar is not None:
            self._bar.close()
        elif self.mode is Progress.LINES and not failed:
            _write(self._stream, count_line(self.desc, self.documents, self.tokens,
                                            self._clock() - self._started, done=True))

    def __enter__(self) -> CountProgress:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)

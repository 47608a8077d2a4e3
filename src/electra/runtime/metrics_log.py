"""One logger for every training loop: a JSON line per record in OUT/metrics.jsonl (always;
`electra plot` and the tests read it) and, when asked, the same numbers in the sinks of
`--report-to` (`electra.runtime.sinks`: TensorBoard, Weights & Biases, MLflow; optional
dependencies, the `plot` and `tracking` extras).

A record is a flat dict with an int "step"; every other numeric key becomes a scalar of that
name against the step (TensorBoard has no FLOPs axis, so `flops` is a scalar of its own).
Records may carry different keys (a held-out evaluation every N steps, dev scores at the end).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.fileutil import space_advice, write_atomic, write_failure
from electra.runtime.sinks import Sink, SinkContext, TensorBoardSink, open_sinks, require_sinks

METRICS = "metrics.jsonl"


def require_tensorboard() -> None:
    """Fail before a run starts (and writes anything) rather than at its first log line."""
    require_sinks(["tensorboard"])


def truncate_metrics(path: Path, step: int) -> None:
    """After a resume, drop log lines written after the checkpoint we resume from, and a last
    line that a failed write (a full disk) left torn."""
    if not path.exists():
        return
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            records.append((line, json.loads(line)["step"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            if i < len(lines) - 1:  # only the last line can be torn; anything else is damage
                raise ElectraError(f"{path}:{i + 1}: not a metrics record") from None
    write_atomic(path, "".join(line + "\n" for line, at in records if at <= step))


def _failed_append(reason: str, what: str) -> str:
    return f"{what}: {reason}; {space_advice(reason)} and run the same command again"


HELDOUT_PREFIX = "heldout_"


def is_heldout(record: dict[str, Any]) -> bool:
    """Held-out probe records (electra.pretraining.heldout) share metrics.jsonl with the training
    records; they carry `heldout_*` keys and no training loss."""
    return any(k.startswith(HELDOUT_PREFIX) for k in record)


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The plottable part of a record: finite numbers (not bools), `step` excluded."""
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)}


class MetricsLogger:
    """Appends records to `out_dir/metrics.jsonl` and sends them to the sinks of `report_to`
    (`electra.runtime.sinks`: tensorboard, wandb, mlflow; `tensorboard=True` adds TensorBoard,
    under `tensorboard_dir`, default `out_dir/tensorboard`). Trackers show the run as
    `run_name` (default: the folder's name).

    `resume_step`: lines with a larger step are dropped from the JSON log and hidden from
    TensorBoard (its purge step), so a resumed run's curves have no doubled or stale points.
    `active=False` (DDP ranks other than 0) makes every method a no-op, so callers need no
    rank checks. A line that cannot be appended (a full disk) is one ElectraError,
    `write_failed(reason, what)`, which the loop words with how to continue.
    """

    def __init__(self, out_dir: str | Path, resume_step: int = 0, tensorboard: bool = False,
                 active: bool = True, tensorboard_dir: str | Path | None = None,
                 report_to: Sequence[str] = (), run_name: str | None = None,
                 write_failed: Callable[[str, str], str] = _failed_append) -> None:
        self.path = Path(out_dir) / METRICS
        self.write_failed = write_failed
        self.active = active
        self.sinks: list[Sink] = []
        self._last_step = resume_step
        if not active:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        truncate_metrics(self.path, resume_step)
        names = tuple(dict.fromkeys([*report_to, *(["tensorboard"] if tensorboard else [])]))
        self.sinks = open_sinks(names, SinkContext(
            self.path.parent, run_name or self.path.parent.name, resume_step,
            Path(tensorboard_dir) if tensorboard_dir else None))

    @property
    def tensorboard_dir(self) -> Path | None:
        return next((s.log_dir for s in self.sinks if isinstance(s, TensorBoardSink)), None)

    def hyperparameters(self, params: Mapping[str, Any]) -> None:
        """The run's resolved settings, for the sinks (metrics.jsonl has them in OUT's
        settings files)."""
        for sink in self.sinks:
            sink.hyperparameters(params)

    def log(self, record: dict[str, Any]) -> None:
        """Append one record (it must have an int "step"). Flushed at once: a crash loses
        nothing, and TensorBoard shows a live run."""
        if not self.active:
            return
        if not isinstance(record.get("step"), int):
            raise ValueError(f"a metrics record needs an int 'step', got {record.get('step')!r}")
        try:
            self._append(json.dumps(record) + "\n")
        except OSError as error:
            reason = write_failure(error) or str(error)
            raise ElectraError(self.write_failed(
                reason, f"{self.path}: appending step {record['step']}")) from None
        self._last_step = record["step"]
        values = scalars(record)
        for sink in self.sinks:
            sink.log(record["step"], values)

    def _append(self, line: str) -> None:
        with self.path.open("a") as f:
            f.write(line)
            f.flush()

    def log_at(self, step: int, values: dict[str, Any]) -> None:
        """An extra record at `step` (e.g. held-out evaluation), its own line in the log."""
        self.log({"step": step, **values})

    def finish(self, results: Mapping[str, Any] | None = None) -> None:
        """The run's final results (their numbers) to the sinks, which then close."""
        final = scalars(dict(results or {}))
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.finish(self._last_step, final)

    def close(self) -> None:
        self.finish()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

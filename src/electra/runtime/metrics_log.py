"""One logger for every training loop: a JSON line per record in OUT/metrics.jsonl (always;
`electra plot` and the tests read it) and, when asked, the same numbers as TensorBoard scalars
under OUT/tensorboard/ (an optional dependency: the `plot` extra).

A record is a flat dict with an int "step"; every other numeric key becomes a scalar of that
name against the step (TensorBoard has no FLOPs axis, so `flops` is a scalar of its own).
Records may carry different keys (a held-out evaluation every N steps, dev scores at the end).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from electra.errors import ElectraError, install_hint
from electra.fileutil import write_atomic

METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
INSTALL_HINT = f"{install_hint('plot')} (or pip install tensorboard)"


def require_tensorboard() -> None:
    """Fail before a run starts (and writes anything) rather than at its first log line."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise ElectraError(f"--tensorboard needs the tensorboard package: {INSTALL_HINT}"
                           ) from None


def truncate_metrics(path: Path, step: int) -> None:
    """After a resume, drop log lines written after the checkpoint we resume from."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= step]
    write_atomic(path, "".join(line + "\n" for line in kept))


HELDOUT_PREFIX = "heldout_"


def is_heldout(record: dict[str, Any]) -> bool:
    """Held-out probe records (electra.pretrain.heldout) share metrics.jsonl with the training
    records; they carry `heldout_*` keys and no training loss."""
    return any(k.startswith(HELDOUT_PREFIX) for k in record)


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The plottable part of a record: finite numbers (not bools), `step` excluded."""
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)}


class MetricsLogger:
    """Appends records to `out_dir/metrics.jsonl` and, with `tensorboard=True`, writes them as
    scalars to `tensorboard_dir` (default `out_dir/tensorboard`).

    `resume_step`: lines with a larger step are dropped from the JSON log and hidden from
    TensorBoard (its purge step), so a resumed run's curves have no doubled or stale points.
    `active=False` (DDP ranks other than 0) makes every method a no-op, so callers need no
    rank checks.
    """

    def __init__(self, out_dir: str | Path, resume_step: int = 0, tensorboard: bool = False,
                 active: bool = True, tensorboard_dir: str | Path | None = None) -> None:
        self.path = Path(out_dir) / METRICS
        self.active = active
        self._writer = None
        if not active:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        truncate_metrics(self.path, resume_step)
        if tensorboard:
            require_tensorboard()
            from torch.utils.tensorboard import SummaryWriter

            log_dir = Path(tensorboard_dir) if tensorboard_dir else self.path.parent / TENSORBOARD
            self._writer = SummaryWriter(str(log_dir), purge_step=resume_step + 1)

    @property
    def tensorboard_dir(self) -> Path | None:
        return Path(self._writer.log_dir) if self._writer is not None else None

    def log(self, record: dict[str, Any]) -> None:
        """Append one record (it must have an int "step"). Flushed at once: a crash loses
        nothing, and TensorBoard shows a live run."""
        if not self.active:
            return
        if not isinstance(record.get("step"), int):
            raise ValueError(f"a metrics record needs an int 'step', got {record.get('step')!r}")
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in scalars(record).items():
                self._writer.add_scalar(key, value, record["step"])
            self._writer.flush()

    def log_at(self, step: int, values: dict[str, Any]) -> None:
        """An extra record at `step` (e.g. held-out evaluation), its own line in the log."""
        self.log({"step": step, **values})

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

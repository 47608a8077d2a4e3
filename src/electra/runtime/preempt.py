"""SIGTERM and SIGUSR1 during training: remembered by a handler, acted on by the loop at the
next step boundary (finish the step, checkpoint, exit with EXIT_PREEMPTED).

Cluster schedulers (SLURM, Kubernetes, spot instances) send SIGTERM, or SIGUSR1 with
`--signal`, some time before they kill a job. The handlers are installed only while training
runs and the previous ones are restored afterwards, so library callers keep theirs.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None),
                                 getattr(signal, "SIGUSR1", None)) if s is not None)


class StopSignals:
    """Context manager: while active, a stop signal sets `received` instead of killing the
    process. Outside the main thread (where Python cannot install handlers) it does nothing."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.received is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            # None: a handler installed from C; the default action is the closest we can do.
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

"""A process pool that works wherever the library is called from: an unguarded script, a script
on stdin, a notebook, `python -c`.

Workers are spawned, never forked (a fork after the `tokenizers` thread pool or torch's threads
have run can deadlock). A spawned worker normally imports the caller's `__main__` first, so a
script without an `if __name__ == "__main__":` guard would run again in every worker, calling
the library again (and, say, `train_vocab` refusing its own output). Our workers need nothing
from `__main__`: their functions live in electra's modules. So while the pool starts workers,
`__main__` is a bare stand-in with no file and no module name, which spawn skips; the caller's
module is put back when the pool closes.

A worker that dies is reported with how it died (its exit code or signal), not a guess.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from electra.errors import ElectraError


@contextmanager
def _main_hidden_from_spawn() -> Iterator[None]:
    """`sys.modules["__main__"]` replaced by an empty module while the block runs."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def exit_reason(exitcode: int | None) -> str:
    """How a process ended, in words: a signal by name (SIGKILL is what the kernel's
    out-of-memory killer sends), or its exit code."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (the kernel's out-of-memory killer sends it)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {exitcode}"


class SpawnedPool:
    """`ProcessPoolExecutor` over spawned workers that never import the caller's `__main__`;
    use as a context manager. `broken(what)` turns a dead worker into one ElectraError."""

    def __init__(self, workers: int, initializer: Callable[..., None], initargs: tuple = ()):
        self._hidden = _main_hidden_from_spawn()
        self._hidden.__enter__()
        try:
            self.executor = ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"),
                                                initializer, initargs)
        except BaseException:
            self._hidden.__exit__(*sys.exc_info())
            raise
        self._processes: dict[int, Any] = {}

    def submit(self, fn: Callable[..., Any], *args: Any):
        future = self.executor.submit(fn, *args)
        # the workers started so far, for the report if one dies (the executor starts them as
        # work arrives and forgets them once broken)
        self._processes.update(getattr(self.executor, "_processes", None) or {})
        return future

    def broken(self, what: str, advice: str = "") -> ElectraError:
        """The error for a dead worker: which one, how it ended, and `advice`. The executor's
        own thread reaps a dead worker too; where it wins that race our join returns at once
        without the exit code, which its thread then records: so wait for it (up to 10 s)."""
        self._processes.update(getattr(self.executor, "_processes", None) or {})
        deadline = time.monotonic() + 10
        for process in self._processes.values():
            process.join(timeout=10)
            while process.exitcode is None and time.monotonic() < deadline:
                time.sleep(0.05)
        ends = sorted({exit_reason(p.exitcode) for p in self._processes.values()
                       if p.exitcode not in (0, None)})
        how = "; ".join(ends) if ends else "it ended without an exit code"
        return ElectraError(f"a {what} worker process died ({how}); its error, if it raised "
                            f"one, is printed above{'; ' + advice if advice else ''}")

    def __enter__(self) -> SpawnedPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.executor.shutdown(wait=True, cancel_futures=True)
        finally:
            self._hidden.__exit__(None, None, None)


__all__ = ["BrokenProcessPool", "SpawnedPool", "exit_reason"]

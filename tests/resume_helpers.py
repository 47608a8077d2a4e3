"""Interrupting a pre-training run right after a checkpoint, the way a kill would, and
resuming it: shared by the tests that compare a resumed run with an uninterrupted one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from electra.pretraining import loop as loop_mod


def interrupted_and_resumed(run: Callable[..., Path], out: Path,
                            monkeypatch: pytest.MonkeyPatch, stop_after: int | None = 2) -> Path:
    """`run(out)` stopped (KeyboardInterrupt) once the checkpoint of step `stop_after` (None:
    its first) is written, then `run(out, resume=True)`; returns what the resumed call
    returns."""
    real_save = loop_mod._save_checkpoint

    def save_then_stop(out, objective, update, step, *rest):
        real_save(out, objective, update, step, *rest)
        if stop_after is None or step == stop_after:
            raise KeyboardInterrupt

    monkeypatch.setattr(loop_mod, "_save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run(out)
    monkeypatch.setattr(loop_mod, "_save_checkpoint", real_save)
    return run(out, resume=True)

"""The staged-directory write every output directory goes through (electra.fileutil): on
success an ordinary 0o755 directory replaces the old one at once; on any failure the old one
is untouched and nothing is left beside it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from electra.fileutil import staged_dir


def _old_target(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old\n")
    return out


def test_staged_dir_installs_on_success(tmp_path: Path) -> None:
    out = _old_target(tmp_path)
    with staged_dir(out) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(f".out.tmp-{os.getpid()}-")
        (tmp / "new.txt").write_text("new\n")
        assert (out / "old.txt").is_file()  # nothing visible until the block ends
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_installed_files_are_readable_by_others(tmp_path: Path) -> None:
    """safetensors writes its file private (0600); a model directory is an ordinary output that
    a server running as another user must be able to read."""
    out = tmp_path / "model"
    with staged_dir(out) as tmp:
        (tmp / "sub").mkdir()
        for name in ("private.bin", "sub/nested.bin"):
            (tmp / name).write_bytes(b"x")
            os.chmod(tmp / name, 0o600)
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*.bin")} == {0o644}


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_failure_inside_the_block_leaves_the_old_target_and_no_temp_dir(
        tmp_path: Path, error: type[BaseException]) -> None:
    out = _old_target(tmp_path)
    with pytest.raises(error), staged_dir(out) as tmp:
        (tmp / "new.txt").write_text("half")
        raise error
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    assert (out / "old.txt").read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_failure_while_installing_leaves_no_temp_dir(tmp_path: Path) -> None:
    out = _old_target(tmp_path)

    def install(tmp: Path, target: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"), staged_dir(out, install=install) as tmp:
        (tmp / "new.txt").write_text("new\n")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in out.iterdir()] == ["old.txt"]


def test_failure_with_no_target_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), staged_dir(tmp_path / "sub" / "out"):
        raise RuntimeError
    assert [p.name for p in tmp_path.iterdir()] == ["sub"]
    assert list((tmp_path / "sub").iterdir()) == []


def test_what_a_killed_write_left_goes_with_the_next_write(tmp_path: Path) -> None:
    """A kill -9 while a folder is staged (a final export, a checkpoint's export) leaves its
    temp dir; the next write of that folder removes it, but not a live process's."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f".out.tmp-{dead}-abc123"
    old = tmp_path / f".out.old-{dead}-abc123"
    live = tmp_path / f".out.tmp-{os.getpid()}-def456"  # a run in progress: not ours
    for path in (stale, old, live):
        path.mkdir()
    with staged_dir(tmp_path / "out"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", live.name])


def test_cvt_model_dir_write_failure_leaves_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The CVT writer cleans up like the others (it goes through `staged_dir` too)."""
    from cvt_helpers import TINY

    from electra.cvt import model as cvt_model
    from electra.cvt.config import make_config
    from electra.cvt.tasks import CVTTask
    from electra.cvt.vocab import build_vocab

    task = CVTTask("chunk")
    task.labels = ["B-NP", "O"]
    vocab = build_vocab([["the", "dog"]], [], 100)
    model = cvt_model.CVTModel(make_config("small", TINY), vocab, [task])
    out = _old_target(tmp_path)

    def broken_save(*args, **kwargs) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(cvt_model, "save_file", broken_save)
    with pytest.raises(OSError, match="disk full"):
        cvt_model.save_model_dir(out, model, model.state_dict(), vocab, [task])
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    monkeypatch.undo()
    cvt_model.save_model_dir(out, model, {k: torch.zeros(1) for k in ["x"]}, vocab, [task])
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors",
                                                    "vocab.json"]

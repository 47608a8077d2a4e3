"""Under torchrun, a write that fails on one process ends every process with the same line,
and none waits for a process that has stopped (`agree_on_failure`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

WORKER = r'''
import errno, json, os, sys
from pathlib import Path
import torch.distributed as dist
from electra.errors import ElectraError
from electra.runtime import checkpoint
from electra.runtime.distributed import DistInfo

rank, out, kind = int(os.environ["RANK"]), Path(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo")
info = DistInfo(rank, 2, rank)

def write(tmp):
    (tmp / "model.safetensors").write_bytes(b"\0" * 64)
    if kind == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    raise ValueError("a bug in a writer")

try:
    checkpoint.save(out, 1, lambda tmp: None, {}, keep=2, info=info)  # a good one first
    checkpoint.save(out, 2, write, {}, keep=2, info=info)
    result = {"ended": "without an error"}
except ElectraError as e:
    result = {"error": str(e)}
except ValueError as e:
    result = {"raised": f"{type(e).__name__}: {e}"}
(out / f"rank{rank}.json").write_text(json.dumps(result))
dist.destroy_process_group()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two(tmp_path: Path, kind: str) -> list[dict]:
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT / "src")}
        procs.append(subprocess.Popen([sys.executable, str(script), str(out), kind], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for proc in procs:
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("a process waited for one that had stopped")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_a_full_disk_on_the_main_process_ends_both_with_the_same_line(tmp_path):
    first, second = run_two(tmp_path, "enospc")
    out = tmp_path / "out"
    assert first == second == {"error": (
        f"{out}: no space left on device while writing checkpoint step 2 (partial files "
        "removed); the latest complete checkpoint is step 1; free space and run the same "
        "command with --resume auto")}
    root = out / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_00000001"]


def test_a_bug_in_a_writer_is_raised_there_and_stops_the_other(tmp_path):
    first, second = run_two(tmp_path, "bug")
    assert first == {"raised": "ValueError: a bug in a writer"}
    assert second == {"error": f"{tmp_path / 'out'}: writing checkpoint step 2 failed on "
                               "process 0 (ValueError)"}

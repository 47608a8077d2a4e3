"""Pre-training under a scheduler: one command line (`--resume auto`) starts a run and continues
it after any stop, and a write that fails (a full disk) leaves no partial files and is one
line naming the latest complete checkpoint and the command that continues."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import SafetensorError
from test_robustness import SELF_SIGNALLING_LAUNCHER, checkpoint_steps
from test_train import (
    STEPS,
    assert_bit_identical,
    one_error_line,
    pretrain_argv,
    read_metrics,
    tiny_config_file,
    without_notes,
)

from electra.cli import main
from electra.data import prepare as prepare_mod
from electra.errors import EXIT_PREEMPTED
from electra.fileutil import write_failure
from electra.model import hf as hf_mod
from electra.runtime import checkpoint

REPO = Path(__file__).resolve().parents[1]

# Runs the CLI in a fresh process that kills itself (SIGKILL, as `kill -9` or an OOM killer
# would) right after the checkpoint of step AT is written.
KILLED_AFTER_CHECKPOINT_LAUNCHER = '''
import os
import signal
import sys

import torch

from electra.cli import main
from electra.pretraining import loop

at = int(sys.argv[1])
real_save = loop._save_checkpoint


def save_then_die(out, objective, update, step, *rest):
    path = real_save(out, objective, update, step, *rest)
    if step == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return path


loop._save_checkpoint = save_then_die
torch.set_num_threads(1)
sys.exit(main(sys.argv[2:]))
'''


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_config_file(tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_config: Path, data_dir: Path) -> Path:
    """STEPS uninterrupted steps."""
    out = tmp_path_factory.mktemp("reference") / "out"
    assert main(pretrain_argv(tiny_config, data_dir, out)) == 0
    return out


def launch(tmp_path: Path, launcher: str, *argv: str) -> subprocess.CompletedProcess:
    script = tmp_path / "launch.py"
    script.write_text(launcher)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script), *argv], env=env, capture_output=True,
                          text=True, timeout=300)


# --- one command ---------------------------------------------------------------------------


def test_one_command_starts_and_continues_after_sigterm_and_kill(reference, tiny_config,
                                                                  data_dir, tmp_path, capsys):
    """The same command line three times: on an empty OUT (stopped by SIGTERM during step 3:
    exit 75), after it (killed by SIGKILL right after the checkpoint of step 6), after that
    (to the end). The weights equal an uninterrupted run's, tensor for tensor."""
    out = tmp_path / "out"
    argv = pretrain_argv(tiny_config, data_dir, out, "--resume", "auto")

    first = launch(tmp_path, SELF_SIGNALLING_LAUNCHER, "SIGTERM", "2", *argv)
    assert first.returncode == EXIT_PREEMPTED, first.stderr[-3000:]
    latest = checkpoint.checkpoint_root(out) / "step_00000003"
    assert without_notes(first.stderr) == [
        f"electra pretrain: stopped by SIGTERM after step 3 of {STEPS}; checkpoint {latest} "
        "written; run the same command again to continue"]

    second = launch(tmp_path, KILLED_AFTER_CHECKPOINT_LAUNCHER, "6", *argv)
    assert second.returncode == -9, second.stderr[-3000:]
    assert checkpoint_steps(out) == [4, 6] and not (out / "final").exists()

    capsys.readouterr()
    assert main(argv) == 0
    assert_bit_identical(reference, out)
    assert [r["step"] for r in read_metrics(out)] == [r["step"] for r in read_metrics(reference)]


def test_resume_auto_refuses_another_configuration(reference, tiny_config, data_dir, capsys):
    argv = pretrain_argv(tiny_config, data_dir, reference, "--resume", "auto",
                         "--set", "model.num_hidden_layers=1")
    capsys.readouterr()
    assert main(argv) == 1
    assert one_error_line(capsys.readouterr().err, "pretrain") == (
        f"electra pretrain: error: {reference}: the model configuration differs from the run "
        "being resumed")


def test_plain_resume_still_needs_a_run(tiny_config, data_dir, tmp_path, capsys):
    assert main(pretrain_argv(tiny_config, data_dir, tmp_path / "empty", "--resume")) == 1
    assert "nothing to resume" in one_error_line(capsys.readouterr().err, "pretrain")
    assert not (tmp_path / "empty").exists()


# --- a full disk ---------------------------------------------------------------------------


def enospc(path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def torch_short_write(path) -> RuntimeError:
    return RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 5436352 vs "
                        "5436240")


def safetensors_full(path) -> SafetensorError:
    return SafetensorError("Error while serializing: I/O error: No space left on device (os "
                           "error 28)")


def half_written(path, error) -> None:
    """What a full disk does to a writer: some bytes land, then the write fails."""
    with open(path, "wb") as handle:
        handle.write(b"\0" * 4096)
    raise error(path)


@pytest.mark.parametrize("error", [enospc, torch_short_write, safetensors_full])
def test_a_full_disk_at_a_checkpoint_is_one_line_and_leaves_no_partial_files(
        error, reference, tiny_config, data_dir, tmp_path, monkeypatch, capsys):
    """The second checkpoint's weights fail half-written: exit 1, one line, no `.step_N.tmp`,
    `latest` still the first checkpoint; the same command, once space is back, finishes
    bit-identical to an uninterrupted run."""
    out = tmp_path / "out"
    argv = pretrain_argv(tiny_config, data_dir, out, "--resume", "auto")
    real = checkpoint.save_model
    calls = []

    def save_model(model, filename, *args, **kwargs):
        calls.append(filename)
        if len(calls) == 2:
            half_written(filename, error)
        return real(model, filename, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_model", save_model)
    capsys.readouterr()
    assert main(argv) == 1
    assert one_error_line(capsys.readouterr().err, "pretrain") == (
        f"electra pretrain: error: {out}: no space left on device while writing checkpoint "
        "step 4 (partial files removed); the latest complete checkpoint is step 2; free space "
        "and run the same command again")
    root = checkpoint.checkpoint_root(out)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_00000002"]
    assert checkpoint.find_latest(out) == root / "step_00000002"

    monkeypatch.setattr(checkpoint, "save_model", real)
    assert main(argv) == 0
    assert_bit_identical(reference, out)


def test_a_full_disk_while_appending_metrics_is_one_line_and_the_same_command_continues(
        reference, tiny_config, data_dir, tmp_path, monkeypatch, capsys):
    """metrics.jsonl's line of step 5 fails half-written (ENOSPC): exit 1, one line naming the
    latest checkpoint (step 4) and the command; that command, once space is back, drops the
    torn line and finishes bit-identical, its metrics those of an uninterrupted run."""
    from electra.runtime import metrics_log

    out = tmp_path / "out"
    argv = pretrain_argv(tiny_config, data_dir, out, "--resume", "auto",
                         "--set", "train.log_every=1")
    real = metrics_log.MetricsLogger._append

    def append(self, line):
        if '"step": 5,' in line and '"loss"' in line:
            with self.path.open("a") as handle:
                handle.write(line[: len(line) // 2])  # what lands before the disk is full
            raise enospc(self.path)
        return real(self, line)

    monkeypatch.setattr(metrics_log.MetricsLogger, "_append", append)
    capsys.readouterr()
    assert main(argv) == 1
    assert one_error_line(capsys.readouterr().err, "pretrain") == (
        f"electra pretrain: error: {out / 'metrics.jsonl'}: appending step 5: no space left "
        "on device; the latest complete checkpoint is step 4; free space and run the same "
        "command again")
    monkeypatch.setattr(metrics_log.MetricsLogger, "_append", real)
    assert main(argv) == 0
    assert_bit_identical(reference, out)
    again = tmp_path / "again"  # the same settings, uninterrupted, for the log's lines
    assert main(pretrain_argv(tiny_config, data_dir, again, "--set", "train.log_every=1")) == 0
    strip = {"tokens_per_s"}
    assert [{k: v for k, v in r.items() if k not in strip} for r in read_metrics(out)] == \
        [{k: v for k, v in r.items() if k not in strip} for r in read_metrics(again)]


def test_a_full_disk_while_writing_run_json_leaves_no_run_and_the_same_command_starts(
        reference, tiny_config, data_dir, tmp_path, monkeypatch, capsys):
    from electra.pretraining import loop

    out = tmp_path / "out"
    real = loop.write_run_record

    def write_run_record(out_dir, record):
        half_written(Path(out_dir) / "run.json", enospc)

    monkeypatch.setattr(loop, "write_run_record", write_run_record)
    capsys.readouterr()
    assert main(pretrain_argv(tiny_config, data_dir, out)) == 1
    assert one_error_line(capsys.readouterr().err, "pretrain") == (
        f"electra pretrain: error: {out}: no space left on device while writing settings.json "
        "and run.json (neither kept); free space and run the same command again")
    assert not (out / "settings.json").exists() and not (out / "run.json").exists()
    monkeypatch.setattr(loop, "write_run_record", real)
    assert main(pretrain_argv(tiny_config, data_dir, out)) == 0
    assert_bit_identical(reference, out)


def test_a_full_disk_during_the_final_export_is_one_line(reference, tiny_config, data_dir,
                                                         tmp_path, monkeypatch, capsys):
    """The generator's export fails: OUT/final goes (its discriminator too), the last
    checkpoint stays, and the command without --resume is told to add --resume auto, which
    then only exports."""
    out = tmp_path / "out"
    real = hf_mod.save_file

    def save_file(state, filename, *args, **kwargs):
        if "generator" in str(filename):
            half_written(filename, enospc)
        return real(state, filename, *args, **kwargs)

    monkeypatch.setattr(hf_mod, "save_file", save_file)
    capsys.readouterr()
    assert main(pretrain_argv(tiny_config, data_dir, out)) == 1
    assert one_error_line(capsys.readouterr().err, "pretrain") == (
        f"electra pretrain: error: {out}: no space left on device while writing the export "
        f"{out / 'final'} (partial files removed); the latest complete checkpoint is step "
        f"{STEPS}; free space and run the same command with --resume auto")
    assert not (out / "final").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []

    monkeypatch.setattr(hf_mod, "save_file", real)
    assert main(pretrain_argv(tiny_config, data_dir, out, "--resume", "auto")) == 0
    assert_bit_identical(reference, out)


def test_a_full_disk_while_preparing_is_one_line_and_leaves_nothing(
        corpus_file, vocab_dir, tmp_path, monkeypatch, capsys):
    """numpy's own short-write error (an OSError without errno) on a shard's second array:
    exit 1, one line, no OUT and no staging directory beside it."""
    real = np.save
    calls = []

    def save(path, array, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            half_written(path, lambda p: OSError("1000000 requested and 393200 written"))
        return real(path, array, *args, **kwargs)

    monkeypatch.setattr(prepare_mod.np, "save", save)
    out = tmp_path / "data"
    capsys.readouterr()
    assert main(["prepare", "--corpus", str(corpus_file), "--tokenizer", str(vocab_dir),
                 "--seq-len", "32", "--out", str(out), "--workers", "1"]) == 1
    shard = Path(calls[1]).name
    assert one_error_line(capsys.readouterr().err, "prepare") == (
        f"electra prepare: error: {out}: no space left on device while writing shard {shard} "
        f"(partial files removed, {out} left as it was); free space and run the same command "
        "again")
    assert list(tmp_path.iterdir()) == []


def test_write_failure_maps_only_failed_writes():
    assert write_failure(enospc(None)) == "no space left on device"
    assert write_failure(torch_short_write(None)) == "no space left on device"
    assert write_failure(safetensors_full(None)) == "no space left on device"
    assert write_failure(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))) == \
        "disk quota exceeded"
    assert write_failure(PermissionError(errno.EACCES, "Permission denied")) == \
        "permission denied"
    for unrelated in (RuntimeError("CUDA error: out of memory"), ValueError("bad"),
                      SafetensorError("Error while deserializing header: HeaderTooLarge"),
                      KeyError("x")):
        assert write_failure(unrelated) is None


@pytest.mark.parametrize("command", [["pretrain", "--data", "d"], ["cvt", "--tasks", "chunk",
                                                                  "--data", "d"]])
def test_resume_takes_auto(command):
    from electra.cli import build_parser

    parser = build_parser()
    assert [parser.parse_args([*command, "--out", "o", *extra]).resume
            for extra in ([], ["--resume"], ["--resume", "auto"])] == [False, True, "auto"]

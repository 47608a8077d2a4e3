"""Training on real clusters: preemption (SIGTERM/SIGUSR1 -> finish the step, checkpoint,
exit EXIT_PREEMPTED, `--resume` continues bit-exactly) and non-finite steps (stop with an
error naming the last good checkpoint, or `--skip-nonfinite`)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_train import (
    SAVE_EVERY,
    STEPS,
    assert_bit_identical,
    one_error_line,
    pretrain_argv,
    read_metrics,
    tiny_config_file,
    without_notes,
)

from electra.cli import main
from electra.errors import EXIT_PREEMPTED
from electra.pretraining import loop as loop_mod
from electra.runtime import checkpoint
from electra.runtime import optim as optim_mod
from electra.runtime.preempt import StopSignals

REPO = Path(__file__).resolve().parents[1]

# Runs the CLI in a fresh process that sends itself SIGNAL while the loop takes micro-batch
# AT (0-based): a real signal, delivered mid-step, at a known step.
SELF_SIGNALLING_LAUNCHER = '''
import os
import signal
import sys

import torch

from electra.cli import main
from electra.pretraining import loop

sig, at = signal.Signals[sys.argv[1]], int(sys.argv[2])
real_iterate = loop.iterate_batches


def iterate(*args, **kwargs):
    for i, batch in enumerate(real_iterate(*args, **kwargs)):
        if i == at:
            os.kill(os.getpid(), sig)
        yield batch


loop.iterate_batches = iterate
torch.set_num_threads(1)  # as the in-process runs of the tests (conftest)
sys.exit(main(sys.argv[3:]))
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


def run_self_signalling(tmp_path: Path, sig: str, at: int, argv: list[str]
                        ) -> subprocess.CompletedProcess:
    launcher = tmp_path / "launch.py"
    launcher.write_text(SELF_SIGNALLING_LAUNCHER)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(launcher), sig, str(at), *argv], env=env,
                          capture_output=True, text=True, timeout=300)


def checkpoint_steps(out: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in checkpoint.checkpoint_root(out).glob(
        "step_*"))


# --- preemption ---------------------------------------------------------------------------


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR1"])
def test_signal_stops_after_the_step_with_a_checkpoint_and_resumes_exactly(
        sig, reference, tiny_config, data_dir, tmp_path, capsys):
    """The signal arrives while step 3 runs (between two checkpoints): the process finishes
    step 3, checkpoints it, prints one line and exits 75; `--resume` ends bit-identical to the
    uninterrupted run."""
    out = tmp_path / "out"
    proc = run_self_signalling(tmp_path, sig, 2, pretrain_argv(tiny_config, data_dir, out))
    assert proc.returncode == EXIT_PREEMPTED, proc.stderr[-3000:]
    lines = without_notes(proc.stderr)
    assert len(lines) == 1, lines
    latest = checkpoint.checkpoint_root(out) / "step_00000003"
    assert lines[0] == (f"electra pretrain: stopped by {sig} after step 3 of {STEPS}; "
                        f"checkpoint {latest} written; continue with the same command plus "
                        "--resume")
    assert checkpoint.find_latest(out) == latest
    assert checkpoint_steps(out) == [2, 3]
    assert not (out / "final").exists()

    capsys.readouterr()
    assert main(pretrain_argv(tiny_config, data_dir, out, "--resume")) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == STEPS
    assert_bit_identical(reference, out)
    # Logged at the same steps; the line after the resume averages only the steps it saw.
    assert [r["step"] for r in read_metrics(out)] == [r["step"] for r in read_metrics(reference)]


def test_signal_on_a_checkpoint_step_writes_it_once(reference, tiny_config, data_dir, tmp_path,
                                                    capsys):
    out = tmp_path / "out"
    proc = run_self_signalling(tmp_path, "SIGTERM", SAVE_EVERY - 1,
                               pretrain_argv(tiny_config, data_dir, out))
    assert proc.returncode == EXIT_PREEMPTED, proc.stderr[-3000:]
    assert checkpoint_steps(out) == [SAVE_EVERY]
    assert main(pretrain_argv(tiny_config, data_dir, out, "--resume")) == 0
    assert_bit_identical(reference, out)


def test_handlers_are_restored_after_training(reference, tiny_config, data_dir, tmp_path):
    """Library code leaves the caller's handlers as it found them, after a run and after a
    failed one."""
    def mine(signum, frame):
        pass

    before = {s: signal.signal(s, mine) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        assert main(pretrain_argv(tiny_config, data_dir, tmp_path / "a", "--steps", "1")) == 0
        assert all(signal.getsignal(s) is mine for s in before)
        with pytest.MonkeyPatch.context() as mp:  # an error raised inside the loop
            poison_step(mp, 1)
            assert main(pretrain_argv(tiny_config, data_dir, tmp_path / "b")) == 1
        assert all(signal.getsignal(s) is mine for s in before)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_stop_signals_outside_the_main_thread_install_nothing():
    import threading

    seen = []

    def body():
        with StopSignals() as stop:
            seen.append(stop._previous)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [{}]


def test_help_documents_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"exit status is {EXIT_PREEMPTED}" in help_text
    assert "--skip-nonfinite" in help_text



def test_finetune_stops_cleanly_with_a_checkpoint(tiny_model, tmp_path, capsys):
    """A signal finishes the step, writes the seed's checkpoint, no results, and exits 75 with
    one line saying to run the command again; handlers are restored. (That the rerun continues
    exactly: tests/test_finetune_resume.py.)"""
    from test_finetune_e2e import _user_data

    from electra.finetuning import training as finetune_training

    _user_data(tmp_path / "train.tsv", 64, 0)
    _user_data(tmp_path / "dev.tsv", 16, 1)
    real_step = finetune_training.train_step
    calls = []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(*args, **kwargs)

    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(finetune_training, "train_step", step)
        argv = ["finetune", "--model", str(tiny_model), "--task", "user", "--text-a", "text",
                "--label", "label", "--data", str(tmp_path), "--out", str(out),
                "--batch-size", "8", "--epochs", "1", "--quiet"]
        capsys.readouterr()
        assert main(argv) == EXIT_PREEMPTED
    lines = without_notes(capsys.readouterr().err)
    saved = out / "seed1" / "checkpoints" / "step_00000002"
    assert lines == [f"electra finetune: stopped by SIGTERM after step 2 of 8 (user, seed 1); "
                     f"checkpoint {saved} written; run the same command again to continue"]
    assert len(calls) == 2
    assert checkpoint.find_latest(out / "seed1") == saved
    assert not (out / "results.json").exists() and not (out / "model").exists()
    assert signal.getsignal(signal.SIGTERM) is before

# --- non-finite steps ---------------------------------------------------------------------


def poison_step(mp: pytest.MonkeyPatch, bad_step: int) -> None:
    """The objective's loss is NaN in step `bad_step` (1-based), so are its gradients."""
    real_build = loop_mod.build_objective

    def build(*args, **kwargs):
        objective = real_build(*args, **kwargs)
        calls = []

        def hook(module, inputs, output):
            if not module.training:  # a held-out probe
                return output
            calls.append(1)
            if len(calls) == bad_step:
                output.loss = output.loss * float("nan")
            return output

        objective.register_forward_hook(hook)
        return objective

    mp.setattr(loop_mod, "build_objective", build)


@pytest.fixture(params=["host", "device"])
def guard(request, monkeypatch) -> str:
    """Where the non-finite guard decides: on the host after every step (non-fused AdamW), or
    on the device (fused AdamW skips the update; the host reads the count at the next log line
    or checkpoint), as on CUDA. CPU has a fused AdamW too, so both run here."""
    if request.param == "device":
        monkeypatch.setattr(optim_mod, "adamw_impl", lambda params: {"fused": True})
    return request.param


def all_finite(tensors: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors.values())


def test_nonfinite_step_stops_with_the_last_good_checkpoint(guard, tiny_config, data_dir,
                                                           tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        poison_step(mp, 5)
        assert main(pretrain_argv(tiny_config, data_dir, out)) == 1
    line = one_error_line(capsys.readouterr().err, "pretrain")
    good = checkpoint.checkpoint_root(out) / "step_00000004"
    assert ("non-finite loss or gradient at step 5" if guard == "host"
            else "non-finite loss or gradient in 1 of steps 5-6") in line
    assert f"the last good checkpoint is {good}" in line
    assert checkpoint_steps(out) == [2, 4]  # nothing from step 5 or later
    assert not (out / "final").exists()
    for step in (2, 4):
        d = checkpoint.checkpoint_root(out) / f"step_{step:08d}"
        assert all_finite(load_file(str(d / "model.safetensors")))
        state = torch.load(d / "trainer.pt", weights_only=False)["optimizer"]["state"]
        assert all(all_finite({k: v for k, v in s.items() if torch.is_tensor(v)})
                   for s in state.values())


def test_nonfinite_first_step_says_no_checkpoint_yet(guard, tiny_config, data_dir, tmp_path,
                                                    capsys):
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        poison_step(mp, 1)
        assert main(pretrain_argv(tiny_config, data_dir, out)) == 1
    line = one_error_line(capsys.readouterr().err, "pretrain")
    assert ("at step 1 " if guard == "host" else "in 1 of steps 1-2") in line
    assert "no checkpoint written yet" in line
    assert checkpoint_steps(out) == []


def test_skip_nonfinite_skips_and_counts(guard, reference, tiny_config, data_dir, tmp_path,
                                         capsys):
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        poison_step(mp, 5)
        assert main(pretrain_argv(tiny_config, data_dir, out, "--skip-nonfinite")) == 0
    records = read_metrics(out)
    assert [r["step"] for r in records] == [2, 4, 6, 8]
    assert [r["skipped_nonfinite"] for r in records] == [0, 0, 1, 1]
    assert all(math.isfinite(r["loss"]) for r in records)
    ref = read_metrics(reference)
    assert records[-1]["lr"] == ref[-1]["lr"]  # the schedule advanced through the skip
    for step in (6, 8):
        meta = checkpoint.read_meta(checkpoint.checkpoint_root(out) / f"step_{step:08d}")
        assert meta["skipped_nonfinite"] == 1
    for name in ("discriminator", "generator"):
        final = load_file(str(out / "final" / name / "model.safetensors"))
        assert all_finite(final)
    if guard == "device":  # fused AdamW rounds differently from the reference's
        return
    # Steps 1-4 are the reference's: identical records until the skip.
    assert [{k: v for k, v in r.items() if k not in ("tokens_per_s", "skipped_nonfinite")}
            for r in records[:2]] == [{k: v for k, v in r.items() if k != "tokens_per_s"}
                                      for r in ref[:2]]


# --- under torchrun -----------------------------------------------------------------------


@pytest.mark.slow
def test_ranks_agree_on_the_stop_step(tiny_config, data_dir, tmp_path):
    """Only rank 1 is signalled (during step 1): both ranks stop after step 1 with one
    checkpoint holding both RNG streams, and a resume under torchrun ends bit-identical to an
    uninterrupted two-process run."""
    launcher = tmp_path / "launch.py"
    launcher.write_text(SELF_SIGNALLING_LAUNCHER.replace(
        "if i == at:", "if i == at and os.environ['RANK'] == '1':"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))

    def torchrun(out: Path, at: int, *extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", str(launcher), "SIGTERM", str(at),
               *pretrain_argv(tiny_config, data_dir, out, "--device", "cpu", "--steps", "4",
                              *extra)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    reference, out = tmp_path / "reference", tmp_path / "out"
    assert torchrun(reference, -1).returncode == 0
    proc = torchrun(out, 0)
    assert proc.returncode != 0
    # One message per rank, the same step. Counted in the whole of stderr, not per line: the
    # two ranks write to one pipe at the same moment, so their lines can run together.
    stops = re.findall(r"stopped by (.+?) after step (\d+) of 4", proc.stderr)
    assert len(stops) == 2, proc.stderr[-3000:]
    assert all(step == "1" for _, step in stops)
    assert any(name == "SIGTERM" for name, _ in stops)
    meta = checkpoint.verify(checkpoint.find_latest(out))
    assert meta["step"] == 1 and {"rng_rank0.pt", "rng_rank1.pt"} <= set(meta["files"])
    assert torchrun(out, -1, "--resume").returncode == 0
    assert_bit_identical(reference, out)


@pytest.mark.slow
def test_resume_soak_benchmark_smoke():
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.resume_soak",
                           "--kills", "1", "--sigterms", "1", "--steps", "20"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert [e["signal"] for e in report["interruptions"]].count("SIGKILL") == 1
    assert report["all_interruptions_as_expected"]
    assert report["weights_bit_identical"] and report["metrics_identical_but_speed"]

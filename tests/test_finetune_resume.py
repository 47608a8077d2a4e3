"""Fine-tuning that survives a kill: per-seed checkpoints, finished seeds read back instead of
trained, a rerun of the same command giving the results, logs and OUT/model of a run that never
stopped; and gradient accumulation giving the training of the whole batch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_finetune_e2e import SHARED_DATA, _user_data
from test_multitask import make_glue_like
from test_train import one_error_line, without_notes

from electra.cli import main
from electra.config import ModelConfig
from electra.errors import EXIT_PREEMPTED, ElectraError, Preempted
from electra.fileutil import write_atomic
from electra.finetuning import seeds as seeds_mod
from electra.finetuning import training as training_mod
from electra.finetuning.training import EpochBatches, micro_batches
from electra.model.encoder import init_weights
from electra.model.hf import save_pretrained
from electra.model.networks import Discriminator
from electra.multitask.train import MultitaskSettings, run_multitask

REPO = Path(__file__).resolve().parents[1]
STEPS_PER_SEED = 32  # 256 examples, batch 8, one epoch

# The CLI in a fresh process, as the in-process runs (one thread), each step slowed so that a
# kill sent once a checkpoint of seed 2 appears lands while seed 2 still trains.
SLOW_LAUNCHER = '''
import sys
import time

import torch

from electra.cli import main
from electra.finetuning import training

real_step = training.train_step


def slow_step(*args, **kwargs):
    time.sleep(0.03)
    return real_step(*args, **kwargs)


training.train_step = slow_step
torch.set_num_threads(1)
sys.exit(main(sys.argv[1:]))
'''


@pytest.fixture(scope="module")
def user_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("user")
    _user_data(data / "train.tsv", 256, 0)
    _user_data(data / "dev.tsv", 32, 1)
    return data


def finetune_argv(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["finetune", "--model", str(model), "--task", "user", "--text-a", "text", "--label",
            "label", "--data", str(data), "--out", str(out), "--batch-size", "8", "--epochs",
            "1", "--seeds", "2", "--log-every", "3", "--precision", "fp32", "--quiet", *extra]


@pytest.fixture(scope="module")
def reference(tiny_model: Path, user_data: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Path:
    """Two seeds, never stopped."""
    out = tmp_path_factory.mktemp("reference") / "out"
    assert main(finetune_argv(tiny_model, user_data, out, "--save-every", "5")) == 0
    return out


def comparable_results(out: Path) -> dict:
    """results.json with OUT's path written as "OUT", each seed's train_seconds (wall time)
    dropped, and the checkpoint cadence (the reference ran with another one, which changes
    nothing else) dropped: what an interrupted run must reproduce exactly."""
    res = json.loads((out / "results.json").read_text().replace(str(out), "OUT"))
    for entry in res["seeds"]:
        entry.pop("train_seconds")
    res["settings"].pop("save_every")
    return res


def assert_same_run(out: Path, reference: Path) -> None:
    assert comparable_results(out) == comparable_results(reference)
    for seed in (1, 2):
        metrics = f"seed{seed}/metrics.jsonl"
        assert (out / metrics).read_text() == (reference / metrics).read_text()
        assert not (out / f"seed{seed}" / "checkpoints").exists()  # deleted once done
    got = load_file(out / "model" / "model.safetensors")
    want = load_file(reference / "model" / "model.safetensors")
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_reference_run_records_each_seed(reference: Path) -> None:
    res = json.loads((reference / "results.json").read_text())
    assert [s["seed"] for s in res["seeds"]] == [1, 2]
    assert all(s["steps"] == STEPS_PER_SEED for s in res["seeds"])
    best = max(res["seeds"], key=lambda s: s["scores"]["accuracy"])  # ties: the first
    assert json.loads((reference / "model" / "finetune.json").read_text())["seed"] == best["seed"]
    for entry in res["seeds"]:
        record = json.loads((reference / f"seed{entry['seed']}" / "seed.json").read_text())
        assert record["entry"] == entry
    assert json.loads((reference / "settings.json").read_text())["finetune"]["save_every"] == 5


def test_sigterm_checkpoints_and_the_same_command_continues_exactly(
        tiny_model: Path, user_data: Path, reference: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM in seed 2's fourth step (no periodic checkpoints: --save-every 0; a log window
    holding one step): exit 75, one line naming the checkpoint; the rerun continues from it."""
    real_step = training_mod.train_step
    calls = []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == STEPS_PER_SEED + 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(*args, **kwargs)

    out = tmp_path / "out"
    argv = finetune_argv(tiny_model, user_data, out, "--save-every", "0")
    with monkeypatch.context() as mp:
        mp.setattr(training_mod, "train_step", step)
        capsys.readouterr()
        assert main(argv) == EXIT_PREEMPTED
    checkpoint = out / "seed2" / "checkpoints" / "step_00000004"
    assert without_notes(capsys.readouterr().err) == [
        f"electra finetune: stopped by SIGTERM after step 4 of {STEPS_PER_SEED} (user, seed 2);"
        f" checkpoint {checkpoint} written; run the same command again to continue"]
    assert (out / "seed2" / "checkpoints" / "latest").read_text().strip() == checkpoint.name
    assert (out / "seed1" / "seed.json").is_file() and not (out / "seed2" / "seed.json").exists()
    assert not (out / "seed1" / "checkpoints").exists()
    assert not (out / "results.json").exists()

    assert main(argv) == 0
    assert_same_run(out, reference)
    res = json.loads((out / "results.json").read_text())
    assert res["seeds"][1]["train_seconds"] > 0


class Crash(BaseException):
    """Stands for a kill: nothing in the run catches it, so the run ends where it is."""


def test_a_crash_after_a_periodic_checkpoint_continues_from_it(
        tiny_model: Path, user_data: Path, reference: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 2 dies in its 7th step: its checkpoint is step 4's (--save-every 4), so the log
    line of step 6 is dropped and written again by the rerun."""
    real_step = training_mod.train_step
    calls = []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == STEPS_PER_SEED + 7:
            raise Crash
        return real_step(*args, **kwargs)

    out = tmp_path / "out"
    argv = finetune_argv(tiny_model, user_data, out, "--save-every", "4")
    with monkeypatch.context() as mp:
        mp.setattr(training_mod, "train_step", step)
        with pytest.raises(Crash):
            main(argv)
    assert (out / "seed2" / "checkpoints" / "latest").read_text().strip() == "step_00000004"
    logged = [json.loads(line)["step"] for line in
              (out / "seed2" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [3, 6]
    assert main(argv) == 0
    assert_same_run(out, reference)


def test_a_crash_after_the_evaluation_continues_from_the_last_steps_checkpoint(
        tiny_model: Path, user_data: Path, reference: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 2 trained, evaluated and logged its scores, then died before it was recorded: the
    rerun takes its last step's checkpoint, trains nothing, evaluates again and logs the scores
    once."""
    real_offer = seeds_mod.KeepBest.offer

    def offer(self, model, seed, *args):
        if seed == 2:
            raise Crash
        return real_offer(self, model, seed, *args)

    out = tmp_path / "out"
    argv = finetune_argv(tiny_model, user_data, out, "--save-every", "5")
    with monkeypatch.context() as mp:
        mp.setattr(seeds_mod.KeepBest, "offer", offer)
        with pytest.raises(Crash):
            main(argv)
    last = f"step_{STEPS_PER_SEED:08d}"
    assert (out / "seed2" / "checkpoints" / "latest").read_text().strip() == last
    assert "dev_accuracy" in (out / "seed2" / "metrics.jsonl").read_text().splitlines()[-1]
    assert main(argv) == 0
    assert_same_run(out, reference)


@pytest.mark.slow
def test_kill_9_during_the_second_seed_then_the_same_command(
        tiny_model: Path, user_data: Path, reference: Path, tmp_path: Path) -> None:
    """A real SIGKILL once seed 2 has a checkpoint; the same command, run again, continues."""
    launcher = tmp_path / "launch.py"
    launcher.write_text(SLOW_LAUNCHER)
    out = tmp_path / "out"
    argv = finetune_argv(tiny_model, user_data, out, "--save-every", "2")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(launcher), *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    latest = out / "seed2" / "checkpoints" / "latest"
    deadline = time.monotonic() + 300
    while not latest.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.kill()
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    proc.stderr.close()
    assert (out / "seed1" / "seed.json").is_file()
    assert not (out / "seed2" / "seed.json").exists()  # killed while seed 2 trained
    assert not (out / "results.json").exists()

    done = subprocess.run([sys.executable, str(launcher), *argv], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_same_run(out, reference)


def test_a_finished_run_is_read_back_not_trained(
        tiny_model: Path, user_data: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    argv = finetune_argv(tiny_model, user_data, out, "--seeds", "1")
    assert main(argv) == 0
    before = (out / "results.json").read_text()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished seed was trained again")

    monkeypatch.setattr(seeds_mod, "train_model", no_training)
    capsys.readouterr()
    assert main(argv) == 0
    assert f"note: {out} holds this run's finished seed 1: read back, not trained again" in \
        capsys.readouterr().err
    assert (out / "results.json").read_text() == before  # train_seconds included
    # More seeds continue the run: seed 1 is read back, seed 2 trained (here: refused to).
    with pytest.raises(AssertionError, match="trained again"):
        main(finetune_argv(tiny_model, user_data, out, "--seeds", "2"))
    capsys.readouterr()


def test_a_rerun_with_other_settings_is_refused(tiny_model: Path, user_data: Path,
                                                reference: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    argv = finetune_argv(tiny_model, user_data, out, "--seeds", "1")
    assert main(argv) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*argv, "--lr", "0.002"]) == 1
    line = one_error_line(capsys.readouterr().err, "finetune")
    assert "holds a fine-tuning run with other settings (settings.lr: " in line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_the_model_counts_by_content_not_by_path(tiny_model: Path, user_data: Path,
                                                 tmp_path: Path, capsys: pytest.CaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """New weights in the same directory (a demo pre-trains anew into the same path) are
    refused; the same weights moved elsewhere are the same run."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    out = tmp_path / "out"
    assert main(finetune_argv(model, user_data, out, "--seeds", "1")) == 0
    before = (out / "results.json").read_text()
    moved = tmp_path / "moved"
    model.rename(moved)
    monkeypatch.setattr(seeds_mod, "train_model", None)  # nothing may train
    assert main(finetune_argv(moved, user_data, out, "--seeds", "1")) == 0
    after = json.loads((out / "results.json").read_text())
    assert after["seeds"] == json.loads(before)["seeds"] and after["model"] == str(moved)
    state = load_file(moved / "model.safetensors")
    save_file({k: v + 1 for k, v in state.items()}, moved / "model.safetensors")
    capsys.readouterr()
    assert main(finetune_argv(moved, user_data, out, "--seeds", "1")) == 1
    assert "(model.model.safetensors: '" in one_error_line(capsys.readouterr().err, "finetune")


def test_the_data_counts_by_content_not_by_path(tiny_model: Path, user_data: Path,
                                                tmp_path: Path, capsys: pytest.CaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The same files in another folder are the same run; other content in the same folder is
    refused; a seed recorded before data was compared by content (its folder's path) still
    counts."""
    data = tmp_path / "data"
    shutil.copytree(user_data, data)
    out = tmp_path / "out"
    assert main(finetune_argv(tiny_model, data, out, "--seeds", "1")) == 0
    before = json.loads((out / "results.json").read_text())
    record_file = out / "seed1" / "seed.json"
    record = json.loads(record_file.read_text())
    assert set(record["run"]["data"]) == {"sha256"}
    moved = tmp_path / "moved"
    data.rename(moved)
    monkeypatch.setattr(seeds_mod, "train_model", None)  # nothing may train
    assert main(finetune_argv(tiny_model, moved, out, "--seeds", "1")) == 0
    assert json.loads((out / "results.json").read_text())["seeds"] == before["seeds"]
    # a record of the earlier kind names the folder: the same folder is the same run
    write_atomic(record_file, json.dumps({**record, "run": {**record["run"],
                                                            "data": str(moved.resolve())}}))
    assert main(finetune_argv(tiny_model, moved, out, "--seeds", "1")) == 0
    write_atomic(record_file, json.dumps(record))  # back to the content's digest
    lines = (moved / "train.tsv").read_text().splitlines()
    (moved / "train.tsv").write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")
    capsys.readouterr()
    assert main(finetune_argv(tiny_model, moved, out, "--seeds", "1")) == 1
    assert "holds a fine-tuning run with other settings (data" in one_error_line(
        capsys.readouterr().err, "finetune")


def test_a_run_recorded_before_a_free_setting_existed_continues(
        tiny_model: Path, user_data: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings that change nothing a seed computes (where metrics are also reported) are left
    out of the comparison on both sides: a seed recorded with `tensorboard` and without
    `report_to` (an earlier electra) is read back, not refused."""
    out = tmp_path / "out"
    assert main(finetune_argv(tiny_model, user_data, out, "--seeds", "1")) == 0
    record_file = out / "seed1" / "seed.json"
    record = json.loads(record_file.read_text())
    settings = {**record["run"]["settings"], "tensorboard": False}
    write_atomic(record_file, json.dumps({**record, "run": {**record["run"],
                                                            "settings": settings}}))
    monkeypatch.setattr(seeds_mod, "train_model", None)  # nothing may train
    assert main(finetune_argv(tiny_model, user_data, out, "--seeds", "1",
                              "--report-to", "tensorboard")) == 0


def test_keep_best_rebuilds_the_best_of_the_finished_seeds(tmp_path: Path) -> None:
    """Ties keep the earlier seed, as `offer` does; OUT/model must hold the best finished seed
    (a rerun with fewer seeds than the run that kept it is refused)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "finetune.json").write_text(json.dumps({"seed": 2}))
    keep = seeds_mod.KeepBest(tmp_path, None, save_all=False)
    keep.restore({3: 0.75, 1: 0.5, 2: 0.75})
    assert (keep.best, keep.best_seed) == (0.75, 2)
    with pytest.raises(ElectraError, match=r"does not hold seed 1's model, the best of the "
                       r"finished seeds \[1\] \(it holds seed 2\); rerun with as many"):
        seeds_mod.KeepBest(tmp_path, None, save_all=False).restore({1: 0.5})
    (model / "config.json").unlink()
    with pytest.raises(ElectraError, match=r"\(it holds none\)"):
        seeds_mod.KeepBest(tmp_path, None, save_all=False).restore({2: 0.5})
    empty = seeds_mod.KeepBest(tmp_path, None, save_all=False)
    empty.restore({})
    assert empty.best is None


# --- the batch position -----------------------------------------------------------------------


def test_epoch_batches_restore_continues_a_stateful_sampler() -> None:
    """An epoch function whose state carries over epochs (as multi-task sampling's): restoring
    from (epochs begun, batches taken) replays it from the seed."""

    def make_epoch():
        carried = []

        def epoch(gen: torch.Generator) -> list[list[int]]:
            carried.append(int(torch.randint(0, 100, (1,), generator=gen)))
            order = torch.randperm(10, generator=gen).tolist()
            return [[sum(carried)] + order[i:i + 3] for i in range(0, 10, 3)]

        return epoch

    first = EpochBatches(make_epoch(), seed=7)
    taken = [next(first) for _ in range(6)]  # one epoch of 4 batches, then 2 of the next
    state = first.state()
    assert state == {"epochs": 2, "taken": 2}
    rest = [next(first) for _ in range(7)]
    again = EpochBatches(make_epoch(), seed=7)
    again.restore(state)
    assert [next(again) for _ in range(7)] == rest
    fresh = EpochBatches(make_epoch(), seed=7)
    assert [next(fresh) for _ in range(13)] == taken + rest


# --- gradient accumulation --------------------------------------------------------------------


def test_micro_batches_are_weighted_by_what_the_loss_averages_over() -> None:
    def collate(idx: list[int], progress: float) -> dict:
        return {"idx": idx, "progress": progress}

    labelled = {0: 1, 1: 0, 2: 3, 3: 4, 4: 2}  # labelled tokens per example

    def units(batch: dict) -> int:
        return sum(labelled[i] for i in batch["idx"])

    micro = micro_batches([0, 1, 2, 3, 4], collate, 0.5, 2, units)
    assert [(b["idx"], w) for b, w in micro] == [([0, 1], 1 / 10), ([2, 3], 7 / 10),
                                                 ([4], 2 / 10)]
    assert all(b["progress"] == 0.5 for b, _ in micro)
    labelled.update({0: 0, 1: 0})  # a micro-batch with nothing to average over is left out
    assert [b["idx"] for b, _ in micro_batches([0, 1, 2, 3, 4], collate, 0.0, 2, units)] == [
        [2, 3], [4]]


@pytest.fixture(scope="module")
def no_dropout_model(tmp_path_factory: pytest.TempPathFactory, vocab_dir: Path) -> Path:
    """A tiny encoder without dropout: accumulated micro-batches then compute the whole batch's
    gradient, up to the order of float sums."""
    torch.manual_seed(0)
    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    cfg = ModelConfig(vocab_size=vocab_size, embedding_size=32, hidden_size=32,
                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=128, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)
    model = Discriminator(cfg)
    init_weights(model, cfg.initializer_range)
    return save_pretrained(model, tmp_path_factory.mktemp("nodrop") / "disc", vocab_dir)


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(model_dir / "model.safetensors")


def assert_close_not_equal(a: dict, b: dict, start: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=0), k
    assert any(not torch.equal(a[k], start[k]) for k in a if k in start)  # it trained


@pytest.mark.parametrize("accum", [2, 4])
def test_grad_accum_gives_the_whole_batch_training(no_dropout_model: Path, user_data: Path,
                                                   tmp_path: Path, accum: int) -> None:
    """20 examples, batch 8: steps of 8, 8 and 4 examples, as micro-batches of 8 / accum."""
    def run(name: str, *extra: str) -> dict:
        out = tmp_path / name
        assert main(["finetune", "--model", str(no_dropout_model), "--task", "user",
                     "--text-a", "text", "--label", "label", "--data", str(user_data), "--out",
                     str(out), "--batch-size", "8", "--epochs", "2", "--max-train-examples",
                     "20", "--lr", "3e-3", "--precision", "fp32", "--quiet", "--set",
                     "finetune.dropout=0.0", *extra]) == 0
        res = json.loads((out / "results.json").read_text())
        assert res["seeds"][0]["steps"] == 6
        return weights(out / "model")

    whole = run("whole")
    accumulated = run("accum", "--grad-accum", str(accum))
    assert_close_not_equal(accumulated, whole, weights(no_dropout_model))


@pytest.mark.skipif(not (SHARED_DATA / "conll2000").is_dir(), reason="needs ../shared/data")
def test_grad_accum_of_a_tagging_task_weights_by_labelled_tokens(no_dropout_model: Path,
                                                                 tmp_path: Path) -> None:
    """Token-level cross-entropy averages over labelled tokens, which micro-batches of one
    step hold in unequal shares."""
    def run(name: str, *extra: str) -> dict:
        out = tmp_path / name
        assert main(["finetune", "--model", str(no_dropout_model), "--task", "chunk",
                     "--data", str(SHARED_DATA / "conll2000"), "--out", str(out),
                     "--batch-size", "8", "--epochs", "1", "--max-train-examples", "24",
                     "--max-eval-examples", "8", "--max-seq-len", "64", "--lr", "3e-3",
                     "--precision", "fp32", "--quiet", "--set", "finetune.dropout=0.0",
                     *extra]) == 0
        return weights(out / "model")

    assert_close_not_equal(run("accum", "--grad-accum", "2"), run("whole"),
                           weights(no_dropout_model))


def test_grad_accum_must_divide_the_batch(tiny_model: Path, user_data: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    assert main(finetune_argv(tiny_model, user_data, tmp_path / "o", "--grad-accum", "3")) == 1
    assert "--batch-size (8) must be divisible by --grad-accum (3)" in one_error_line(
        capsys.readouterr().err, "finetune")
    assert not (tmp_path / "o").exists()


# --- multitask shares the loop ----------------------------------------------------------------


def test_multitask_flags_reach_every_stage(tiny_model: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    """--grad-accum is checked against the multi-task batch and a Single stage's (32) before
    anything is read or written."""
    argv = ["multitask", "--model", str(tiny_model), "--tasks", "RTE", "--data",
            str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--save-every", "0"]
    assert main([*argv, "--batch-size", "16", "--grad-accum", "3"]) == 1
    assert "--batch-size (16) must be divisible by --grad-accum (3)" in one_error_line(
        capsys.readouterr().err, "multitask")
    assert main([*argv, "--grad-accum", "64", "--strategy", "single-multi"]) == 1
    assert "--batch-size (32) must be divisible by --grad-accum (64)" in one_error_line(
        capsys.readouterr().err, "multitask")
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def glue_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_glue_like(tmp_path_factory.mktemp("bam") / "data")


def multitask_settings(**kw) -> MultitaskSettings:
    return MultitaskSettings(**{**dict(epochs=2, batch_size=16, max_seq_len=32,
                                       eval_batch_size=32, log_every=1, precision="fp32"), **kw})


def test_multitask_resumes_in_its_second_epoch_exactly(tiny_model: Path, glue_like: Path,
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Task sampling carries state over epochs; SIGTERM in the second epoch, then the rerun."""
    tasks = ["CoLA", "RTE"]
    whole = run_multitask(tiny_model, tasks, glue_like, tmp_path / "whole", multitask_settings())
    steps = whole["seeds"][0]["steps"]
    real_step = training_mod.train_step
    calls = []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == steps - 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(*args, **kwargs)

    out = tmp_path / "out"
    with monkeypatch.context() as mp:
        mp.setattr(training_mod, "train_step", step)
        with pytest.raises(Preempted, match=f"after step {steps - 2} of {steps}"):
            run_multitask(tiny_model, tasks, glue_like, out, multitask_settings())
    resumed = run_multitask(tiny_model, tasks, glue_like, out, multitask_settings())
    for res in (resumed, whole):
        for entry in res["seeds"]:
            entry.pop("train_seconds")
    assert json.loads(json.dumps(resumed).replace(str(out), "OUT")) == json.loads(
        json.dumps(whole).replace(str(tmp_path / "whole"), "OUT"))
    assert (out / "seed1" / "metrics.jsonl").read_text() == (
        tmp_path / "whole" / "seed1" / "metrics.jsonl").read_text()
    got, want = weights(out / "model"), weights(tmp_path / "whole" / "model")
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_multitask_grad_accum_gives_the_whole_batch_training(no_dropout_model: Path,
                                                             glue_like: Path,
                                                             tmp_path: Path) -> None:
    settings = dict(dropout=0.0, lr=3e-3, max_train_examples=24)
    run_multitask(no_dropout_model, ["CoLA", "RTE"], glue_like, tmp_path / "whole",
                  multitask_settings(**settings))
    run_multitask(no_dropout_model, ["CoLA", "RTE"], glue_like, tmp_path / "accum",
                  multitask_settings(grad_accum=4, **settings))
    assert_close_not_equal(weights(tmp_path / "accum" / "model"),
                           weights(tmp_path / "whole" / "model"), weights(no_dropout_model))

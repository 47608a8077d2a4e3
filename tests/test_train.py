"""The pre-training loop end to end on a tiny model: exact resume, atomic and verified
checkpoints, the optimizer and schedule of the official implementation, metrics and FLOPs.

Runs go through `electra.cli.main` in-process (fp32, CPU), so what is tested is the command a
user types. An interruption is simulated by raising KeyboardInterrupt from a patched
checkpoint function, which is what Ctrl-C at that moment does.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from electra.cli import main
from electra.config import ModelConfig, ObjectiveConfig, PretrainConfig, TrainConfig, merge
from electra.errors import ElectraError
from electra.objectives import build_objective, objective_step_flops
from electra.pretraining import loop as loop_mod
from electra.runtime import checkpoint
from electra.runtime.metrics_log import is_heldout
from electra.runtime.optim import build_optimizer, build_scheduler, lr_multiplier

STEPS = 8
SAVE_EVERY = 2
BATCH = 8
WARMUP = 2
PEAK_LR = 1e-3
TINY = {
    "preset": "tiny",
    # embedding_size != hidden_size: the discriminator has an embeddings_project layer.
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"generator_multiplier": 0.5},
    "train": {"steps": STEPS, "batch_size": BATCH, "learning_rate": PEAK_LR,
              "warmup_steps": WARMUP, "log_every": 2, "save_every": SAVE_EVERY,
              "keep_checkpoints": 2, "seed": 3},
}


def tiny_config_file(directory: Path) -> Path:
    path = directory / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def pretrain_argv(config: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--config", str(config), "--data", str(data), "--out", str(out),
            "--quiet", *extra]


def read_metrics(out: Path, heldout: bool = False) -> list[dict[str, Any]]:
    """The training records of OUT/metrics.jsonl, or with `heldout` its held-out probes."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if is_heldout(r) == heldout]


def final_tensors(out: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {name: load_file(str(out / "final" / name / "model.safetensors"))
            for name in ("discriminator", "generator")}


def assert_bit_identical(a: Path, b: Path) -> None:
    ta, tb = final_tensors(a), final_tensors(b)
    for name in ta:
        assert ta[name].keys() == tb[name].keys()
        for key in ta[name]:
            assert torch.equal(ta[name][key], tb[name][key]), f"{name}: {key} differs"


def without_speed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records]


def without_notes(err: str) -> list[str]:
    """stderr's lines but the notes (`note: ...`, e.g. what --bf16 would give here)."""
    return [line for line in err.splitlines() if not line.startswith("note: ")]


def one_error_line(err: str, command: str) -> str:
    lines = without_notes(err)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"electra {command}: error:"), lines[0]
    return lines[0]


class Recorder:
    """Records the micro-batches the loop consumes and what gradient clipping did."""

    def __init__(self) -> None:
        self.batches: list[torch.Tensor] = []
        self.clips: list[tuple[float, float, float]] = []  # (max_norm, raw norm, after)

    def patch(self, mp: pytest.MonkeyPatch) -> None:
        real_iterate = loop_mod.iterate_batches
        real_clip = torch.nn.utils.clip_grad_norm_

        def iterate(*args, **kwargs):
            for batch in real_iterate(*args, **kwargs):
                self.batches.append(batch["input_ids"].clone())
                yield batch

        def clip(parameters, max_norm, *args, **kwargs):
            parameters = list(parameters)
            raw = real_clip(parameters, max_norm, *args, **kwargs)
            after = torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(p.grad) for p in parameters if p.grad is not None]))
            self.clips.append((float(max_norm), float(raw), float(after)))
            return raw

        mp.setattr(loop_mod, "iterate_batches", iterate)
        mp.setattr(torch.nn.utils, "clip_grad_norm_", clip)


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_config_file(tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="module")
def run_a(tmp_path_factory, tiny_config: Path, data_dir: Path) -> tuple[Path, Recorder]:
    """The reference: STEPS uninterrupted steps, a checkpoint every SAVE_EVERY."""
    out = tmp_path_factory.mktemp("run_a") / "out"
    recorder = Recorder()
    with pytest.MonkeyPatch.context() as mp:
        recorder.patch(mp)
        assert main(pretrain_argv(tiny_config, data_dir, out)) == 0
    return out, recorder


# --- resume -------------------------------------------------------------------------------


def _interrupt_after_commit(mp: pytest.MonkeyPatch, step: int) -> None:
    real = checkpoint.commit

    def commit(tmp, out_dir, s, meta, keep, **kwargs):
        final = real(tmp, out_dir, s, meta, keep, **kwargs)
        if s == step:
            raise KeyboardInterrupt
        return final

    mp.setattr(checkpoint, "commit", commit)


def _interrupt_mid_write(mp: pytest.MonkeyPatch, step: int) -> None:
    """Killed while trainer.pt is being written: the file exists but is cut short."""
    real = checkpoint.write_main

    def write_main(tmp, model, optimizer, scheduler, s, **kw):
        real(tmp, model, optimizer, scheduler, s, **kw)
        if s == step:
            path = tmp / "trainer.pt"
            path.write_bytes(path.read_bytes()[:100])
            raise KeyboardInterrupt

    mp.setattr(checkpoint, "write_main", write_main)


def _interrupt_before_pointer(mp: pytest.MonkeyPatch, step: int) -> None:
    """Killed after the checkpoint directory is renamed into place but before `latest`
    moves to it."""
    real_replace = os.replace  # `latest` moves by electra.fileutil.write_atomic

    def replace(src, dst):
        if Path(dst).name == checkpoint.LATEST and Path(src).read_text().strip().endswith(
                f"{step:08d}"):
            raise KeyboardInterrupt
        return real_replace(src, dst)

    mp.setattr(os, "replace", replace)


INTERRUPTIONS: dict[str, tuple[Callable[[pytest.MonkeyPatch, int], None], int, int]] = {
    # name: (how, the step it happens at, the step the resume starts from)
    "after_checkpoint": (_interrupt_after_commit, STEPS // 2, STEPS // 2),
    "mid_write": (_interrupt_mid_write, STEPS // 2, STEPS // 2 - SAVE_EVERY),
    "before_latest_moves": (_interrupt_before_pointer, STEPS // 2, STEPS // 2 - SAVE_EVERY),
    # The last checkpoint is written, the export is not: resuming only exports.
    "before_export": (_interrupt_after_commit, STEPS, STEPS),
}


@pytest.mark.parametrize("how", list(INTERRUPTIONS))
def test_interrupted_run_resumes_bit_exactly(how, run_a, tiny_config, data_dir, tmp_path,
                                             capsys):
    """Run B = run A's command interrupted (at step STEPS/2 but for `before_export`), then
    `--resume`: the final weights of both networks are bit-identical and every logged metric
    but speed is equal."""
    out_a, _ = run_a
    out_b = tmp_path / "out_b"
    interrupt, at, resumed_from = INTERRUPTIONS[how]
    with pytest.MonkeyPatch.context() as mp:
        interrupt(mp, at)
        assert main(pretrain_argv(tiny_config, data_dir, out_b)) == 130
    root = checkpoint.checkpoint_root(out_b)
    assert (root / checkpoint.LATEST).read_text().strip() == f"step_{resumed_from:08d}"
    assert checkpoint.find_latest(out_b) == root / f"step_{resumed_from:08d}"
    assert not (out_b / "final").exists()
    if how == "mid_write":  # the half-written checkpoint is there, but not as `latest`
        assert (root / f".step_{STEPS // 2:08d}.tmp" / "model.safetensors").is_file()
    if how == "before_latest_moves":  # renamed into place, but `latest` never moved
        assert (root / f"step_{STEPS // 2:08d}" / checkpoint.META).is_file()

    capsys.readouterr()
    assert main(pretrain_argv(tiny_config, data_dir, out_b, "--resume")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == STEPS
    assert summary["timed_steps"] == STEPS - resumed_from  # train_seconds times this call only
    assert_bit_identical(out_a, out_b)
    assert without_speed(read_metrics(out_b)) == without_speed(read_metrics(out_a))
    assert not list(root.glob(".*tmp*"))  # the interrupted write was cleaned up


def test_leftover_temporary_checkpoint_is_never_latest(run_a, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(run_a[0], out)
    root = checkpoint.checkpoint_root(out)
    # A complete-looking directory that was never committed (killed before its rename).
    shutil.copytree(root / f"step_{STEPS:08d}", root / f".step_{STEPS + 2:08d}.tmp")
    (root / f".{checkpoint.LATEST}.tmp").write_text(f".step_{STEPS + 2:08d}.tmp\n")
    assert checkpoint.find_latest(out) == root / f"step_{STEPS:08d}"


def test_keep_checkpoints(run_a):
    root = checkpoint.checkpoint_root(run_a[0])
    kept = sorted(p.name for p in root.iterdir())
    assert kept == [checkpoint.LATEST, f"step_{STEPS - SAVE_EVERY:08d}", f"step_{STEPS:08d}"]
    meta = json.loads((root / f"step_{STEPS:08d}" / checkpoint.META).read_text())
    assert meta["step"] == STEPS and meta["world_size"] == 1
    assert set(meta["files"]) == set(meta["sha256"]) == {
        "model.safetensors", "trainer.pt", "rng_rank0.pt"}


def test_grad_accum_keeps_examples_per_step(run_a, tiny_config, data_dir, tmp_path):
    """batch_size is examples per optimizer step: with grad_accum=2 each step is two
    micro-batches of batch_size/2 whose rows are exactly the grad_accum=1 step's batch."""
    out_a, rec_a = run_a
    steps = 2
    recorder = Recorder()
    out = tmp_path / "accum"
    with pytest.MonkeyPatch.context() as mp:
        recorder.patch(mp)
        assert main(pretrain_argv(tiny_config, data_dir, out, "--grad-accum", "2",
                                  "--steps", str(steps))) == 0
    assert [b.shape[0] for b in recorder.batches] == [BATCH // 2] * (2 * steps)
    assert len(recorder.clips) == steps
    for step in range(steps):
        merged = torch.cat(recorder.batches[2 * step: 2 * step + 2])
        assert torch.equal(merged, rec_a.batches[step])
    assert read_metrics(out)[-1]["flops"] == read_metrics(out_a)[0]["flops"]


# --- damaged checkpoints ------------------------------------------------------------------


def _latest_dir(out: Path) -> Path:
    return checkpoint.checkpoint_root(out) / f"step_{STEPS:08d}"


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _scribble(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at: at + 16] = b"\x7f" * 16
    path.write_bytes(bytes(data))


def _drop_digests(d: Path) -> None:
    meta = json.loads((d / checkpoint.META).read_text())
    del meta["sha256"]
    (d / checkpoint.META).write_text(json.dumps(meta))


def _corrupt_header_no_digests(d: Path) -> None:
    _scribble(d / "model.safetensors", 20)  # inside the JSON header
    _drop_digests(d)  # so that the loader itself must notice


DAMAGES: dict[str, Callable[[Path], None]] = {
    "truncated_model": lambda d: _truncate(d / "model.safetensors"),
    "flipped_weights": lambda d: _scribble(d / "model.safetensors",
                                           (d / "model.safetensors").stat().st_size // 2),
    "corrupt_header": _corrupt_header_no_digests,
    "corrupt_trainer_state": lambda d: (_scribble(d / "trainer.pt", 0), _drop_digests(d)),
    "missing_trainer_state": lambda d: (d / "trainer.pt").unlink(),
    "missing_rng": lambda d: (d / "rng_rank0.pt").unlink(),
    "missing_meta": lambda d: (d / checkpoint.META).unlink(),
    "missing_directory": lambda d: shutil.rmtree(d),
}


def _load_latest(out: Path) -> int:
    """Resume the library way: find the latest checkpoint, load it into a fresh objective."""
    cfg = PretrainConfig()
    merge(cfg, json.loads((out / "settings.json").read_text()))
    objective = build_objective(cfg.model, cfg.objective)
    optimizer = build_optimizer(objective, cfg.train)
    scheduler = build_scheduler(optimizer, cfg.train)
    return checkpoint.load(checkpoint.find_latest(out), objective, optimizer, scheduler, 0,
                           world_size=1)


def test_intact_checkpoint_loads(run_a):
    assert _load_latest(run_a[0]) == STEPS


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_checkpoint_is_one_line_error(damage, run_a, tiny_config, data_dir, tmp_path,
                                              capsys):
    """A damaged latest checkpoint is an ElectraError naming it, never a traceback and never
    a silent load; through the CLI, exit status 1 and one line on stderr."""
    out = tmp_path / "out"
    shutil.copytree(run_a[0], out)
    target = _latest_dir(out)
    DAMAGES[damage](target)
    with pytest.raises(ElectraError) as info:
        _load_latest(out)
    assert str(target) in str(info.value) and "\n" not in str(info.value)

    capsys.readouterr()
    argv = pretrain_argv(tiny_config, data_dir, out, "--resume", "--steps", str(STEPS + 2))
    assert main(argv) == 1
    line = one_error_line(capsys.readouterr().err, "pretrain")
    assert str(target) in line


def test_resume_with_other_world_size_is_refused(run_a, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(run_a[0], out)
    cfg = PretrainConfig()
    merge(cfg, json.loads((out / "settings.json").read_text()))
    objective = build_objective(cfg.model, cfg.objective)
    optimizer = build_optimizer(objective, cfg.train)
    scheduler = build_scheduler(optimizer, cfg.train)
    with pytest.raises(ElectraError, match="different number of processes"):
        checkpoint.load(checkpoint.find_latest(out), objective, optimizer, scheduler, 0,
                        world_size=2)


# --- optimizer and schedule ---------------------------------------------------------------


def _tiny_pretrain_config() -> PretrainConfig:
    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg, {k: v for k, v in TINY.items() if k != "preset"})
    cfg.model.vocab_size = 100
    cfg.validate()
    return cfg


def test_adamw_hyperparameters_and_weight_decay_by_name():
    """Official AdamWeightDecayOptimizer settings: betas 0.9/0.999, eps 1e-6, decay 0.01 on
    every matrix and embedding, none on LayerNorm weights and biases (matched by name, as
    exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])."""
    cfg = _tiny_pretrain_config()
    objective = build_objective(cfg.model, cfg.objective)
    optimizer = build_optimizer(objective, cfg.train)
    decay_of = {}
    for group in optimizer.param_groups:
        assert group["betas"] == (0.9, 0.999) and group["eps"] == 1e-6
        assert group["lr"] == cfg.train.learning_rate  # the peak; the schedule scales it
        for p in group["params"]:
            assert id(p) not in decay_of, "a parameter is in two groups"
            decay_of[id(p)] = group["weight_decay"]
    named = list(objective.named_parameters())  # shared embeddings are listed once
    assert len(decay_of) == len(named)
    seen_embeddings = 0
    for name, param in named:
        excluded = any(k in name for k in ("LayerNorm", "layer_norm", "_norm.")) or \
            name.endswith("bias")
        assert decay_of[id(param)] == (0.0 if excluded else 0.01), name
        if "embeddings." in name and name.endswith("_embeddings.weight"):
            seen_embeddings += 1
            assert decay_of[id(param)] == 0.01
    assert seen_embeddings == 3  # word, position, token type: shared by both networks


def _official_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """google-research/electra model/optimization.py: polynomial_decay(power=1) of the global
    step times min(1, global_step / warmup_steps)."""
    return peak * max(0.0, 1.0 - min(step, total) / total) * min(1.0, step / warmup)


def test_lr_schedule_is_linear_warmup_then_linear_decay():
    peak, warmup, total = 2e-3, 4, 10
    tc = TrainConfig(steps=total, warmup_steps=warmup, learning_rate=peak)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2, 2))], lr=peak)
    scheduler = build_scheduler(optimizer, tc)
    seen = []
    for step in range(total + 3):
        lr = optimizer.param_groups[0]["lr"]
        seen.append(lr)
        assert lr == pytest.approx(_official_lr(step, peak, warmup, total), abs=1e-15)
        assert lr == pytest.approx(peak * lr_multiplier(step, warmup, total), abs=1e-15)
        optimizer.step()
        scheduler.step()
    # Hand-computed points: 0 at the first update, half-way up the warm-up, the peak times
    # the decay at the end of warm-up, then linearly down to exactly 0 at `total`.
    assert seen[0] == 0.0
    assert seen[2] == pytest.approx(peak * 0.5 * 0.8)
    assert seen[4] == pytest.approx(peak * 0.6)
    assert seen[7] == pytest.approx(peak * 0.3)
    assert seen[total:] == [0.0, 0.0, 0.0]
    assert all(a < b for a, b in zip(seen[:warmup], seen[1:warmup + 1], strict=True))
    assert all(a > b for a, b in zip(seen[warmup:total], seen[warmup + 1:total + 1],
                                     strict=True))
    assert lr_multiplier(5, 0, 10) == 0.5  # no warm-up: decay only


def test_logged_lr_follows_the_schedule(run_a):
    """The lr logged at step s is the one its update used: the schedule at global step s-1."""
    for record in read_metrics(run_a[0]):
        assert record["lr"] == pytest.approx(
            _official_lr(record["step"] - 1, PEAK_LR, WARMUP, STEPS), abs=1e-15)


def test_gradients_are_clipped_to_global_norm_one(run_a):
    clips = run_a[1].clips
    assert len(clips) == STEPS
    assert all(max_norm == 1.0 for max_norm, _, _ in clips)
    assert any(raw > 1.0 for _, raw, _ in clips), "no step had a norm above 1 to clip"
    for _, raw, after in clips:
        if raw > 1.0:
            assert after <= 1.0 + 1e-5
        else:
            assert after == pytest.approx(raw, rel=1e-5)


# --- metrics ------------------------------------------------------------------------------


def test_metrics_have_every_field_and_cumulative_flops(run_a, data_dir):
    out = run_a[0]
    records = read_metrics(out)
    assert [r["step"] for r in records] == [2, 4, 6, 8]
    saved = json.loads((out / "settings.json").read_text())
    model = ModelConfig(**saved["model"])
    assert model.vocab_size == json.loads((data_dir / "manifest.json").read_text())[
        "vocab_size"]
    per_step = sum(objective_step_flops(model, ObjectiveConfig(**saved["objective"]),
                                        BATCH, 32).values())
    for r in records:
        for key in ("step", "loss", "gen_loss", "disc_loss", "disc_acc", "lr", "tokens_per_s",
                    "flops"):
            assert isinstance(r[key], (int, float)), key
        assert r["flops"] == r["step"] * per_step
        assert r["tokens_per_s"] > 0
        assert 0.0 <= r["disc_acc"] <= 1.0
        assert r["loss"] == pytest.approx(r["gen_loss"] + 50.0 * r["disc_loss"], rel=1e-5)

"""Two CPU processes under torchrun (gloo): one run, one metrics file, one export, and the
global-batch semantics of `train.batch_size` (examples per optimizer step, all processes).

Not tested: that 2 processes x B/2 give the first-step loss of 1 process x B. They cannot:
each rank seeds its own masking, sampling and dropout stream (seed * 1000 + rank), so rank 1
masks its half of the batch with different random numbers than the single process does. What
is exactly comparable, and tested, is which examples make up each step, and the FLOPs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from electra.cli import main
from electra.config import ModelConfig, ObjectiveConfig
from electra.data.dataset import PretrainingDataset, iterate_batches
from electra.model.hf import load_pretrained
from electra.model.networks import Discriminator, Generator
from electra.objectives import objective_step_flops
from electra.runtime import checkpoint
from electra.runtime.metrics_log import is_heldout

STEPS, BATCH, ACCUM, SEED = 4, 8, 2, 3
TINY = {
    "preset": "tiny",
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"generator_multiplier": 0.5},
    "train": {"steps": STEPS, "batch_size": BATCH, "grad_accum": ACCUM, "warmup_steps": 1,
              "log_every": 2, "save_every": 2, "seed": SEED},
}

# Runs the CLI under torchrun, saving every micro-batch each rank consumed.
RECORDING_LAUNCHER = '''
import sys
from pathlib import Path

import torch

from electra.cli import main
from electra.pretraining import loop

record_dir = Path(sys.argv[1])
real_iterate = loop.iterate_batches


def iterate(*args, **kwargs):
    seen = []
    for batch in real_iterate(*args, **kwargs):
        seen.append(batch["input_ids"].clone())
        torch.save(seen, record_dir / f"batches_rank{kwargs['rank']}.pt")
        yield batch


loop.iterate_batches = iterate
sys.exit(main(sys.argv[2:]))
'''


def pretrain_argv(config: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--config", str(config), "--data", str(data), "--out", str(out),
            "--quiet", "--device", "cpu", *extra]


def read_metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if not is_heldout(r)]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("ddp")
    config = root / "tiny.json"
    config.write_text(json.dumps(TINY))
    launcher = root / "launch.py"
    launcher.write_text(RECORDING_LAUNCHER)
    out = root / "out"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    # Without --quiet: stderr is a pipe, so the progress comes as lines (test below).
    argv = [a for a in pretrain_argv(config, data_dir, out) if a != "--quiet"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", str(launcher), str(root), *argv]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (root / "stderr.txt").write_text(proc.stderr)
    return out, root, config


def test_only_the_main_process_writes_progress_lines(ddp_run):
    _, root, _ = ddp_run
    lines = [line for line in (root / "stderr.txt").read_text().splitlines()
             if line.startswith("pretrain step ")]
    assert [line.split(" | ")[0] for line in lines] == [
        "pretrain step 2/4 (50%)", "pretrain step 4/4 (100%)"], lines


def test_two_processes_write_one_run(ddp_run):
    out, _, _ = ddp_run
    records = read_metrics(out)
    assert [r["step"] for r in records] == [2, 4]  # one line per logged step, not per rank
    root = checkpoint.checkpoint_root(out)
    meta = checkpoint.verify(checkpoint.find_latest(out))
    assert meta["step"] == STEPS and meta["world_size"] == 2
    assert {"rng_rank0.pt", "rng_rank1.pt"} <= set(meta["files"])
    assert not list(root.glob(".*tmp*"))
    for name, cls in (("discriminator", Discriminator), ("generator", Generator)):
        model = load_pretrained(out / "final" / name)
        assert type(model) is cls
    transformers = pytest.importorskip("transformers")
    _, info = transformers.ElectraForPreTraining.from_pretrained(
        out / "final" / "discriminator", output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))


def test_batch_size_is_global_over_processes_and_accumulation(ddp_run, data_dir):
    """Rank r's micro-batch m of step s holds rows [r*B', (r+1)*B') of global micro-batch
    s*ACCUM + m (B' = BATCH / (2 * ACCUM)); together, step s is exactly the batch of BATCH
    examples that a single process without accumulation takes at step s."""
    _, root, _ = ddp_run
    per_rank = [torch.load(root / f"batches_rank{r}.pt") for r in (0, 1)]
    micro = BATCH // (2 * ACCUM)
    assert all(len(seen) == STEPS * ACCUM for seen in per_rank)
    assert all(b.shape[0] == micro for seen in per_rank for b in seen)
    single = iterate_batches(PretrainingDataset(data_dir), BATCH, SEED)
    for step in range(STEPS):
        rows = [per_rank[r][step * ACCUM + m] for m in range(ACCUM) for r in (0, 1)]
        assert torch.equal(torch.cat(rows), next(single)["input_ids"]), f"step {step + 1}"


def test_flops_count_the_global_batch(ddp_run, data_dir, tmp_path):
    out, _, config = ddp_run
    saved = json.loads((out / "settings.json").read_text())
    model = ModelConfig(**saved["model"])
    per_step = sum(objective_step_flops(model, ObjectiveConfig(**saved["objective"]),
                                        BATCH, 32).values())
    records = read_metrics(out)
    assert [r["flops"] for r in records] == [r["step"] * per_step for r in records]
    # The same command in one process logs the same FLOPs at the same steps.
    single = tmp_path / "single"
    assert main(pretrain_argv(config, data_dir, single)) == 0
    assert [r["flops"] for r in read_metrics(single)] == [r["flops"] for r in records]


def test_resume_with_one_process_is_a_clear_error(ddp_run, data_dir, capsys):
    out, _, config = ddp_run
    before = (out / "settings.json").read_bytes()
    capsys.readouterr()
    assert main(pretrain_argv(config, data_dir, out, "--resume", "--steps", "6")) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("electra pretrain: error:")
    assert "different number of processes" in lines[0]
    assert (out / "settings.json").read_bytes() == before


def test_continued_pre_training_under_two_processes(ddp_run, data_dir, tmp_path):
    """--init-from under torchrun: every rank starts from the finished run's weights, and the
    continued run writes one config (with its starting point), one log and one export."""
    first, _, _ = ddp_run
    out = tmp_path / "continued"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", "-m", "electra.cli", "pretrain", "--init-from", str(first), "--data",
           str(data_dir), "--out", str(out), "--steps", "2", "--batch-size", "4",
           "--log-every", "1", "--eval-every", "0", "--quiet", "--device", "cpu"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["init"]["from"] == str(first / "final" / "discriminator")
    settings = json.loads((out / "settings.json").read_text())
    assert settings["model"]["hidden_size"] == TINY["model"]["hidden_size"]
    assert [r["step"] for r in read_metrics(out)] == [1, 2]
    assert load_pretrained(out / "final" / "discriminator").config.hidden_size == 32

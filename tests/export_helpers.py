"""Small models of every kind electra exports, written as electra writes them (shared by the
transformers and ONNX export tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from electra.config import ModelConfig
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.model_io import save_finetuned
from electra.model.encoder import Encoder, init_weights
from electra.tasks import get_task


def small_config(vocab_dir: Path, alibi: bool) -> ModelConfig:
    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    return ModelConfig(vocab_size=vocab_size, embedding_size=16, hidden_size=32,
                       num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       max_position_embeddings=64,
                       **({"position_bias": "alibi", "alibi_max_slope": 1.0} if alibi else {}))


def task_named(name: str):
    """A task by name; "regression" is STS-B with the multi-task sigmoid head (labels
    normalised from [0, 5], dissertation section 3.2.1)."""
    task = get_task("STS-B" if name == "regression" else name)
    if name == "chunk":
        task.labels = ["B-NP", "B-VP", "I-NP", "O"]
    if name == "regression":
        task.label_range = (0.0, 5.0)
    return task


def finetuned_model(vocab_dir: Path, task_name: str, alibi: bool) -> tuple[FinetuneModel, dict]:
    """A randomly initialised fine-tuned model (eval mode) and its finetune.json."""
    torch.manual_seed(1)
    task = task_named(task_name)
    encoder = Encoder(small_config(vocab_dir, alibi))
    model = FinetuneModel(encoder, task.head_kind, task.num_outputs)
    init_weights(model, 0.02)
    info = {"task": task.state(), "head_kind": task.head_kind,
            "num_outputs": task.num_outputs, "settings": {"max_seq_len": 64}}
    return model.eval(), info


def finetuned_dir(root: Path, vocab_dir: Path, task_name: str, alibi: bool) -> Path:
    model, info = finetuned_model(vocab_dir, task_name, alibi)
    return save_finetuned(model, root / f"{task_name}-{'alibi' if alibi else 'abs'}",
                          vocab_dir, info)


def run_isolated(script: str, args: list[str], tmp_path: Path) -> dict:
    """Run `script` in a fresh interpreter (`-I`: no PYTHONPATH, no working-directory imports).
    electra stays installed in this environment, so the scripts report whether anything
    imported it."""
    path = tmp_path / "isolated.py"
    path.write_text(script)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": "",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run([sys.executable, "-I", str(path), *args], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

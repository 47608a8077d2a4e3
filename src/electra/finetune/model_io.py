"""Loading pre-trained encoders for fine-tuning and saving/loading fine-tuned models.

A fine-tuned model directory is a Hugging Face ELECTRA directory (config.json with
architectures ["ElectraModel"], model.safetensors with the encoder under `electra.`, tokenizer
files) plus the head under `task_head.` and finetune.json (task, labels, settings, scores), so
`transformers.ElectraModel.from_pretrained` loads its encoder and `electra evaluate/predict`
load all of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from electra.errors import ElectraError
from electra.fileutil import staged_dir
from electra.finetune.heads import FinetuneModel, MultitaskModel, make_head
from electra.model.encoder import Encoder
from electra.model.hf import (
    _load_strict,
    encoder_from_hf,
    encoder_to_hf,
    hf_config,
    read_model_dir,
)
from electra.tokenizer import copy_tokenizer_files, load_tokenizer

FINETUNE_FILE = "finetune.json"


def check_model_dir(model_dir: str | Path) -> None:
    """One error listing everything a model directory lacks (config, weights, tokenizer)."""
    d = Path(model_dir)
    if not d.is_dir():
        raise ElectraError(f"{d}: model directory does not exist")
    missing = []
    if not (d / "config.json").is_file():
        missing.append("config.json")
    if not ((d / "model.safetensors").is_file() or (d / "pytorch_model.bin").is_file()):
        missing.append("model.safetensors (or pytorch_model.bin)")
    if not ((d / "tokenizer.json").is_file() or (d / "vocab.txt").is_file()):
        missing.append("tokenizer files (tokenizer.json or vocab.txt)")
    if missing:
        raise ElectraError(f"{d}: not a usable model directory, missing {', '.join(missing)}")


def load_source(model_dir: str | Path):
    """(encoder, tokenizer, config.json dict) of a pre-trained or fine-tuned directory."""
    check_model_dir(model_dir)
    cfg, raw, state = read_model_dir(model_dir)
    encoder = Encoder(cfg)
    _load_strict(encoder, encoder_from_hf(state, cfg.num_hidden_layers), model_dir)
    return encoder, load_tokenizer(model_dir), raw


def read_finetune_info(model_dir: str | Path) -> dict:
    path = Path(model_dir) / FINETUNE_FILE
    if not path.is_file():
        raise ElectraError(f"{model_dir}: no {FINETUNE_FILE} (not a fine-tuned model directory; "
                           "fine-tune it first with `electra finetune`)")
    return json.loads(path.read_text())


def load_finetuned(model_dir: str | Path
                   ) -> tuple[FinetuneModel | MultitaskModel, object, dict]:
    """(model with its head(s), tokenizer, finetune.json) of a directory written by
    `save_finetuned`: a FinetuneModel, or a MultitaskModel when finetune.json lists "tasks"."""
    info = read_finetune_info(model_dir)
    check_model_dir(model_dir)
    cfg, _, state = read_model_dir(model_dir)
    encoder = Encoder(cfg)
    if "tasks" in info:
        model = MultitaskModel(encoder, {
            t["task"]["name"]: make_head(t["head_kind"], cfg.hidden_size, t["num_outputs"], 0.1,
                                         cfg.initializer_range) for t in info["tasks"]})
    else:
        model = FinetuneModel(encoder, info["head_kind"], info["num_outputs"])
    _load_strict(model.encoder, encoder_from_hf(state, cfg.num_hidden_layers), model_dir)
    prefix = "task_heads." if "tasks" in info else "task_head."
    _load_strict(getattr(model, prefix[:-1]), {k[len(prefix):]: v for k, v in state.items()
                                               if k.startswith(prefix)}, model_dir)
    return model, load_tokenizer(model_dir), info


def save_finetuned(model: FinetuneModel | MultitaskModel, out_dir: str | Path,
                   tokenizer_dir: str | Path, info: dict) -> Path:
    out = Path(out_dir)
    with staged_dir(out) as tmp:
        cfg = hf_config(model.encoder.config, "ElectraModel")
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        state = encoder_to_hf(model.encoder.state_dict())
        state.update({k: v for k, v in model.state_dict().items()
                      if not k.startswith("encoder.")})  # task_head.* or task_heads.<task>.*
        state = {k: v.detach().to("cpu", torch.float32).contiguous().clone()
                 for k, v in state.items()}
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        copy_tokenizer_files(tokenizer_dir, tmp)
        (tmp / FINETUNE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out

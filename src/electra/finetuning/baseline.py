"""The random-initialisation baseline every transfer comparison needs: a model directory's
architecture and tokenizer with fresh weights, so that only the weights differ."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from electra.fileutil import sha256_file, write_atomic
from electra.model.card import RunFacts, write_model_card
from electra.model.encoder import init_weights
from electra.model.hf import read_model_dir, save_pretrained
from electra.model.networks import Discriminator

# A model directory's files besides its weights: what a random init copies from its source.
CONFIG_FILES = ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json")


def random_init(model_dir: Path, out_dir: Path, seed: int) -> Path:
    """The pre-trained model's architecture with fresh weights (`init_weights`, as pre-training
    starts) and its tokenizer files. Written once: OUT_DIR/init.json records the seed and the
    source's config and tokenizer files, and a matching directory is left as it is (so models
    sharing a baseline never rewrite it under each other)."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    record = {"seed": seed, "sha256": {f: sha256_file(model_dir / f) for f in CONFIG_FILES
                                       if (model_dir / f).is_file()}}
    marker = out_dir / "init.json"
    if marker.is_file() and json.loads(marker.read_text()) == record \
            and (out_dir / "model.safetensors").is_file():
        return out_dir
    cfg, _, _ = read_model_dir(model_dir)
    torch.manual_seed(seed)
    model = Discriminator(cfg)
    init_weights(model, cfg.initializer_range)
    save_pretrained(model, out_dir, model_dir)
    write_atomic(marker, json.dumps(record, indent=2) + "\n")
    write_model_card(out_dir, RunFacts(base_model=str(model_dir)))
    return out_dir

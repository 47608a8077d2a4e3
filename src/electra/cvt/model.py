"""The CVT model: one shared encoder, one head (primary + auxiliary modules) per task, and
the saved-model directory (config.json, vocab.json, model.safetensors holding the EMA
weights, written atomically)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from electra.cvt.config import CVTConfig, make_config
from electra.cvt.encoder import Encoder, tf_init_
from electra.cvt.parsing import ParsingHead
from electra.cvt.tagging import TaggingHead
from electra.cvt.tasks import CVTTask
from electra.cvt.vocab import Vocab
from electra.errors import ElectraError
from electra.fileutil import staged_dir


class CVTModel(nn.Module):
    def __init__(self, cfg: CVTConfig, vocab: Vocab, tasks: list[CVTTask]):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg, len(vocab.words), len(vocab.chars))
        d1, full = self.encoder.d1, self.encoder.full_dim
        heads: dict[str, nn.Module] = {}
        for task in tasks:
            if task.kind == "dep":
                heads[task.name] = ParsingHead(
                    len(task.labels), d1, full, cfg.dep_projection, cfg.full_view_aux,
                    hidden=cfg.hidden if cfg.parser_hidden_layer else 0)
            else:
                heads[task.name] = TaggingHead(len(task.labels), d1, full, cfg.hidden,
                                               cfg.full_view_aux)
        self.heads = nn.ModuleDict(heads)
        if cfg.tf_init:  # after the heads exist: their layers start as tf.layers.dense does
            tf_init_(self)

    def encode(self, batch: dict[str, torch.Tensor], keep: float):
        return self.encoder(batch["words"], batch["chars"], batch["lengths"], keep=keep)


def save_model_dir(out: Path, model: CVTModel, state: dict[str, torch.Tensor],
                   vocab: Vocab, tasks: list[CVTTask]) -> Path:
    """Write `state` (the EMA weights) with everything needed to rebuild the model."""
    config = {"model_type": "electra-cvt", "cvt": model.cfg.to_dict(),
              "tasks": {t.name: {"kind": t.kind, "labels": t.labels} for t in tasks}}
    with staged_dir(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / "vocab.json").write_text(json.dumps(vocab.to_json()) + "\n")
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()},
                  str(tmp / "model.safetensors"))
    return out


def load_model_dir(path: str | Path) -> tuple[CVTModel, Vocab, list[CVTTask]]:
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
        vocab = Vocab.from_json(json.loads((path / "vocab.json").read_text()))
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise ElectraError(f"{path}: not a CVT model directory ({e})") from None
    if config.get("model_type") != "electra-cvt":
        raise ElectraError(f"{path}: not a CVT model directory (model_type "
                           f"{config.get('model_type')!r})")
    # Models saved before these options existed have neither <start>/<end> parameters nor
    # the parser's hidden layers.
    cfg = make_config("paper", {"boundary_tokens": False, "parser_hidden_layer": False,
                                **config["cvt"]})
    tasks = []
    for name, spec in config["tasks"].items():
        task = CVTTask(name)
        task.labels = list(spec["labels"])
        tasks.append(task)
    model = CVTModel(cfg, vocab, tasks)
    model.load_state_dict(load_file(str(path / "model.safetensors")))
    model.eval()
    return model, vocab, tasks

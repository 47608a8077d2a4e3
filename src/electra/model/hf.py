"""Hugging Face compatible model directories: config.json + model.safetensors + tokenizer.

Export writes what `transformers.ElectraForPreTraining` / `ElectraForMaskedLM` load without
conversion; import reads local ELECTRA or BERT directories (no hub) into our encoder.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from electra.config import POSITION_BIASES, ModelConfig
from electra.errors import ElectraError
from electra.fileutil import staged_dir
from electra.model.encoder import Discriminator, Encoder, Generator

# Our per-layer module names -> Hugging Face's (BERT/ELECTRA) names. `attention.qkv` is our
# fused Q/K/V projection; it is split into query/key/value on export.
_LAYER_RENAMES = {
    "attention_out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "ffn_in": "intermediate.dense",
    "ffn_out": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
_QKV = ("query", "key", "value")
ARCHITECTURES = {Discriminator: "ElectraForPreTraining", Generator: "ElectraForMaskedLM"}


def hf_config(cfg: ModelConfig, architecture: str, extra: dict | None = None) -> dict:
    """An ElectraConfig dict (`transformers` reads it as it is)."""
    out = {
        "architectures": [architecture],
        "model_type": "electra",
        "hidden_act": "gelu",
        # Our extension ("alibi") goes here, where `transformers` reads position schemes.
        "position_embedding_type": "absolute" if cfg.position_bias == "none"
        else cfg.position_bias,
        "tie_word_embeddings": True,
        **{k: getattr(cfg, k) for k in ModelConfig.__dataclass_fields__
           if k != "position_bias"},
    }
    if extra:
        out["electra_toolkit"] = extra
    return out


def model_config_from_hf(data: dict, where: str = "config.json") -> ModelConfig:
    """Our ModelConfig from an ELECTRA or BERT config.json."""
    model_type = data.get("model_type")
    if model_type not in ("electra", "bert"):
        raise ElectraError(f"{where}: model_type {model_type!r} is not 'electra' or 'bert'")
    if data.get("hidden_act", "gelu") != "gelu":
        raise ElectraError(f"{where}: hidden_act {data['hidden_act']!r} is not supported "
                           "(only exact gelu)")
    position = data.get("position_embedding_type", "absolute")
    if position not in ("absolute", *POSITION_BIASES):
        raise ElectraError(f"{where}: position_embedding_type {position!r} is not supported "
                           f"(only absolute, or {', '.join(POSITION_BIASES[1:])} from electra)")
    fields = {k: data[k] for k in ModelConfig.__dataclass_fields__
              if k in data and k != "position_bias"}
    fields["position_bias"] = "none" if position == "absolute" else position
    fields.setdefault("embedding_size", data.get("hidden_size", ModelConfig.hidden_size))
    cfg = ModelConfig(**fields)
    cfg.validate()
    return cfg


def encoder_to_hf(state: dict[str, torch.Tensor], prefix: str = "electra.") -> dict:
    """Rename an Encoder's state dict to HF names under `prefix`."""
    out = {}
    for name, tensor in state.items():
        m = re.fullmatch(r"layers\.(\d+)\.(.+)\.(weight|bias)", name)
        if m is None:  # embeddings.*, embeddings_project.*
            out[prefix + name] = tensor
            continue
        layer, module, kind = m.groups()
        base = f"{prefix}encoder.layer.{layer}."
        if module == "attention.qkv":
            for part, chunk in zip(_QKV, tensor.chunk(3, dim=0), strict=True):
                out[f"{base}attention.self.{part}.{kind}"] = chunk.contiguous()
        else:
            out[f"{base}{_LAYER_RENAMES[module]}.{kind}"] = tensor
    return out


def encoder_from_hf(state: dict[str, torch.Tensor], num_layers: int) -> dict:
    """The inverse of `encoder_to_hf` for an ELECTRA or BERT checkpoint's state dict; heads,
    pooler and unknown keys are ignored."""
    for prefix in ("electra.", "bert.", ""):
        if f"{prefix}embeddings.word_embeddings.weight" in state:
            break
    else:
        raise ElectraError("no embeddings.word_embeddings.weight in the checkpoint")
    out = {}
    for name, tensor in state.items():
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        if rest.startswith(("embeddings.", "embeddings_project.")):
            if "position_ids" not in rest and "token_type_ids" not in rest:
                out[rest] = tensor
    inverse = {v: k for k, v in _LAYER_RENAMES.items()}
    for i in range(num_layers):
        base = f"{prefix}encoder.layer.{i}."
        for kind in ("weight", "bias"):
            parts = [state.get(f"{base}attention.self.{p}.{kind}") for p in _QKV]
            if any(p is None for p in parts):
                raise ElectraError(f"checkpoint lacks {base}attention.self.*.{kind}")
            out[f"layers.{i}.attention.qkv.{kind}"] = torch.cat(parts, dim=0)
            for hf_name, ours in inverse.items():
                key = f"{base}{hf_name}.{kind}"
                if key not in state:
                    raise ElectraError(f"checkpoint lacks {key}")
                out[f"layers.{i}.{ours}.{kind}"] = state[key]
    return out


def to_hf_state_dict(model: Discriminator | Generator) -> dict[str, torch.Tensor]:
    state = encoder_to_hf(model.electra.state_dict())
    if isinstance(model, Discriminator):
        for k, v in model.discriminator_predictions.state_dict().items():
            state[f"discriminator_predictions.{k}"] = v
    else:
        for k, v in model.generator_predictions.state_dict().items():
            state[f"generator_predictions.{k}"] = v
        # generator_lm_head.weight is the word embedding matrix (tie_word_embeddings).
        state["generator_lm_head.bias"] = model.output_bias.detach()
    return {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in state.items()}


def write_model_dir(out_dir: str | Path, config: dict, state: dict[str, torch.Tensor],
                    tokenizer_dir: str | Path | None = None) -> Path:
    """config.json + model.safetensors (+ tokenizer files), written atomically: a crash never
    leaves a half-written model."""
    from electra.tokenizer import copy_tokenizer_files

    out = Path(out_dir)
    with staged_dir(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if tokenizer_dir is not None:
            copy_tokenizer_files(tokenizer_dir, tmp)
    return out


def read_config_json(model_dir: str | Path) -> dict:
    """MODEL_DIR/config.json as a dict, or an ElectraError naming what is wrong."""
    d = Path(model_dir)
    cfg_path = d / "config.json"
    if not d.is_dir():
        raise ElectraError(f"{d}: model directory does not exist")
    if not cfg_path.is_file():
        raise ElectraError(f"{d}: no config.json (not a model directory)")
    try:
        raw = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise ElectraError(f"{cfg_path}: line {e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(raw, dict):
        raise ElectraError(f"{cfg_path}: expected a JSON object")
    return raw


def save_pretrained(model: Discriminator | Generator, out_dir: str | Path,
                    tokenizer_dir: str | Path | None = None, extra: dict | None = None) -> Path:
    """Write a HF-loadable directory atomically. A model with an attention bias that
    `transformers`' ELECTRA lacks (ALiBi) is written all the same, for electra to load, with a
    warning: `transformers` would ignore the bias and compute something else."""
    if model.config.position_bias != "none":
        print(f"warning: {out_dir}: model.position_bias={model.config.position_bias!r} is not "
              "part of Hugging Face's ELECTRA; transformers would load this model without it and "
              "compute something else. electra's own commands load it correctly.",
              file=sys.stderr)
    cfg = hf_config(model.config, ARCHITECTURES[type(model)], extra)
    return write_model_dir(out_dir, cfg, to_hf_state_dict(model), tokenizer_dir)


def read_model_dir(model_dir: str | Path) -> tuple[ModelConfig, dict, dict[str, torch.Tensor]]:
    """(config, raw config.json, state dict) of a local ELECTRA/BERT directory."""
    d = Path(model_dir)
    cfg_path = d / "config.json"
    raw = read_config_json(d)
    cfg = model_config_from_hf(raw, str(cfg_path))
    if (d / "model.safetensors").is_file():
        try:
            state = load_file(str(d / "model.safetensors"))
        except Exception as e:  # safetensors raises several types for corrupt files
            raise ElectraError(f"{d / 'model.safetensors'}: unreadable ({e})") from None
    elif (d / "pytorch_model.bin").is_file():
        state = torch.load(d / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise ElectraError(f"{d}: no model.safetensors or pytorch_model.bin")
    return cfg, raw, state


def load_encoder(model_dir: str | Path) -> Encoder:
    """Our encoder initialised from a local ELECTRA or BERT directory."""
    cfg, _, state = read_model_dir(model_dir)
    encoder = Encoder(cfg)
    _load_strict(encoder, encoder_from_hf(state, cfg.num_hidden_layers), model_dir)
    return encoder


def load_pretrained(model_dir: str | Path) -> Discriminator | Generator:
    """A Discriminator or Generator (with head) from a directory written by `save_pretrained`
    or by `transformers` (ElectraForPreTraining / ElectraForMaskedLM / BertForMaskedLM)."""
    cfg, raw, state = read_model_dir(model_dir)
    arch = (raw.get("architectures") or [""])[0]
    if arch == "ElectraForPreTraining":
        model: Discriminator | Generator = Discriminator(cfg)
        head = {k[len("discriminator_predictions."):]: v for k, v in state.items()
                if k.startswith("discriminator_predictions.")}
        _load_strict(model.discriminator_predictions, head, model_dir)
    elif arch == "ElectraForMaskedLM":
        model = Generator(cfg)
        head = {k[len("generator_predictions."):]: v for k, v in state.items()
                if k.startswith("generator_predictions.")}
        _load_strict(model.generator_predictions, head, model_dir)
        if "generator_lm_head.bias" not in state:
            raise ElectraError(f"{model_dir}: checkpoint lacks generator_lm_head.bias")
        with torch.no_grad():
            model.output_bias.copy_(state["generator_lm_head.bias"])
    elif arch == "BertForMaskedLM":
        # BERT's MLM head is ELECTRA's generator head at embedding size = hidden size: dense,
        # GELU, LayerNorm, then the tied word embeddings plus a bias.
        model = Generator(cfg)
        prefix = "cls.predictions.transform."
        head = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        _load_strict(model.generator_predictions, head, model_dir)
        bias = state.get("cls.predictions.bias", state.get("cls.predictions.decoder.bias"))
        if bias is None:
            raise ElectraError(f"{model_dir}: checkpoint lacks cls.predictions.bias")
        with torch.no_grad():
            model.output_bias.copy_(bias)
    else:
        raise ElectraError(f"{model_dir}: architecture {arch!r} is not ElectraForPreTraining, "
                           "ElectraForMaskedLM or BertForMaskedLM; use load_encoder for a bare "
                           "encoder")
    _load_strict(model.electra, encoder_from_hf(state, cfg.num_hidden_layers), model_dir)
    return model


def _load_strict(module: nn.Module, state: dict, where) -> None:
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ElectraError(f"{where}: weights do not match the config "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")

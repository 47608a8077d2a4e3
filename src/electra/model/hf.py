"""Hugging Face compatible model directories: config.json + model.safetensors + tokenizer.

Two layouts, decided per model (docs/interoperability.md):
- native: what `transformers`' own classes (`ElectraForPreTraining`, `ElectraForMaskedLM`,
  `ElectraForTokenClassification`; for the modern architecture the ModernBert classes, see
  `electra.model.modern_hf`) compute exactly; weights under their names, no extra code;
- remote code: models they cannot express (an ALiBi bias, our GLUE/regression/SQuAD heads):
  model_type "electra-toolkit", our own parameter names, the portable modules copied beside
  the weights (`REMOTE_CODE_FILES`) and an `auto_map`, so `AutoModel*.from_pretrained(DIR,
  trust_remote_code=True)` builds the exact model without electra installed.
Import reads both, and local ELECTRA or BERT directories (no hub), into our encoder.

Each architecture's layout is its record's `transformers` (`electra.architectures`): a
`TransformersLayout`, `ELECTRA_LAYOUT` for the BERT architecture and `MODERNBERT_LAYOUT` for the
modern one; the functions here ask the model's.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from electra.architectures import ARCHITECTURES
from electra.config import POSITION_BIASES, ModelConfig
from electra.config import read_config_json as read_json_file
from electra.errors import ElectraError
from electra.fileutil import staged_dir
from electra.model import modern_hf
from electra.model.encoder import Encoder
from electra.model.networks import Discriminator, Generator, build_encoder
from electra.model_config import NOT_IN_ELECTRACONFIG, fields_marked

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
# ModelConfig fields an ElectraConfig does not hold (position_bias is written as
# position_embedding_type; the rest belong to other architectures).
_NOT_ELECTRACONFIG_FIELDS = fields_marked(NOT_IN_ELECTRACONFIG)
ARCHITECTURES_BY_CLASS = {Discriminator: "ElectraForPreTraining",
                          Generator: "ElectraForMaskedLM"}

REMOTE_MODEL_TYPE = "electra-toolkit"
# The portable modules (they import only torch, numpy and transformers), copied beside the
# weights of a remote-code directory; the first holds the `transformers` classes.
REMOTE_CODE_FILES = ("modeling_electra_toolkit.py", "encoder.py", "task_heads.py",
                     "squad_head.py")
# What a model is -> (its remote-code class, the Auto class that builds it, the native
# architecture it stands for in electra's own readers).
REMOTE_CLASSES = {
    "encoder": ("ElectraToolkitModel", "AutoModel", "ElectraModel"),
    "discriminator": ("ElectraToolkitForPreTraining", "AutoModelForPreTraining",
                      "ElectraForPreTraining"),
    "generator": ("ElectraToolkitForMaskedLM", "AutoModelForMaskedLM", "ElectraForMaskedLM"),
    "sequence": ("ElectraToolkitForSequenceClassification",
                 "AutoModelForSequenceClassification", "ElectraModel"),
    "regression": ("ElectraToolkitForSequenceClassification",
                   "AutoModelForSequenceClassification", "ElectraModel"),
    "token": ("ElectraToolkitForTokenClassification", "AutoModelForTokenClassification",
              "ElectraModel"),
    "span": ("ElectraToolkitForQuestionAnswering", "AutoModelForQuestionAnswering",
             "ElectraModel"),
}
_NATIVE_EQUIVALENT = {cls: native for cls, _, native in REMOTE_CLASSES.values()}


def architecture_of(raw: dict) -> str:
    """config.json's architecture, a remote-code class read as the `transformers` architecture
    electra's readers know it by (its discriminator is an ElectraForPreTraining, ...)."""
    arch = (raw.get("architectures") or [""])[0]
    return _NATIVE_EQUIVALENT.get(arch, arch)


def remote_code_config(cfg: ModelConfig, kind: str, extra: dict | None = None) -> dict:
    """config.json of a remote-code directory for a model of `kind` (a `REMOTE_CLASSES` key)."""
    cls, auto, _ = REMOTE_CLASSES[kind]
    module = REMOTE_CODE_FILES[0].removesuffix(".py")
    out = hf_config(cfg, cls, extra)
    out["model_type"] = REMOTE_MODEL_TYPE
    out["auto_map"] = {"AutoConfig": f"{module}.ElectraToolkitConfig",
                       "AutoModel": f"{module}.ElectraToolkitModel", auto: f"{module}.{cls}"}
    if kind in ("sequence", "regression", "token", "span"):
        out["head_kind"] = kind
    return out


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
           if k not in _NOT_ELECTRACONFIG_FIELDS},
    }
    if extra:
        out["electra_toolkit"] = extra
    return out


class TransformersLayout(Protocol):
    """How one architecture's models are Hugging Face directories (its record's
    `transformers`)."""

    model_types: tuple[str, ...]  # the config.json model_type values it reads

    def config_from_hf(self, data: dict, where: str) -> ModelConfig:
        """Our ModelConfig from a config.json of one of `model_types`."""

    def is_discriminator(self, architecture: str, raw: dict) -> bool:
        """Whether config.json `raw` (its class read as `architecture_of` reads it) is an
        electra discriminator in this layout."""

    def encoder_to_hf(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """An encoder's state dict under the native names."""

    def encoder_from_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig
                        ) -> dict[str, torch.Tensor]:
        """Our encoder's state dict from a checkpoint's (heads and unknown keys ignored)."""

    def pretrained_state(self, model: Discriminator | Generator) -> dict[str, torch.Tensor]:
        """A network's state dict, head included, under the native names."""

    def pretrained_files(self, model: Discriminator | Generator, extra: dict | None
                         ) -> tuple[dict, dict[str, torch.Tensor]]:
        """(config.json, state dict) of a network's directory."""

    def load_heads(self, cfg: ModelConfig, raw: dict, state: dict[str, torch.Tensor],
                   model_dir: str | Path) -> Discriminator | Generator:
        """The network config.json `raw` describes, its head loaded (the caller loads the
        encoder)."""


def layout(cfg: ModelConfig) -> TransformersLayout:
    """The layout of `cfg`'s architecture (ElectraError where it has none)."""
    return cfg.arch.load("transformers")


def _layouts() -> list[TransformersLayout]:
    """Every registered architecture's layout."""
    return [arch.load("transformers") for arch in ARCHITECTURES.values()
            if arch.transformers is not None]


def is_discriminator(raw: dict) -> bool:
    """Whether config.json `raw` is an electra discriminator, in any architecture's layout."""
    arch = architecture_of(raw)
    return any(lay.is_discriminator(arch, raw) for lay in _layouts())


def model_config_from_hf(data: dict, where: str = "config.json") -> ModelConfig:
    """Our ModelConfig from an ELECTRA, BERT or ModernBERT config.json (or another registered
    architecture's, by its model_type)."""
    model_type = data.get("model_type")
    layouts = _layouts()
    for lay in layouts:
        if model_type in lay.model_types:
            return lay.config_from_hf(data, where)
    known = [repr(t) for lay in layouts for t in lay.model_types]
    raise ElectraError(f"{where}: model_type {model_type!r} is not "
                       f"{', '.join(known[:-1])} or {known[-1]}")


def electra_config_from_hf(data: dict, where: str = "config.json") -> ModelConfig:
    """Our ModelConfig (the BERT architecture) from an ELECTRA or BERT config.json."""
    if data.get("hidden_act", "gelu") != "gelu":
        raise ElectraError(f"{where}: hidden_act {data['hidden_act']!r} is not supported "
                           "(only exact gelu)")
    position = data.get("position_embedding_type", "absolute")
    if position not in ("absolute", *POSITION_BIASES):
        raise ElectraError(f"{where}: position_embedding_type {position!r} is not supported "
                           f"(only absolute, or {', '.join(POSITION_BIASES[1:])} from electra)")
    fields = {k: data[k] for k in ModelConfig.__dataclass_fields__
              if k in data and k not in _NOT_ELECTRACONFIG_FIELDS}
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


def encoder_from_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict:
    """Our encoder's state dict from a checkpoint's in the layout of `cfg`'s architecture (an
    ELECTRA or BERT one, a remote-code directory's, which keeps our names under `electra.`, or
    a ModernBERT one's); heads, pooler and unknown keys are ignored."""
    return layout(cfg).encoder_from_hf(state, cfg)


def electra_encoder_from_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict:
    """The inverse of `encoder_to_hf` for an ELECTRA or BERT checkpoint's state dict (or a
    remote-code directory's)."""
    num_layers = cfg.num_hidden_layers
    if "electra.embeddings.word_embeddings.weight" in state and not any(
            k.startswith("electra.encoder.") for k in state):
        return _with_prefix(state, "electra.")
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


def encoder_state_to_hf(cfg: ModelConfig, state: dict[str, torch.Tensor]
                        ) -> dict[str, torch.Tensor]:
    """An encoder's state dict under the native names of its architecture."""
    return layout(cfg).encoder_to_hf(state)


def to_hf_state_dict(model: Discriminator | Generator) -> dict[str, torch.Tensor]:
    """A network's state dict under the native names of its architecture."""
    return layout(model.config).pretrained_state(model)


def write_model_files(directory: Path, config: dict, state: dict[str, torch.Tensor],
                      tokenizer_dir: str | Path | None = None) -> None:
    """config.json + model.safetensors (+ tokenizer files, + the remote code when config.json
    names it) into `directory`, a staged directory being written."""
    from electra.tokenizer import copy_tokenizer_files

    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = {k: v.detach().to("cpu", torch.float32).contiguous().clone()
             for k, v in state.items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer_dir is not None:
        copy_tokenizer_files(tokenizer_dir, directory)
    if config.get("model_type") == REMOTE_MODEL_TYPE:
        for name in REMOTE_CODE_FILES:
            shutil.copyfile(Path(__file__).with_name(name), directory / name)


def write_model_dir(out_dir: str | Path, config: dict, state: dict[str, torch.Tensor],
                    tokenizer_dir: str | Path | None = None) -> Path:
    """`write_model_files`, atomically: a crash never leaves a half-written model."""
    out = Path(out_dir)
    with staged_dir(out) as tmp:
        write_model_files(tmp, config, state, tokenizer_dir)
    return out


def read_config_json(model_dir: str | Path) -> dict:
    """MODEL_DIR/config.json as a dict, or an ElectraError naming what is wrong."""
    d = Path(model_dir)
    cfg_path = d / "config.json"
    if not d.is_dir():
        raise ElectraError(f"{d}: model directory does not exist")
    if not cfg_path.is_file():
        raise ElectraError(f"{d}: no config.json (not a model directory)")
    raw = read_json_file(cfg_path)
    if not isinstance(raw, dict):
        raise ElectraError(f"{cfg_path}: expected a JSON object")
    return raw


def save_pretrained(model: Discriminator | Generator, out_dir: str | Path,
                    tokenizer_dir: str | Path | None = None, extra: dict | None = None) -> Path:
    """Write a HF-loadable directory atomically, in the layout of the model's architecture:
    `transformers`' ELECTRA classes' for a paper architecture, remote code for one with an
    attention bias they lack (ALiBi), ModernBERT's for the modern one."""
    config, state = layout(model.config).pretrained_files(model, extra)
    return write_model_dir(out_dir, config, state, tokenizer_dir)


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
    encoder = build_encoder(cfg)
    _load_strict(encoder, encoder_from_hf(state, cfg), model_dir)
    return encoder


def load_pretrained(model_dir: str | Path) -> Discriminator | Generator:
    """A Discriminator or Generator (with head) from a directory written by `save_pretrained`
    or by `transformers` (ElectraForPreTraining / ElectraForMaskedLM / BertForMaskedLM /
    ModernBertForMaskedLM, or our discriminator as ModernBertForTokenClassification)."""
    cfg, raw, state = read_model_dir(model_dir)
    model = layout(cfg).load_heads(cfg, raw, state, model_dir)
    _load_strict(model.electra, encoder_from_hf(state, cfg), model_dir)
    return model


class ElectraLayout:
    """The BERT architecture's layout: `transformers`' ELECTRA classes (and BERT's, read), or
    remote code for what they cannot express (ALiBi)."""

    model_types = ("electra", "bert", REMOTE_MODEL_TYPE)

    def config_from_hf(self, data: dict, where: str) -> ModelConfig:
        return electra_config_from_hf(data, where)

    def is_discriminator(self, architecture: str, raw: dict) -> bool:
        return architecture == "ElectraForPreTraining"

    def encoder_to_hf(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return encoder_to_hf(state)

    def encoder_from_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig
                        ) -> dict[str, torch.Tensor]:
        return electra_encoder_from_hf(state, cfg)

    def pretrained_state(self, model: Discriminator | Generator) -> dict[str, torch.Tensor]:
        state = encoder_to_hf(model.electra.state_dict())
        if isinstance(model, Discriminator):
            for k, v in model.discriminator_predictions.state_dict().items():
                state[f"discriminator_predictions.{k}"] = v
        else:
            for k, v in model.generator_predictions.state_dict().items():
                state[f"generator_predictions.{k}"] = v
            # generator_lm_head.weight is the word embedding matrix (tie_word_embeddings).
            state["generator_lm_head.bias"] = model.output_bias
        return state

    def pretrained_files(self, model: Discriminator | Generator, extra: dict | None
                         ) -> tuple[dict, dict[str, torch.Tensor]]:
        if model.config.position_bias == "none":
            return (hf_config(model.config, ARCHITECTURES_BY_CLASS[type(model)], extra),
                    self.pretrained_state(model))
        kind = "discriminator" if isinstance(model, Discriminator) else "generator"
        return remote_code_config(model.config, kind, extra), model.state_dict()

    def load_heads(self, cfg: ModelConfig, raw: dict, state: dict[str, torch.Tensor],
                   model_dir: str | Path) -> Discriminator | Generator:
        arch = architecture_of(raw)
        if arch == "ElectraForPreTraining":
            model: Discriminator | Generator = Discriminator(cfg)
            _load_strict(model.discriminator_predictions,
                         _with_prefix(state, "discriminator_predictions."), model_dir)
        elif arch == "ElectraForMaskedLM":
            model = _generator_from(cfg, state, "generator_predictions.",
                                    ("generator_lm_head.bias", "output_bias"), model_dir)
        elif arch == "BertForMaskedLM":
            # BERT's MLM head is ELECTRA's generator head at embedding size = hidden size:
            # dense, GELU, LayerNorm, then the tied word embeddings plus a bias.
            model = _generator_from(cfg, state, "cls.predictions.transform.",
                                    ("cls.predictions.bias", "cls.predictions.decoder.bias"),
                                    model_dir)
        else:
            raise ElectraError(f"{model_dir}: architecture {arch!r} is not "
                               "ElectraForPreTraining, ElectraForMaskedLM or BertForMaskedLM; "
                               "use load_encoder for a bare encoder")
        return model


class ModernBertLayout:
    """The modern architecture's layout: `transformers`' own ModernBert classes
    (`electra.model.modern_hf`); a discriminator is ModernBertForTokenClassification with the
    one label "replaced"."""

    model_types = (modern_hf.MODEL_TYPE,)

    def config_from_hf(self, data: dict, where: str) -> ModelConfig:
        return modern_hf.model_config_from_modernbert(data, where)

    def is_discriminator(self, architecture: str, raw: dict) -> bool:
        labels = {int(k): v for k, v in (raw.get("id2label") or {}).items()}
        return (architecture == "ModernBertForTokenClassification"
                and labels == modern_hf.DISCRIMINATOR_LABELS)

    def encoder_to_hf(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return modern_hf.encoder_to_modernbert(state)

    def encoder_from_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig
                        ) -> dict[str, torch.Tensor]:
        return modern_hf.encoder_from_modernbert(state, cfg)

    def pretrained_state(self, model: Discriminator | Generator) -> dict[str, torch.Tensor]:
        head = (model.discriminator_predictions if isinstance(model, Discriminator)
                else model.generator_predictions)
        state = {**modern_hf.encoder_to_modernbert(model.electra.state_dict()),
                 **modern_hf.head_to_modernbert(head.state_dict())}
        if isinstance(model, Generator):
            state["decoder.bias"] = model.output_bias
        return state

    def pretrained_files(self, model: Discriminator | Generator, extra: dict | None
                         ) -> tuple[dict, dict[str, torch.Tensor]]:
        if isinstance(model, Discriminator):
            cfg = modern_hf.modernbert_config(model.config, "ModernBertForTokenClassification",
                                              extra)
            cfg["id2label"] = modern_hf.DISCRIMINATOR_LABELS
            cfg["label2id"] = {v: k for k, v in modern_hf.DISCRIMINATOR_LABELS.items()}
        else:
            cfg = modern_hf.modernbert_config(model.config, "ModernBertForMaskedLM", extra)
        return cfg, self.pretrained_state(model)

    def load_heads(self, cfg: ModelConfig, raw: dict, state: dict[str, torch.Tensor],
                   model_dir: str | Path) -> Discriminator | Generator:
        arch = architecture_of(raw)
        if self.is_discriminator(arch, raw):
            model: Discriminator | Generator = Discriminator(cfg)
            head = model.discriminator_predictions
        elif arch == "ModernBertForMaskedLM":
            model = Generator(cfg)
            head = model.generator_predictions
            if "decoder.bias" not in state:
                raise ElectraError(f"{model_dir}: checkpoint lacks decoder.bias")
            decoder, embeddings = (state.get(k) for k in (
                "decoder.weight", "model.embeddings.tok_embeddings.weight"))
            if decoder is not None and embeddings is not None and not torch.equal(decoder,
                                                                                   embeddings):
                raise ElectraError(f"{model_dir}: the MLM decoder is not tied to the token "
                                   "embeddings, which the generator requires")
            with torch.no_grad():
                model.output_bias.copy_(state["decoder.bias"])
        else:
            raise ElectraError(f"{model_dir}: architecture {arch!r} is not "
                               "ModernBertForMaskedLM or an electra discriminator "
                               "(ModernBertForTokenClassification with the one label "
                               "'replaced'); use load_encoder for a bare encoder")
        names = list(head.state_dict())
        _load_strict(head, modern_hf.head_from_modernbert(state, names), model_dir)
        return model


ELECTRA_LAYOUT = ElectraLayout()
MODERNBERT_LAYOUT = ModernBertLayout()


def _with_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under `prefix`, named without it."""
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def _generator_from(cfg: ModelConfig, state: dict[str, torch.Tensor], head_prefix: str,
                    bias_names: tuple[str, str], model_dir: str | Path) -> Generator:
    """A generator whose head is the tensors under `head_prefix` and whose output bias is
    the first of `bias_names` the checkpoint has (the word embeddings are tied)."""
    model = Generator(cfg)
    _load_strict(model.generator_predictions, _with_prefix(state, head_prefix), model_dir)
    bias = next((state[name] for name in bias_names if name in state), None)
    if bias is None:
        raise ElectraError(f"{model_dir}: checkpoint lacks {bias_names[0]}")
    with torch.no_grad():
        model.output_bias.copy_(bias)
    return model


def _load_strict(module: nn.Module, state: dict, where) -> None:
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ElectraError(f"{where}: weights do not match the config "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")

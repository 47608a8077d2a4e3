"""The modern architecture in `transformers`' own ModernBERT layout (`ModernBertModel`,
`...ForMaskedLM`, `...ForTokenClassification`, ...; transformers >= 4.51, the first with
`...ForQuestionAnswering`), both ways: our weights and config written under its names, and a
ModernBERT directory read into our encoder.

Our modules keep the BERT architecture's names (`electra.model.modern`), so the rename is one
table per level. A discriminator is `ModernBertForTokenClassification` with one label named
"replaced": its head (dense, GELU, LayerNorm, one-unit classifier) is exactly ours.
"""

from __future__ import annotations

import re

import torch

from electra.errors import ElectraError
from electra.model_config import ModelConfig

MODEL_TYPE = "modernbert"
DISCRIMINATOR_LABELS = {0: "replaced"}
_GLOBAL, _LOCAL = "full_attention", "sliding_attention"

# Our names (under an Encoder) -> ModernBERT's (under `model.`).
_TOP_RENAMES = {
    "embeddings.word_embeddings": "embeddings.tok_embeddings",
    "embeddings.LayerNorm": "embeddings.norm",
    "final_norm": "final_norm",
}
_LAYER_RENAMES = {
    "attention_norm": "attn_norm",
    "attention.qkv": "attn.Wqkv",
    "attention_out": "attn.Wo",
    "ffn_norm": "mlp_norm",
    "ffn_in": "mlp.Wi",
    "ffn_out": "mlp.Wo",
}
# Our pre-training heads (DiscriminatorHead, GeneratorHead) and task heads (SequenceHead and
# TokenHead with a PredictionHead) -> ModernBERT's prediction head (`head.`) and classifier.
PRETRAINING_HEAD_RENAMES = {"dense": "head.dense", "LayerNorm": "head.norm",
                            "dense_prediction": "classifier"}
TASK_HEAD_RENAMES = {"transform.dense": "head.dense", "transform.norm": "head.norm",
                     "out": "classifier"}
# A fine-tuned model's head kind -> the ModernBert class that computes it.
TASK_CLASSES = {"sequence": "ModernBertForSequenceClassification",
                "token": "ModernBertForTokenClassification",
                "span": "ModernBertForQuestionAnswering"}


def layer_types(cfg: ModelConfig) -> list[str]:
    return [_GLOBAL if cfg.is_global_layer(i) else _LOCAL for i in range(cfg.num_hidden_layers)]


def modernbert_config(cfg: ModelConfig, architecture: str, extra: dict | None = None) -> dict:
    """config.json for `architecture` (a ModernBert class name). Both the rotary and layer
    pattern fields transformers 5 reads (`rope_parameters`, `layer_types`) and the ones 4.x
    reads (`global_rope_theta`, `local_rope_theta`, `global_attn_every_n_layers`) are
    written."""
    out = {
        "architectures": [architecture],
        "model_type": MODEL_TYPE,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "hidden_activation": "gelu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "initializer_range": cfg.initializer_range,
        "initializer_cutoff_factor": 2.0,
        "norm_eps": cfg.layer_norm_eps,
        "norm_bias": False,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": None, "eos_token_id": None, "cls_token_id": None, "sep_token_id": None,
        "attention_bias": False,
        "attention_dropout": cfg.attention_probs_dropout_prob,
        "embedding_dropout": cfg.hidden_dropout_prob,
        "mlp_bias": False,
        "mlp_dropout": cfg.hidden_dropout_prob,
        "local_attention": cfg.local_attention,
        "global_attn_every_n_layers": cfg.global_attn_every_n_layers,
        "layer_types": layer_types(cfg),
        "global_rope_theta": cfg.global_rope_theta,
        "local_rope_theta": cfg.local_rope_theta,
        "rope_parameters": {_GLOBAL: {"rope_type": "default", "rope_theta": cfg.global_rope_theta},
                            _LOCAL: {"rope_type": "default", "rope_theta": cfg.local_rope_theta}},
        "decoder_bias": True,
        "classifier_pooling": "cls",
        "classifier_dropout": 0.0,
        "classifier_bias": False,
        "classifier_activation": "gelu",
        "sparse_prediction": False,
        "tie_word_embeddings": True,
    }
    if extra:
        out["electra_toolkit"] = extra
    return out


def _require(data: dict, field: str, allowed: object, where: str) -> None:
    value = data.get(field, allowed)
    if value != allowed:
        raise ElectraError(f"{where}: {field}={value!r} cannot be expressed by the modern "
                           f"architecture (needs {allowed!r})")


def _layer_period(data: dict, num_layers: int, where: str) -> int:
    """global_attn_every_n_layers from `layer_types` (or the field itself): layer i global
    exactly when i % n == 0."""
    types = data.get("layer_types")
    n = int(data.get("global_attn_every_n_layers", 3))
    if types is None:
        return n
    if len(types) != num_layers or set(types) - {_GLOBAL, _LOCAL}:
        raise ElectraError(f"{where}: layer_types must list {num_layers} of {_GLOBAL!r} / "
                           f"{_LOCAL!r}, got {types!r}")
    later_globals = [i for i, t in enumerate(types) if t == _GLOBAL and i > 0]
    n = later_globals[0] if later_globals else max(num_layers, 1)
    if [t == _GLOBAL for t in types] != [i % n == 0 for i in range(num_layers)]:
        raise ElectraError(f"{where}: layer_types {types!r} cannot be expressed by the modern "
                           "architecture (global attention every n-th layer from the first)")
    return n


def _rope_theta(data: dict, kind: str, legacy: str, default: float, where: str) -> float:
    params = (data.get("rope_parameters") or {}).get(kind) or {}
    if params.get("rope_type", "default") != "default" or data.get("rope_scaling"):
        raise ElectraError(f"{where}: rope_parameters.{kind}.rope_type "
                           f"{params.get('rope_type')!r} cannot be expressed by the modern "
                           "architecture (plain RoPE only)")
    return float(params.get("rope_theta", data.get(legacy, default)))


def model_config_from_modernbert(data: dict, where: str = "config.json") -> ModelConfig:
    """Our ModelConfig from a ModernBERT config.json; a field the modern architecture cannot
    express is one error naming it."""
    for field, allowed in (("hidden_activation", "gelu"), ("classifier_activation", "gelu"),
                           ("norm_bias", False), ("attention_bias", False), ("mlp_bias", False),
                           ("decoder_bias", True), ("classifier_bias", False)):
        _require(data, field, allowed, where)
    if (data.get("architectures") or [""])[0] == "ModernBertForSequenceClassification":
        # The released ModernBERTs say "mean", which only their sequence classifier reads.
        _require(data, "classifier_pooling", "cls", where)
    defaults = ModelConfig(architecture="modern")
    hidden, heads = data.get("hidden_size", 768), data.get("num_attention_heads", 12)
    if data.get("head_dim") not in (None, hidden // heads):
        raise ElectraError(f"{where}: head_dim={data['head_dim']} cannot be expressed by the "
                           f"modern architecture (needs hidden_size / num_attention_heads)")
    layers = data.get("num_hidden_layers", 22)
    cfg = ModelConfig(
        architecture="modern",
        vocab_size=data.get("vocab_size", 50368),
        embedding_size=hidden, hidden_size=hidden,
        num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=data.get("intermediate_size", 1152),
        max_position_embeddings=data.get("max_position_embeddings", 8192),
        type_vocab_size=1,
        hidden_dropout_prob=float(data.get("mlp_dropout", 0.0)),
        attention_probs_dropout_prob=float(data.get("attention_dropout", 0.0)),
        layer_norm_eps=float(data.get("norm_eps", 1e-5)),
        initializer_range=float(data.get("initializer_range", 0.02)),
        pad_token_id=data.get("pad_token_id") or 0,
        global_attn_every_n_layers=_layer_period(data, layers, where),
        local_attention=int(data.get("local_attention", defaults.local_attention)),
        global_rope_theta=_rope_theta(data, _GLOBAL, "global_rope_theta",
                                      defaults.global_rope_theta, where),
        local_rope_theta=_rope_theta(data, _LOCAL, "local_rope_theta",
                                     defaults.local_rope_theta, where),
    )
    if float(data.get("embedding_dropout", 0.0)) != cfg.hidden_dropout_prob:
        raise ElectraError(f"{where}: embedding_dropout ({data.get('embedding_dropout')}) must "
                           f"equal mlp_dropout ({cfg.hidden_dropout_prob}) for the modern "
                           "architecture (one hidden dropout rate)")
    try:
        cfg.validate()
    except ElectraError as e:
        raise ElectraError(f"{where}: {e}") from None
    return cfg


def _rename(name: str) -> str:
    """One of our Encoder's parameter names as ModernBERT's (without `model.`)."""
    m = re.fullmatch(r"layers\.(\d+)\.(.+)\.(weight|bias)", name)
    if m is not None:
        layer, module, kind = m.groups()
        return f"layers.{layer}.{_LAYER_RENAMES[module]}.{kind}"
    module, kind = name.rsplit(".", 1)
    return f"{_TOP_RENAMES[module]}.{kind}"


def encoder_to_modernbert(state: dict[str, torch.Tensor], prefix: str = "model."
                          ) -> dict[str, torch.Tensor]:
    return {prefix + _rename(name): tensor for name, tensor in state.items()}


def encoder_from_modernbert(state: dict[str, torch.Tensor], cfg: ModelConfig
                            ) -> dict[str, torch.Tensor]:
    """Our Encoder's state dict from a ModernBERT checkpoint (a bare ModernBertModel's, or a
    head model's under `model.`); heads and unknown keys are ignored."""
    prefix = "model." if any(k.startswith("model.") for k in state) else ""
    from electra.model.modern import ModernEncoder

    ours = ModernEncoder(cfg).state_dict().keys()
    out = {}
    for name in ours:
        key = prefix + _rename(name)
        if key not in state:
            raise ElectraError(f"checkpoint lacks {key}")
        out[name] = state[key]
    return out


def head_to_modernbert(state: dict[str, torch.Tensor],
                       renames: dict[str, str] = PRETRAINING_HEAD_RENAMES
                       ) -> dict[str, torch.Tensor]:
    """A head's state under ModernBERT's names (`renames`: one of the tables above)."""
    out = {}
    for name, tensor in state.items():
        module, kind = name.rsplit(".", 1)
        out[f"{renames[module]}.{kind}"] = tensor
    return out


def head_from_modernbert(state: dict[str, torch.Tensor], names: list[str],
                         renames: dict[str, str] = PRETRAINING_HEAD_RENAMES
                         ) -> dict[str, torch.Tensor]:
    """The inverse of `head_to_modernbert` for a head with parameters `names`."""
    out = {}
    for name in names:
        key = next(iter(head_to_modernbert({name: torch.empty(0)}, renames)))
        if key not in state:
            raise ElectraError(f"checkpoint lacks {key}")
        out[name] = state[key]
    return out

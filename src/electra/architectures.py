"""Encoder architectures as records: `ModelConfig.architecture` names one, `ModelConfig.arch` is
its `Architecture`, and code asks the record instead of comparing names.

A record holds what differs between architectures: facts the configuration reads (no torch
here, so configs, presets and FLOPs counts stay importable without it), and the pieces that need
torch as "module:attr" strings imported on first use (`Architecture.load`), as
`electra.config.OBJECTIVES` names objectives. Two are built in: the BERT architecture (BERT's
and ELECTRA's: post-LayerNorm, learned absolute positions, GELU) and the modern one (ModernBERT's,
Warner et al. 2024, section 2.1; `electra.model.modern`). Another is one `register_architecture`
call (docs/extending.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from electra.errors import ElectraError

if TYPE_CHECKING:
    from collections.abc import Callable

    from electra.model_config import ModelConfig


@dataclass(frozen=True)
class Architecture:
    """One encoder architecture. The pieces (`encoder` to `task_heads`, `transformers`,
    `finetuned`) are "module:attr" strings or the objects themselves."""

    name: str
    # The encoder: a class (cfg, embeddings=None) with the interface of
    # `electra.model.encoder.Encoder` (`embeddings`, `layers`, `embed`, `attention_bias`,
    # `after_layers`, `set_attention_impl`, `prepare_for_export`,
    # forward(input_ids, token_type_ids, attention_mask)).
    encoder: Any
    # Its embeddings (cfg) and its layer (cfg, index): what networks built of layers beside an
    # encoder use (TEAMS' extra layer, the two-tower generator's towers).
    embeddings: Any
    layer: Any
    # (cfg, attention_mask, x, direction) -> what its layers take as their attention input when
    # query i sees only keys j <= i ("left-to-right") or j >= i ("right-to-left"): the two-tower
    # generator's towers (Electric).
    causal_attention: Any
    # An `electra.flops.EncoderCount`: the embeddings' and each layer's FLOPs and the encoder's
    # parameters. The heads and the final norm are counted from `biases` and `final_norm`.
    flops: Any
    # Linear layers and LayerNorms carry biases. Without them (ModernBERT's rule) the
    # pre-training heads are ModernBERT's prediction heads: no biases, and the discriminator's
    # with a LayerNorm after the GELU (`electra.model.encoder.DiscriminatorHead`).
    biases: bool = True
    # A LayerNorm after the last layer (pre-LayerNorm layers end unnormalised).
    final_norm: bool = False
    # Embeddings of their own width E, projected to the hidden size H when E != H. Without a
    # projection the embeddings are as wide as the encoder: a generator keeps E = H when scaled
    # (`ModelConfig.scaled`), and one that shares the token embeddings must be as wide as the
    # model.
    embedding_projection: bool = True
    # Layer i attends to the whole sequence only when i % global_attn_every_n_layers == 0, else
    # within a window of `local_attention` tokens; without, every layer is global.
    sliding_window: bool = False
    # The generator `--init-from` gives a run that names none: as wide as the model and half as
    # deep (DeBERTa-V3's rule, as its presets) rather than the preset's narrower one (Table 5.1).
    wide_generator: bool = False
    # Checks of a ModelConfig beyond the common ones (ElectraError naming the field).
    check: Callable[[ModelConfig], None] | None = None
    # An `electra.finetuning.heads.TaskHeads`: its fine-tuning heads and the ones it refuses.
    task_heads: Any = "electra.finetuning.heads:ELECTRA_TASK_HEADS"
    # An `electra.model.hf.TransformersLayout`: its models as Hugging Face directories (export,
    # import, detection of a released discriminator); None: not exported.
    transformers: Any = None
    # An `electra.finetuning.model_io.FinetunedLayout`: its fine-tuned models' directories;
    # None: not exported.
    finetuned: Any = None

    def load(self, piece: str) -> Any:
        """The object field `piece` names, its module imported on first use."""
        value = getattr(self, piece)
        if value is None:
            raise ElectraError(f"the {self.name!r} architecture's record has no {piece!r}: its "
                               f"models cannot be {_PURPOSE.get(piece, 'used this way')}")
        if not isinstance(value, str):
            return value
        module, _, attr = value.partition(":")
        return getattr(importlib.import_module(module), attr)


_PURPOSE = {"transformers": "written or read as Hugging Face directories",
            "finetuned": "exported after fine-tuning"}


def _check_modern(cfg: ModelConfig) -> None:
    if cfg.embedding_size != cfg.hidden_size:
        raise ElectraError(f"model.embedding_size ({cfg.embedding_size}) must equal "
                           f"model.hidden_size ({cfg.hidden_size}) for the modern "
                           f"architecture (it has no embedding projection)")
    if cfg.position_bias != "none":
        raise ElectraError("model.position_bias must be 'none' for the modern architecture "
                           "(its positions are rotary)")
    head_size = cfg.hidden_size // cfg.num_attention_heads
    if head_size % 2:
        raise ElectraError(f"model.hidden_size / model.num_attention_heads must be even for "
                           f"rotary positions, got {head_size}")
    if cfg.global_attn_every_n_layers < 1:
        raise ElectraError(f"model.global_attn_every_n_layers must be positive, got "
                           f"{cfg.global_attn_every_n_layers}")
    if cfg.local_attention < 2 or cfg.local_attention % 2:
        raise ElectraError(f"model.local_attention must be an even number >= 2 (the window, "
                           f"half on each side), got {cfg.local_attention}")
    for name in ("global_rope_theta", "local_rope_theta"):
        if getattr(cfg, name) <= 0:
            raise ElectraError(f"model.{name} must be positive, got {getattr(cfg, name)}")


BERT = Architecture(
    "bert",
    encoder="electra.model.encoder:Encoder",
    embeddings="electra.model.encoder:Embeddings",
    layer="electra.model.encoder:TransformerLayer",
    causal_attention="electra.model.two_tower:causal_attention_bias",
    flops="electra.flops:BERT_COUNT",
    task_heads="electra.finetuning.heads:ELECTRA_TASK_HEADS",
    transformers="electra.model.hf:ELECTRA_LAYOUT",
    finetuned="electra.finetuning.model_io:ELECTRA_FINETUNED",
)

# ModernBERT's: pre-LayerNorm without biases, rotary positions, GeGLU, sliding-window attention
# with global attention every few layers, a final LayerNorm; exported as transformers' own
# ModernBert classes (`electra.model.modern_hf`).
MODERN = Architecture(
    "modern",
    encoder="electra.model.modern:ModernEncoder",
    embeddings="electra.model.modern:ModernEmbeddings",
    layer="electra.model.modern:ModernLayer",
    causal_attention="electra.model.modern:causal_attention_inputs",
    flops="electra.flops:MODERN_COUNT",
    biases=False,
    final_norm=True,
    embedding_projection=False,
    sliding_window=True,
    wide_generator=True,
    check=_check_modern,
    task_heads="electra.finetuning.heads:MODERNBERT_TASK_HEADS",
    transformers="electra.model.hf:MODERNBERT_LAYOUT",
    finetuned="electra.finetuning.model_io:MODERNBERT_FINETUNED",
)

ARCHITECTURES: dict[str, Architecture] = {"bert": BERT, "modern": MODERN}


def get_architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise ElectraError(f"model.architecture must be one of {', '.join(ARCHITECTURES)}, "
                           f"got {name!r}")
    return ARCHITECTURES[name]


def register_architecture(record: Architecture) -> Architecture:
    """Make `record` a value of `model.architecture` (from then on, in this process)."""
    if ARCHITECTURES.get(record.name, record) != record:
        raise ElectraError(f"architecture {record.name!r} is already registered")
    ARCHITECTURES[record.name] = record
    return record

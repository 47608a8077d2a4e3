"""The encoder's shape: a `ModelConfig` (its `architecture` names a record of
`electra.architectures`: the BERT architecture, ModernBERT's, or one registered), the one record
every preset, objective, FLOPs count and export reads. Kept apart from `electra.config` so that
the presets (`electra.presets`) can be records of it while `electra.config` re-exports both, with
no import circle."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from electra.architectures import Architecture, get_architecture
from electra.errors import ElectraError

POSITION_BIASES = ("none", "alibi")

# Field metadata. FIXED_BY_CHECKPOINT: the model's shape, which a checkpoint fixes (`--init-from`
# takes it from there; the other fields are settings a run may change). NOT_IN_ELECTRACONFIG:
# a field Hugging Face's ElectraConfig does not hold (written under another name, or another
# architecture's).
FIXED_BY_CHECKPOINT = "fixed_by_checkpoint"
NOT_IN_ELECTRACONFIG = "not_in_electraconfig"


def _shape(default: Any, *, electraconfig: bool = True) -> Any:
    """A field a checkpoint fixes (and, `electraconfig=False`, one ElectraConfig lacks)."""
    metadata = {FIXED_BY_CHECKPOINT: True}
    if not electraconfig:
        metadata[NOT_IN_ELECTRACONFIG] = True
    return field(default=default, metadata=metadata)


@dataclass
class ModelConfig:
    """An encoder. Field names match Hugging Face's ElectraConfig; the modern architecture's
    own fields match ModernBertConfig's."""

    vocab_size: int = _shape(30522)
    embedding_size: int = _shape(128)
    hidden_size: int = _shape(256)
    num_hidden_layers: int = _shape(12)
    num_attention_heads: int = _shape(4)
    intermediate_size: int = _shape(1024)
    max_position_embeddings: int = _shape(512)
    type_vocab_size: int = _shape(2)
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = _shape(1e-12)
    initializer_range: float = 0.02
    pad_token_id: int = 0
    # Position information beyond the learned absolute embeddings: "none" (BERT/ELECTRA), or
    # "alibi" (Press et al. 2022, made symmetric for a bidirectional encoder): a fixed
    # -slope_h * |i - j| added to head h's attention scores, a locality prior from step 0.
    # Not part of Hugging Face's ELECTRA: such models are exported as remote code (model/hf.py),
    # and ElectraConfig reads it as position_embedding_type.
    position_bias: str = _shape("none", electraconfig=False)
    # With "alibi": the steepest head's slope (None: ALiBi's own, 2**(-8/heads)); the others
    # follow at ALiBi's ratio. Ours: `tiny`'s 2 heads get slopes 1/16 and 1/256, too flat to
    # make any head local; 1.0 gives 1 and 1/16 (docs/experiments/collapse.md).
    alibi_max_slope: float | None = _shape(None)
    # A name in `electra.architectures.ARCHITECTURES`: "bert" (post-LayerNorm, learned absolute
    # positions, GELU: BERT, ELECTRA) or "modern" (ModernBERT's: pre-LayerNorm without biases,
    # rotary positions, GeGLU, sliding-window attention with global attention every few layers).
    architecture: str = _shape("bert", electraconfig=False)
    # The modern architecture's (ModernBertConfig's names and defaults). Ignored by "bert".
    # Layer i attends globally when i % global_attn_every_n_layers == 0, else within a window of
    # `local_attention` tokens (keys at most local_attention // 2 positions away).
    global_attn_every_n_layers: int = _shape(3, electraconfig=False)
    local_attention: int = _shape(128, electraconfig=False)
    global_rope_theta: float = _shape(160_000.0, electraconfig=False)
    local_rope_theta: float = _shape(10_000.0, electraconfig=False)

    @property
    def arch(self) -> Architecture:
        """The record of `architecture` (ElectraError for a name none is registered under)."""
        return get_architecture(self.architecture)

    def validate(self) -> None:
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                     "num_attention_heads", "intermediate_size", "max_position_embeddings",
                     "type_vocab_size"):
            if getattr(self, name) < 1:
                raise ElectraError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ElectraError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by "
                f"model.num_attention_heads ({self.num_attention_heads})")
        if self.position_bias not in POSITION_BIASES:
            raise ElectraError(f"model.position_bias must be one of {', '.join(POSITION_BIASES)}"
                               f", got {self.position_bias!r}")
        if self.alibi_max_slope is not None and (self.position_bias != "alibi"
                                                 or self.alibi_max_slope <= 0):
            raise ElectraError(f"model.alibi_max_slope ({self.alibi_max_slope}) needs "
                               f"model.position_bias='alibi' and a positive value")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ElectraError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        arch = self.arch
        if arch.check is not None:
            arch.check(self)

    def is_global_layer(self, index: int) -> bool:
        """Whether layer `index` attends to the whole sequence (always, without a sliding
        window)."""
        return not self.arch.sliding_window or index % self.global_attn_every_n_layers == 0

    def scaled(self, multiplier: float) -> ModelConfig:
        """The generator's config: hidden and FFN sizes times `multiplier`, same depth and
        embedding size (Table 5.1, "Generator Size"). Heads keep the discriminator's head size,
        at least one head, as the official get_generator_config does (num_attention_heads =
        max(1, hidden // 64) with 64-wide heads in every preset), so any fraction that gives a
        whole hidden size works, e.g. 1/8 of `tiny` is one 16-wide head."""
        frac = Fraction(multiplier).limit_denominator(64)
        hidden = self.hidden_size * frac
        ffn = self.intermediate_size * frac
        head_size = self.hidden_size // self.num_attention_heads
        if hidden.denominator != 1 or ffn.denominator != 1 or hidden < 1:
            raise ElectraError(
                f"generator multiplier {multiplier} does not give whole sizes for this model "
                f"(hidden {self.hidden_size}, FFN {self.intermediate_size})")
        heads = max(1, int(hidden) // head_size)
        if int(hidden) % heads:
            raise ElectraError(f"generator multiplier {multiplier}: hidden size {int(hidden)} "
                               f"is not divisible into {heads} heads of {head_size}")
        # Without an embedding projection the embeddings are as wide as the encoder.
        embedding_size = self.embedding_size if self.arch.embedding_projection else int(hidden)
        return dataclasses.replace(self, hidden_size=int(hidden), intermediate_size=int(ffn),
                                   num_attention_heads=heads, embedding_size=embedding_size)


def fields_marked(key: str) -> tuple[str, ...]:
    """ModelConfig's fields whose metadata sets `key` (FIXED_BY_CHECKPOINT, NOT_IN_ELECTRACONFIG),
    in declaration order."""
    return tuple(f.name for f in dataclasses.fields(ModelConfig) if f.metadata.get(key))

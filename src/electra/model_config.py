"""The encoder's shape: a `ModelConfig` (the BERT architecture, or ModernBERT's), the one record
every preset, objective, FLOPs count and export reads. Kept apart from `electra.config` so that
the presets (`electra.presets`) can be records of it while `electra.config` re-exports both, with
no import circle."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from electra.errors import ElectraError

POSITION_BIASES = ("none", "alibi")
# "bert": post-LayerNorm, learned absolute positions, GELU (BERT, ELECTRA). "modern": ModernBERT's
# (Warner et al. 2024, section 2.1; `electra.model.modern`): pre-LayerNorm without biases,
# rotary positions, GeGLU, sliding-window attention with global attention every few layers.
ARCHITECTURES = ("bert", "modern")


@dataclass
class ModelConfig:
    """An encoder. Field names match Hugging Face's ElectraConfig; the modern architecture's
    own fields match ModernBertConfig's."""

    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    # Position information beyond the learned absolute embeddings: "none" (BERT/ELECTRA), or
    # "alibi" (Press et al. 2022, made symmetric for a bidirectional encoder): a fixed
    # -slope_h * |i - j| added to head h's attention scores, a locality prior from step 0.
    # Not part of Hugging Face's ELECTRA: such models are exported as remote code (model/hf.py).
    position_bias: str = "none"
    # With "alibi": the steepest head's slope (None: ALiBi's own, 2**(-8/heads)); the others
    # follow at ALiBi's ratio. Ours: `tiny`'s 2 heads get slopes 1/16 and 1/256, too flat to
    # make any head local; 1.0 gives 1 and 1/16 (docs/experiments/collapse.md).
    alibi_max_slope: float | None = None
    architecture: str = "bert"
    # The modern architecture's (ModernBertConfig's names and defaults). Ignored by "bert".
    # Layer i attends globally when i % global_attn_every_n_layers == 0, else within a window of
    # `local_attention` tokens (keys at most local_attention // 2 positions away).
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0

    @property
    def is_modern(self) -> bool:
        return self.architecture == "modern"

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
        if self.architecture not in ARCHITECTURES:
            raise ElectraError(f"model.architecture must be one of {', '.join(ARCHITECTURES)}, "
                               f"got {self.architecture!r}")
        if self.is_modern:
            self._validate_modern()

    def _validate_modern(self) -> None:
        if self.embedding_size != self.hidden_size:
            raise ElectraError(f"model.embedding_size ({self.embedding_size}) must equal "
                               f"model.hidden_size ({self.hidden_size}) for the modern "
                               f"architecture (it has no embedding projection)")
        if self.position_bias != "none":
            raise ElectraError("model.position_bias must be 'none' for the modern architecture "
                               "(its positions are rotary)")
        head_size = self.hidden_size // self.num_attention_heads
        if head_size % 2:
            raise ElectraError(f"model.hidden_size / model.num_attention_heads must be even for "
                               f"rotary positions, got {head_size}")
        if self.global_attn_every_n_layers < 1:
            raise ElectraError(f"model.global_attn_every_n_layers must be positive, got "
                               f"{self.global_attn_every_n_layers}")
        if self.local_attention < 2 or self.local_attention % 2:
            raise ElectraError(f"model.local_attention must be an even number >= 2 (the window, "
                               f"half on each side), got {self.local_attention}")
        for name in ("global_rope_theta", "local_rope_theta"):
            if getattr(self, name) <= 0:
                raise ElectraError(f"model.{name} must be positive, got {getattr(self, name)}")

    def is_global_layer(self, index: int) -> bool:
        """Whether layer `index` attends to the whole sequence (always, for "bert")."""
        return not self.is_modern or index % self.global_attn_every_n_layers == 0

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
        # The modern architecture has no embedding projection: its embeddings are as wide as it.
        embedding_size = int(hidden) if self.is_modern else self.embedding_size
        return dataclasses.replace(self, hidden_size=int(hidden), intermediate_size=int(ffn),
                                   num_attention_heads=heads, embedding_size=embedding_size)

"""Compute accounting with the dissertation's rules (section 5.2.2).

Objectives are compared at equal training compute, so every run counts FLOPs the way the paper
and the official google-research/electra `flops_computation.py` do:

- an operation is a mathematical operation (an `exp` costs as much as an `add`);
- an m x n matrix-vector multiply costs 2*m*n (no fused multiply-add discount);
- per-element costs: LayerNorm 5, GELU 8, softmax 5, dropout 4, bias/residual/scale 1;
- embedding lookups are dense (a one-hot vector times the table), so they cost 2*E*V per token;
- the backward pass costs the same as the forward pass, so a training step is 2x forward;
- the MLM output (dense H->E, GELU, LayerNorm, softmax over V with the tied E x V matrix) is
  computed only at the masked positions, a fraction `output_frac` of the sequence (officially
  max_predictions_per_seq / seq_len = 20 / 128 = 0.15625);
- the discriminator's binary head (dense H->H, GELU, H->1) runs on every position.

Two deliberate differences from the official script, both far below 0.1% of the total: the
attention-output LayerNorm is charged 5 FLOPs per element (the script charges 5 per token), and
the token-type embedding lookup uses `type_vocab_size` rows (the script hard-codes 2).

The modern architecture (ModernBERT's, `electra.model.modern`) is counted by the same rules for
what it computes instead: no biases (a LayerNorm without one costs 4 per element), rotary
positions (3.5 per rotated element: two products, a sum and the negation of half of them, plus
the cos/sin tables once per forward), windowed attention (only the query-key pairs within the
window), GeGLU (the GELU on half of Wi's output, then a product with the other half), a final
LayerNorm, and dropout only where its probability is above zero (ModernBERT trains without).

What differs between architectures is each one's record (`electra.architectures`): its
`flops` (an `EncoderCount`: the embeddings, each layer, the encoder's parameters), and its
`biases` and `final_norm`, from which the heads and the norm after the last layer are counted.

This module holds the rules only. Each objective composes them in its `step_flops_breakdown`
(`electra.objectives.objective_step_flops`, which the training loop logs), and
`electra.pretraining.flops_report.main_flops` is the `electra flops` command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from electra.architectures import Architecture
from electra.config import ModelConfig
from electra.errors import ElectraError

LAYER_NORM_FLOPS = 5  # mean (sum), variance (square, sum), scale, shift
ACTIVATION_FLOPS = 8  # tanh-approximated GELU
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide
DROPOUT_FLOPS = 4  # random number, compare, mask multiply, 1/(1-p) rescale
TRAIN_PASSES = 2  # forward + backward, with backward costed as forward
LAYER_NORM_NO_BIAS_FLOPS = 4  # the modern architecture's: no shift
ROTARY_FLOPS = 3.5  # x * cos + rotate_half(x) * sin, rotate_half negating half the elements
ROTARY_TABLE_FLOPS = 2.5  # per position and head dimension: angle (half of them), cos, sin
OFFICIAL_OUTPUT_FRAC = 20 / 128  # max_predictions_per_seq / seq_len in the official code


def _dropout(p: float) -> int:
    """What dropout costs per element in the modern architecture's count: nothing when off."""
    return DROPOUT_FLOPS if p > 0 else 0


class EncoderCount(NamedTuple):
    """What an architecture's count differs in (its record's `flops`): forward FLOPs of the
    embeddings (model, seq_len) and of layer `index` (model, seq_len, index) for one sequence,
    and the parameters of the embeddings and layers (model; the final norm's are added from the
    record's `final_norm`)."""

    embeddings: Callable[[ModelConfig, int], float]
    layer: Callable[[ModelConfig, int, int], float]
    params: Callable[[ModelConfig], int]


def _count(model: ModelConfig) -> EncoderCount:
    return model.arch.load("flops")


def _norm_flops(arch: Architecture) -> int:
    """Per element of a LayerNorm: with its shift, or without (no biases)."""
    return LAYER_NORM_FLOPS if arch.biases else LAYER_NORM_NO_BIAS_FLOPS


def embedding_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of the input embeddings for one sequence, including the E->H projection
    (the modern architecture's: the lookup, its LayerNorm and the rotary tables)."""
    return _count(model).embeddings(model, seq_len)


def bert_embedding_flops(model: ModelConfig, seq_len: int) -> float:
    """The BERT architecture's `embedding_flops`."""
    e, h, v = model.embedding_size, model.hidden_size, model.vocab_size
    per_token = (
        2 * e * v  # word lookup as a one-hot multiply
        + 2 * e * (seq_len + model.type_vocab_size)  # position and token-type lookups
        + 2 * e  # adding the three embeddings
        + LAYER_NORM_FLOPS * e
        + DROPOUT_FLOPS * e
    )
    if e != h:
        per_token += 2 * e * h + h  # embedding projection and its bias
    return float(per_token * seq_len)


def layer_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of one Transformer layer of the BERT architecture for one sequence."""
    h, i, heads, s = model.hidden_size, model.intermediate_size, model.num_attention_heads, seq_len
    attention = (
        3 * 2 * h * h + 3 * h  # query, key, value projections and biases
        + 2 * h * s  # scores: each query against every key, across all heads
        + (SOFTMAX_FLOPS + DROPOUT_FLOPS + 1) * s * heads  # softmax, dropout, 1/sqrt(d) scale
        + 2 * h * s  # probabilities times values
        + 2 * h * h + h  # output projection and bias
        + DROPOUT_FLOPS * h + h + LAYER_NORM_FLOPS * h  # dropout, residual, LayerNorm
    )
    ffn = (
        2 * h * i + i + ACTIVATION_FLOPS * i  # up projection, bias, GELU
        + 2 * i * h + h  # down projection and bias
        + DROPOUT_FLOPS * h + h + LAYER_NORM_FLOPS * h  # dropout, residual, LayerNorm
    )
    return float((attention + ffn) * s)


def bert_layer_flops_at(model: ModelConfig, seq_len: int, index: int) -> float:
    """`layer_flops`: every layer of the BERT architecture is alike."""
    return layer_flops(model, seq_len)


def layer_flops_at(model: ModelConfig, seq_len: int, index: int) -> float:
    """Forward FLOPs of layer `index` for one sequence (the modern architecture's layers differ:
    windowed or global, the first without an attention norm)."""
    return _count(model).layer(model, seq_len, index)


def final_norm_flops(model: ModelConfig, seq_len: int) -> float:
    """The LayerNorm after the last layer, where the architecture has one (the modern one; the
    BERT one has none)."""
    arch = model.arch
    return float(_norm_flops(arch) * model.hidden_size * seq_len) if arch.final_norm else 0.0


def layers_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of all the layers for one sequence, and what follows them."""
    return (sum(layer_flops_at(model, seq_len, i) for i in range(model.num_hidden_layers))
            + final_norm_flops(model, seq_len))


def encoder_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of embeddings plus all layers (no head) for one sequence."""
    return embedding_flops(model, seq_len) + layers_flops(model, seq_len)


def attended_pairs(seq_len: int, half_window: int | None) -> int:
    """Query-key pairs attention computes for one sequence: every pair, or within a window
    those at most `half_window` apart."""
    if half_window is None or half_window >= seq_len - 1:
        return seq_len * seq_len
    return sum(min(seq_len - 1, i + half_window) - max(0, i - half_window) + 1
               for i in range(seq_len))


def modern_embedding_flops(model: ModelConfig, seq_len: int) -> float:
    h, v = model.hidden_size, model.vocab_size
    per_token = (2 * h * v  # word lookup as a one-hot multiply
                 + LAYER_NORM_NO_BIAS_FLOPS * h + _dropout(model.hidden_dropout_prob) * h)
    head_dim = h // model.num_attention_heads
    kinds = len({model.is_global_layer(i) for i in range(model.num_hidden_layers)})
    tables = kinds * ROTARY_TABLE_FLOPS * head_dim  # global and local cos/sin, per position
    return float((per_token + tables) * seq_len)


def modern_layer_flops(model: ModelConfig, seq_len: int, index: int) -> float:
    """Forward FLOPs of the modern architecture's layer `index` for one sequence."""
    h, i, heads, s = model.hidden_size, model.intermediate_size, model.num_attention_heads, seq_len
    half = None if model.is_global_layer(index) else model.local_attention // 2
    pairs = attended_pairs(s, half)
    attn_p, ffn_p = model.attention_probs_dropout_prob, model.hidden_dropout_prob
    per_token = (
        (LAYER_NORM_NO_BIAS_FLOPS * h if index > 0 else 0)  # the first layer has no norm
        + 3 * 2 * h * h  # fused query, key, value projection
        + 2 * ROTARY_FLOPS * h  # rotary positions on queries and keys
        + 2 * h * h + _dropout(attn_p) * h + h  # output projection, dropout, residual
        + LAYER_NORM_NO_BIAS_FLOPS * h
        + 2 * h * 2 * i  # Wi: GELU input and gate
        + ACTIVATION_FLOPS * i + i + _dropout(ffn_p) * i  # GELU, gating product, dropout
        + 2 * i * h + h  # Wo, residual
    )
    per_pair = (2 * h + 2 * h  # scores and probabilities times values, across all heads
                + (SOFTMAX_FLOPS + _dropout(attn_p) + 1) * heads)  # softmax, dropout, scale
    return float(per_token * s + per_pair * pairs)


def mlm_head_flops(model: ModelConfig, seq_len: int, output_frac: float) -> float:
    """Forward FLOPs of the MLM output; only `output_frac` of positions are predicted."""
    e, h, v = model.embedding_size, model.hidden_size, model.vocab_size
    arch = model.arch
    per_token = (
        2 * h * e + (e if arch.biases else 0)  # dense H->E and bias
        + ACTIVATION_FLOPS * e
        + _norm_flops(arch) * e
        + 2 * e * v  # logits with the tied E x V embedding matrix
        + SOFTMAX_FLOPS * v
        + 2 * v  # picking out the target word's log-probability
    )
    return float(output_frac * per_token * seq_len)


def binary_head_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of the replaced-token-detection head; it scores every position. Without
    biases (the modern architecture) it is ModernBERT's: no bias in its dense layer, and a
    LayerNorm after the GELU."""
    h = model.hidden_size
    per_token = 2 * h * h + h + ACTIVATION_FLOPS * h + 2 * h
    if not model.arch.biases:
        per_token += LAYER_NORM_NO_BIAS_FLOPS * h - h
    return float(per_token * seq_len)


def encoder_params(model: ModelConfig) -> int:
    """Parameters the encoder stores, as in Hugging Face's ElectraModel.

    Included: word, position (`max_position_embeddings` rows) and token-type embeddings, the
    embedding LayerNorm, the E->H projection when E != H, and every layer (attention and FFN
    weights and biases, two LayerNorms). Excluded: pre-training and task heads. This is the
    convention behind Table 5.3's "14M" for ELECTRA-Small (13.5M here) and "110M" for Base.
    The modern architecture's, as ModernBertModel's: word embeddings and their LayerNorm, the
    layers (no biases; the first without an attention norm), the final LayerNorm.
    """
    arch = model.arch
    final_norm = model.hidden_size * (2 if arch.biases else 1) if arch.final_norm else 0
    return _count(model).params(model) + final_norm


def bert_params(model: ModelConfig) -> int:
    """The BERT architecture's `encoder_params`."""
    e, h, i = model.embedding_size, model.hidden_size, model.intermediate_size
    embeddings = (model.vocab_size + model.max_position_embeddings + model.type_vocab_size) * e
    embeddings += 2 * e  # LayerNorm
    if e != h:
        embeddings += e * h + h
    layer = 4 * (h * h + h) + 2 * h  # Q, K, V, output; LayerNorm
    layer += h * i + i + i * h + h + 2 * h  # FFN; LayerNorm
    return embeddings + model.num_hidden_layers * layer


def modern_params(model: ModelConfig) -> int:
    """The modern architecture's embeddings and layers (`encoder_params` adds the final norm)."""
    h, i = model.hidden_size, model.intermediate_size
    layer = 4 * h * h + 3 * h * i + 2 * h  # QKV, Wo, Wi (2I), Wo; two norms
    embeddings = model.vocab_size * h + h  # and their LayerNorm
    first_layer_norm = h  # the one layer 0 lacks
    return embeddings + model.num_hidden_layers * layer - first_layer_norm


BERT_COUNT = EncoderCount(bert_embedding_flops, bert_layer_flops_at, bert_params)
MODERN_COUNT = EncoderCount(modern_embedding_flops, modern_layer_flops, modern_params)


def check_counting(model: ModelConfig, steps: int, batch_size: int, seq_len: int) -> None:
    """The arguments of a count that would make no sense, as ElectraError."""
    if steps < 0 or batch_size < 1 or seq_len < 1:
        raise ElectraError(
            f"FLOP counting needs steps >= 0, batch size >= 1 and seq len >= 1; got "
            f"steps={steps}, batch_size={batch_size}, seq_len={seq_len}")
    if seq_len > model.max_position_embeddings:
        raise ElectraError(
            f"seq len {seq_len} exceeds model.max_position_embeddings "
            f"({model.max_position_embeddings})")


def output_frac_for(mask_prob: float) -> float:
    """Share of positions whose MLM output is computed: the official 20/128 at 15% masking,
    scaled in proportion for other masking rates (e.g. Large's 25%)."""
    return OFFICIAL_OUTPUT_FRAC * mask_prob / 0.15


def copy_head_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of All-Tokens MLM's copy mechanism (section 5.4.3) at every position: a
    sigmoid layer H->1 for the copy probability D, and mixing D * [copy] + (1 - D) * softmax
    at the target word."""
    h = model.hidden_size
    per_token = 2 * h + 1 + 4 + 4  # dense H->1 and bias; sigmoid; 1-D, two products, a sum
    return float(per_token * seq_len)


def mlm_model_breakdown(prefix: str, model: ModelConfig, batch_size: int, seq_len: int,
                        output_frac: float, passes: int = TRAIN_PASSES,
                        head: str = "head") -> dict[str, float]:
    """A masked LM (embeddings, layers, the MLM head on `output_frac` of positions) as
    {prefix.embeddings, prefix.layers, prefix.HEAD}; `passes` is 2 for a trained network
    (forward + backward) and 1 for a frozen one."""
    scale = passes * batch_size
    return {
        f"{prefix}.embeddings": scale * embedding_flops(model, seq_len),
        f"{prefix}.layers": scale * layers_flops(model, seq_len),
        f"{prefix}.{head}": scale * mlm_head_flops(model, seq_len, output_frac),
    }


def discriminator_breakdown(prefix: str, model: ModelConfig, batch_size: int, seq_len: int,
                            passes: int = TRAIN_PASSES) -> dict[str, float]:
    """A replaced-token-detection discriminator: embeddings, layers, binary head everywhere."""
    scale = passes * batch_size
    return {
        f"{prefix}.embeddings": scale * embedding_flops(model, seq_len),
        f"{prefix}.layers": scale * layers_flops(model, seq_len),
        f"{prefix}.head": scale * binary_head_flops(model, seq_len),
    }

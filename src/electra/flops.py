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

This module holds the rules only. Each objective composes them in its `step_flops_breakdown`
(`electra.objectives.objective_step_flops`, which the training loop logs), and
`electra.pretrain.flops_report.main_flops` is the `electra flops` command.
"""

from __future__ import annotations

from electra.config import ModelConfig
from electra.errors import ElectraError

LAYER_NORM_FLOPS = 5  # mean (sum), variance (square, sum), scale, shift
ACTIVATION_FLOPS = 8  # tanh-approximated GELU
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide
DROPOUT_FLOPS = 4  # random number, compare, mask multiply, 1/(1-p) rescale
TRAIN_PASSES = 2  # forward + backward, with backward costed as forward
OFFICIAL_OUTPUT_FRAC = 20 / 128  # max_predictions_per_seq / seq_len in the official code


def embedding_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of the input embeddings for one sequence, including the E->H projection."""
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
    """Forward FLOPs of one Transformer layer for one sequence."""
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


def encoder_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of embeddings plus all layers (no head) for one sequence."""
    return embedding_flops(model, seq_len) + model.num_hidden_layers * layer_flops(model, seq_len)


def mlm_head_flops(model: ModelConfig, seq_len: int, output_frac: float) -> float:
    """Forward FLOPs of the MLM output; only `output_frac` of positions are predicted."""
    e, h, v = model.embedding_size, model.hidden_size, model.vocab_size
    per_token = (
        2 * h * e + e  # dense H->E and bias
        + ACTIVATION_FLOPS * e
        + LAYER_NORM_FLOPS * e
        + 2 * e * v  # logits with the tied E x V embedding matrix
        + SOFTMAX_FLOPS * v
        + 2 * v  # picking out the target word's log-probability
    )
    return float(output_frac * per_token * seq_len)


def binary_head_flops(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs of the replaced-token-detection head; it scores every position."""
    h = model.hidden_size
    per_token = 2 * h * h + h + ACTIVATION_FLOPS * h + 2 * h
    return float(per_token * seq_len)


def encoder_params(model: ModelConfig) -> int:
    """Parameters the encoder stores, as in Hugging Face's ElectraModel.

    Included: word, position (`max_position_embeddings` rows) and token-type embeddings, the
    embedding LayerNorm, the E->H projection when E != H, and every layer (attention and FFN
    weights and biases, two LayerNorms). Excluded: pre-training and task heads. This is the
    convention behind Table 5.3's "14M" for ELECTRA-Small (13.5M here) and "110M" for Base.
    """
    e, h, i = model.embedding_size, model.hidden_size, model.intermediate_size
    embeddings = (model.vocab_size + model.max_position_embeddings + model.type_vocab_size) * e
    embeddings += 2 * e  # LayerNorm
    if e != h:
        embeddings += e * h + h
    layer = 4 * (h * h + h) + 2 * h  # Q, K, V, output; LayerNorm
    layer += h * i + i + i * h + h + 2 * h  # FFN; LayerNorm
    return embeddings + model.num_hidden_layers * layer


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
        f"{prefix}.layers": scale * model.num_hidden_layers * layer_flops(model, seq_len),
        f"{prefix}.{head}": scale * mlm_head_flops(model, seq_len, output_frac),
    }


def discriminator_breakdown(prefix: str, model: ModelConfig, batch_size: int, seq_len: int,
                            passes: int = TRAIN_PASSES) -> dict[str, float]:
    """A replaced-token-detection discriminator: embeddings, layers, binary head everywhere."""
    scale = passes * batch_size
    return {
        f"{prefix}.embeddings": scale * embedding_flops(model, seq_len),
        f"{prefix}.layers": scale * model.num_hidden_layers * layer_flops(model, seq_len),
        f"{prefix}.head": scale * binary_head_flops(model, seq_len),
    }

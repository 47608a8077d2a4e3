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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from electra.config import ModelConfig, get_preset
from electra.errors import ElectraError

LAYER_NORM_FLOPS = 5  # mean (sum), variance (square, sum), scale, shift
ACTIVATION_FLOPS = 8  # tanh-approximated GELU
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide
DROPOUT_FLOPS = 4  # random number, compare, mask multiply, 1/(1-p) rescale
TRAIN_PASSES = 2  # forward + backward, with backward costed as forward
OFFICIAL_OUTPUT_FRAC = 20 / 128  # max_predictions_per_seq / seq_len in the official code

OBJECTIVES = ("electra", "mlm")


@dataclass
class FlopReport:
    """FLOPs and size of one pre-training run.

    `infer_flops` is the encoder alone; `infer_flops_with_head` adds a per-token binary
    classifier, the official script's `get_infer_flops` convention (Table 5.3's 3.7e9 for Small
    is 3.68e9 with it, 3.66e9 without). `breakdown` holds training FLOPs per optimizer step by
    component (e.g. "discriminator.layers"), so one can see where the compute goes.
    """

    train_flops: float
    infer_flops: float
    params: int
    train_flops_per_step: float
    generator_params: int = 0
    infer_flops_with_head: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)


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


def _check(model: ModelConfig, objective: str, steps: int, batch_size: int, seq_len: int,
           output_frac: float) -> None:
    if objective not in OBJECTIVES:
        raise ElectraError(
            f"unknown objective {objective!r} for FLOP counting; choose one of: "
            f"{', '.join(OBJECTIVES)}")
    if steps < 0 or batch_size < 1 or seq_len < 1:
        raise ElectraError(
            f"FLOP counting needs steps >= 0, batch size >= 1 and seq len >= 1; got "
            f"steps={steps}, batch_size={batch_size}, seq_len={seq_len}")
    if seq_len > model.max_position_embeddings:
        raise ElectraError(
            f"seq len {seq_len} exceeds model.max_position_embeddings "
            f"({model.max_position_embeddings})")
    if not 0.0 <= output_frac <= 1.0:
        raise ElectraError(f"output_frac must be in [0, 1], got {output_frac}")


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


def step_breakdown(model: ModelConfig, objective: str = "electra", batch_size: int = 1,
                   seq_len: int = 128, generator: ModelConfig | None = None,
                   output_frac: float = OFFICIAL_OUTPUT_FRAC) -> dict[str, float]:
    """Training FLOPs (forward + backward) of one optimizer step, by component.

    For "electra" the generator has its own embedding lookups and, when its hidden size differs
    from the shared embedding size, its own E->H projection, as in the official accounting.
    """
    _check(model, objective, 1, batch_size, seq_len, output_frac)
    if objective == "mlm":
        return mlm_model_breakdown("model", model, batch_size, seq_len, output_frac,
                                   head="mlm_head")
    if generator is None:
        raise ElectraError("the electra objective needs a generator config to count FLOPs")
    if generator.embedding_size != model.embedding_size:
        raise ElectraError(
            f"generator embedding size {generator.embedding_size} differs from the "
            f"discriminator's {model.embedding_size}; ELECTRA ties the embeddings")
    return {**discriminator_breakdown("discriminator", model, batch_size, seq_len),
            **mlm_model_breakdown("generator", generator, batch_size, seq_len, output_frac)}


def step_flops(model: ModelConfig, objective: str = "electra", batch_size: int = 1,
               seq_len: int = 128, generator: ModelConfig | None = None,
               output_frac: float = OFFICIAL_OUTPUT_FRAC) -> float:
    """Training FLOPs of one optimizer step; the loop multiplies by steps taken to log the
    cumulative count. `batch_size` is the examples per optimizer step (all devices, all
    accumulation micro-batches), and `seq_len` the padded length the model actually runs."""
    return sum(step_breakdown(model, objective, batch_size, seq_len, generator,
                              output_frac).values())


def count_flops(model: ModelConfig, objective: str = "electra", steps: int = 1,
                batch_size: int = 1, seq_len: int = 128, generator: ModelConfig | None = None,
                output_frac: float = OFFICIAL_OUTPUT_FRAC) -> FlopReport:
    """Training and inference FLOPs and the encoder's size, as in Table 5.3.

    `infer_flops` is one forward pass of the encoder (embeddings and layers, no head) on a single
    example of length `seq_len`; `params` is `encoder_params(model)`.
    """
    _check(model, objective, steps, batch_size, seq_len, output_frac)
    breakdown = step_breakdown(model, objective, batch_size, seq_len, generator, output_frac)
    per_step = sum(breakdown.values())
    return FlopReport(
        train_flops=per_step * steps,
        infer_flops=encoder_flops(model, seq_len),
        params=encoder_params(model),
        train_flops_per_step=per_step,
        generator_params=encoder_params(generator) if objective == "electra" and generator else 0,
        infer_flops_with_head=encoder_flops(model, seq_len) + binary_head_flops(model, seq_len),
        breakdown=breakdown,
    )


def main_flops(preset: str, objective: str, steps: int | None, batch_size: int | None,
               seq_len: int | None, vocab_size: int = 30522,
               overrides: dict | None = None) -> dict:
    """The `electra flops` command: a preset's compute budget as a JSON-able dict.

    Missing values come from the preset (Table 5.1): BERT's step count for "mlm" and ELECTRA's
    otherwise, its batch size and sequence length, mask rate and generator multiplier.
    `overrides` are objective config fields (e.g. {"generator": "unigram"}); the count is the
    objective class's own `step_flops_breakdown`, the same the training loop logs.
    """
    import dataclasses

    from electra.config import OBJECTIVE_NAMES, ObjectiveConfig, merge
    from electra.objectives import objective_step_flops, resolved
    from electra.objectives.generators import generator_config

    p = get_preset(preset)
    if vocab_size < 1:
        raise ElectraError(f"vocab size must be positive, got {vocab_size}")
    if objective not in OBJECTIVE_NAMES:
        raise ElectraError(
            f"unknown objective {objective!r}; choose one of: {', '.join(OBJECTIVE_NAMES)}")
    model = dataclasses.replace(p.model, vocab_size=vocab_size)
    obj_cfg = ObjectiveConfig(name=objective, mask_prob=p.mask_prob,
                              generator_multiplier=p.generator_multiplier)
    merge(obj_cfg, dict(overrides or {}), where="objective")
    obj_cfg.validate()
    if steps is None:
        steps = p.bert_steps if objective == "mlm" else p.electra_steps
    batch_size = p.batch_size if batch_size is None else batch_size
    seq_len = p.seq_len if seq_len is None else seq_len
    _check(model, "mlm", steps, batch_size, seq_len, 0.0)
    breakdown = objective_step_flops(model, obj_cfg, batch_size, seq_len)
    per_step = sum(breakdown.values())
    has_generator = (objective in ("electra", "electra-15", "replace-mlm", "all-tokens-mlm")
                     and obj_cfg.generator == "mlm")
    return {
        "preset": preset,
        "objective": objective,
        "steps": steps,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "vocab_size": vocab_size,
        "train_flops": per_step * steps,
        "infer_flops": encoder_flops(model, seq_len),
        "infer_flops_with_head": encoder_flops(model, seq_len) + binary_head_flops(model,
                                                                                    seq_len),
        "params": encoder_params(model),
        "generator_params": (encoder_params(generator_config(model, obj_cfg))
                             if has_generator else 0),
        "train_flops_per_step": per_step,
        "output_frac": output_frac_for(obj_cfg.mask_prob),
        "objective_config": dataclasses.asdict(resolved(obj_cfg)),
        "breakdown": breakdown,
    }

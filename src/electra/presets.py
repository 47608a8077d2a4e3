"""Model presets: one record per size, from its architecture to its fine-tuning defaults.

A preset of a new size is one record in `PRESETS`; everything that asks "which sizes are
there?" (the command line's --preset and --size, the per-size defaults of `electra finetune`
and `electra multitask`) reads this dict. See docs/pretraining.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from electra.errors import ElectraError
from electra.model_config import ModelConfig


@dataclass
class Preset:
    """A model size: its architecture, how it is pre-trained, and how it is fine-tuned."""

    model: ModelConfig
    # Pre-training (Table 5.1).
    generator_multiplier: float
    mask_prob: float
    learning_rate: float
    batch_size: int
    seq_len: int
    warmup_steps: int
    electra_steps: int
    bert_steps: int
    # Fine-tuning a model of this size: peak learning rate and layer-wise LR decay, single-task
    # (Table 5.2) and multi-task (BAM, section 3.3: lr 1e-4 and decay 0.9 for Large, scaled by
    # size as Table 5.2 scales single-task fine-tuning).
    finetune_lr: float
    finetune_layerwise_decay: float
    multitask_lr: float
    multitask_layerwise_decay: float
    # Objective settings of this preset that belong to one objective (objective name -> its
    # `ObjectiveConfig` fields): they apply when that objective trains and to no other, so
    # `--objective X` on any preset trains X with X's own settings.
    objective_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The generator's depth (None: the model's). The modern presets' generators are as wide as
    # the model and half as deep, as DeBERTa-V3's (He et al. 2021, section 5.1).
    generator_layers: int | None = None
    # The size this preset only changes the training of (None: it is a size of its own); its
    # fine-tuning defaults are that size's, and `--size` does not offer it.
    variant_of: str | None = None


# Table 5.1 (Small, Base, Large) and Table 5.2 (their fine-tuning). `tiny` is ours, for CPUs:
# its generator is 1/2 the width because 1/4 of two attention heads is not a whole head, and it
# fine-tunes with Small's values.
_TINY = Preset(ModelConfig(embedding_size=128, hidden_size=128, num_hidden_layers=4,
                           num_attention_heads=2, intermediate_size=512),
               generator_multiplier=0.5, mask_prob=0.15, learning_rate=1e-3,
               batch_size=32, seq_len=128, warmup_steps=100, electra_steps=2000,
               bert_steps=2000, finetune_lr=3e-4, finetune_layerwise_decay=0.8,
               multitask_lr=3e-4, multitask_layerwise_decay=0.9)



def _modern(size: Preset, num_layers: int, intermediate_size: int) -> Preset:
    """`size`'s width, heads and training with ModernBERT's architecture and defaults
    (ModernBertConfig: 8,192 positions, no dropout, LayerNorm eps 1e-5); a generator as wide
    and half as deep (DeBERTa-V3), sharing the token embeddings. Fine-tuning defaults are
    `size`'s (a variant of it)."""
    model = dataclasses.replace(
        size.model, architecture="modern", embedding_size=size.model.hidden_size,
        num_hidden_layers=num_layers, intermediate_size=intermediate_size,
        max_position_embeddings=8192, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, layer_norm_eps=1e-5)
    name = next(n for n, p in _SIZES_BY_NAME.items() if p is size)
    return dataclasses.replace(size, model=model, generator_multiplier=1.0,
                               generator_layers=num_layers // 2, variant_of=name)


_SMALL = Preset(ModelConfig(embedding_size=128, hidden_size=256, num_hidden_layers=12,
                            num_attention_heads=4, intermediate_size=1024),
                generator_multiplier=1 / 4, mask_prob=0.15, learning_rate=5e-4,
                batch_size=128, seq_len=128, warmup_steps=10000, electra_steps=1_000_000,
                bert_steps=1_450_000, finetune_lr=3e-4, finetune_layerwise_decay=0.8,
                multitask_lr=3e-4, multitask_layerwise_decay=0.9)
_BASE = Preset(ModelConfig(embedding_size=768, hidden_size=768, num_hidden_layers=12,
                           num_attention_heads=12, intermediate_size=3072),
               generator_multiplier=1 / 3, mask_prob=0.15, learning_rate=2e-4,
               batch_size=256, seq_len=512, warmup_steps=10000, electra_steps=766_000,
               bert_steps=1_000_000, finetune_lr=1e-4, finetune_layerwise_decay=0.8,
               multitask_lr=1e-4, multitask_layerwise_decay=0.9)
_SIZES_BY_NAME = {"tiny": _TINY, "small": _SMALL, "base": _BASE}

PRESETS: dict[str, Preset] = {
    "tiny": _TINY,
    # `tiny` with the two departures that let it learn context at small budgets
    # (docs/experiments/collapse.md): ALiBi with one local head (slopes 1 and 1/16), and a
    # base-rate discriminator bias. Exports load in our tools, and in `transformers` as remote
    # code (its ELECTRA classes have no ALiBi bias).
    "tiny-local": dataclasses.replace(
        _TINY, model=dataclasses.replace(_TINY.model, position_bias="alibi",
                                         alibi_max_slope=1.0),
        objective_defaults={"electra": {"disc_bias_init": "base-rate"}}, variant_of="tiny"),
    "small": _SMALL,
    "base": _BASE,
    "large": Preset(ModelConfig(embedding_size=1024, hidden_size=1024, num_hidden_layers=24,
                                num_attention_heads=16, intermediate_size=4096),
                    generator_multiplier=1 / 4, mask_prob=0.25, learning_rate=2e-4,
                    batch_size=2048, seq_len=512, warmup_steps=10000, electra_steps=400_000,
                    bert_steps=464_000, finetune_lr=5e-5, finetune_layerwise_decay=0.9,
                    multitask_lr=1e-4, multitask_layerwise_decay=0.9),
    # ModernBERT's architecture (docs/modern.md). base-modern is ModernBERT-base's shape: 22
    # layers, hidden 768, intermediate 1,152 (GeGLU: Wi is 768 x 2,304), 12 heads. The smaller
    # ones follow its rules: head size 64, intermediate 1.5 x hidden, and 1.3 x the layer
    # parameters of the BERT-architecture size of the same width (ModernBERT-base's 22 x 8.5 H^2
    # against BERT-base's 12 x 12 H^2), rounded to 3k + 1 layers so that the first and the
    # last layer attend globally (as in ModernBERT-base and -large): small 12 x 12 x 1.3 / 8.5
    # = 22 layers, tiny 4 x 12 x 1.3 / 8.5 = 7.3 -> 7.
    "tiny-modern": _modern(_TINY, num_layers=7, intermediate_size=192),
    "small-modern": _modern(_SMALL, num_layers=22, intermediate_size=384),
    "base-modern": _modern(_BASE, num_layers=22, intermediate_size=1152),
}

# The model sizes (what fine-tuning's --size takes): every preset that is not a variant.
SIZES: tuple[str, ...] = tuple(name for name, p in PRESETS.items() if p.variant_of is None)

# What `electra demo --preset` offers: `tiny-local` (the default: its discriminator learns
# context within the demo's budget) and `tiny` (plain BERT architecture, loads in transformers).
DEMO_PRESETS = ("tiny", "tiny-local")


def get_preset(name: str) -> Preset:
    """A copy of preset `name` (its model config too), free to modify."""
    if name not in PRESETS:
        raise ElectraError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name], model=dataclasses.replace(PRESETS[name].model))


def _size(name: str) -> Preset:
    if name not in PRESETS:
        raise ElectraError(f"unknown model size {name!r}; choose one of {', '.join(SIZES)}")
    return PRESETS[name]


def finetune_defaults(size: str) -> tuple[float, float]:
    """(learning rate, layer-wise LR decay) for fine-tuning a model of `size` (Table 5.2)."""
    p = _size(size)
    return p.finetune_lr, p.finetune_layerwise_decay


def multitask_defaults(size: str) -> tuple[float, float]:
    """(learning rate, layer-wise LR decay) for multi-task fine-tuning (BAM, section 3.3)."""
    p = _size(size)
    return p.multitask_lr, p.multitask_layerwise_decay


def infer_size(hidden_size: int) -> str:
    """The smallest size at least `hidden_size` wide (the largest if none is), for a model whose
    size is not given: tiny 128, small 256, base 768, large 1024 (Table 5.1)."""
    by_width = sorted(SIZES, key=lambda name: PRESETS[name].model.hidden_size)
    for name in by_width:
        if hidden_size <= PRESETS[name].model.hidden_size:
            return name
    return by_width[-1]


def infer_preset(model: ModelConfig) -> str:
    """The preset whose recipe continues a checkpoint of shape `model` (`--init-from` without
    `--preset`): its size by width (`infer_size`), and of that size the variant named after the
    architecture ("SIZE-ARCHITECTURE", e.g. `tiny-modern`) where there is one."""
    size = infer_size(model.hidden_size)
    variant = f"{size}-{model.architecture}"
    return variant if variant in PRESETS else size

"""The presets are records (electra.presets): each size's pre-training recipe (Table 5.1) and
fine-tuning defaults (Table 5.2, section 3.3), and the command line offers what the registries
hold."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from electra.cli import build_parser
from electra.config import GENERATOR_KINDS, OBJECTIVES, PretrainConfig
from electra.errors import ElectraError
from electra.presets import (
    PRESETS,
    SIZES,
    finetune_defaults,
    get_preset,
    infer_size,
    multitask_defaults,
)


def test_sizes_are_the_presets_that_are_not_variants():
    assert tuple(PRESETS) == ("tiny", "tiny-local", "small", "base", "large", "tiny-modern",
                              "small-modern", "base-modern")
    assert SIZES == ("tiny", "small", "base", "large")


def test_modern_presets_keep_their_sizes_width_and_training():
    """Each modern preset is its size's width, heads and training recipe with ModernBERT's
    architecture, and a generator as wide and half as deep (DeBERTa-V3)."""
    for size in ("tiny", "small", "base"):
        bert, modern = PRESETS[size], PRESETS[f"{size}-modern"]
        assert modern.variant_of == size and modern.model.architecture == "modern"
        assert (modern.model.hidden_size, modern.model.num_attention_heads) == (
            bert.model.hidden_size, bert.model.num_attention_heads)
        assert modern.model.intermediate_size * 2 == 3 * modern.model.hidden_size
        assert modern.model.num_hidden_layers % 3 == 1  # first and last layers global
        assert (modern.learning_rate, modern.batch_size, modern.seq_len) == (
            bert.learning_rate, bert.batch_size, bert.seq_len)
        assert (modern.generator_multiplier, modern.generator_layers) == (
            1.0, modern.model.num_hidden_layers // 2)


def test_tiny_local_departs_from_tiny_only_in_alibi_and_the_bias():
    tiny, local = dataclasses.asdict(PRESETS["tiny"]), dataclasses.asdict(PRESETS["tiny-local"])
    model_diff = {k: v for k, v in local.pop("model").items() if tiny["model"][k] != v}
    tiny.pop("model")
    assert model_diff == {"position_bias": "alibi", "alibi_max_slope": 1.0}
    assert {k: v for k, v in local.items() if tiny[k] != v} == {
        "objective_defaults": {"electra": {"disc_bias_init": "base-rate"}}, "variant_of": "tiny"}
    cfg = PretrainConfig.from_preset("tiny-local")
    cfg.validate()
    assert (cfg.model.position_bias, cfg.objective.disc_bias_init) == ("alibi", "base-rate")


def test_finetuning_defaults_by_size():
    """Table 5.2: lr 3e-4 Small, 1e-4 Base, 5e-5 Large, layer-wise decay 0.8 (0.9 Large);
    multi-task (section 3.3) 1e-4 and 0.9 for Large, scaled down by size as Table 5.2 is."""
    assert {s: finetune_defaults(s) for s in SIZES} == {
        "tiny": (3e-4, 0.8), "small": (3e-4, 0.8), "base": (1e-4, 0.8), "large": (5e-5, 0.9)}
    assert {s: multitask_defaults(s) for s in SIZES} == {
        "tiny": (3e-4, 0.9), "small": (3e-4, 0.9), "base": (1e-4, 0.9), "large": (1e-4, 0.9)}
    assert finetune_defaults("tiny-local") == finetune_defaults("tiny")
    with pytest.raises(ElectraError, match="unknown model size 'huge'"):
        finetune_defaults("huge")


def test_size_from_the_hidden_width():
    assert [infer_size(h) for h in (64, 128, 129, 256, 512, 768, 1024, 2048)] == [
        "tiny", "tiny", "small", "small", "base", "base", "large", "large"]


def test_get_preset_is_a_copy():
    p = get_preset("small")
    p.model.hidden_size = 7
    p.batch_size = 1
    assert (PRESETS["small"].model.hidden_size, PRESETS["small"].batch_size) == (256, 128)


def _options(command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {s: a for a in sub.choices[command]._actions for s in a.option_strings}


def test_command_line_choices_come_from_the_registries():
    from electra.scoring import SCORER_NAMES
    from electra.tasks import task_names

    for command in ("pretrain", "flops"):
        assert tuple(_options(command)["--preset"].choices) == tuple(PRESETS)
        assert tuple(_options(command)["--objective"].choices) == tuple(OBJECTIVES)
    assert tuple(_options("flops")["--generator"].choices) == GENERATOR_KINDS
    for command in ("finetune", "multitask"):
        assert tuple(_options(command)["--size"].choices) == SIZES
    for command in ("score", "minimal-pairs", "rerank"):
        assert tuple(_options(command)["--scorer"].choices) == SCORER_NAMES
    for command in ("finetune", "evaluate", "predict"):
        assert all(name in _options(command)["--task"].help for name in task_names())

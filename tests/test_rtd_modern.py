"""The RTD-against-MLM study's variants (experiments.rtd_modern) are valid `tiny-modern`
configurations at equal training FLOPs, and its WikiGold check reads the shared file."""

from __future__ import annotations

import pytest

from electra.objectives import objective_step_flops
from experiments import context_study, rtd_modern


def config(variant: str):
    overrides = {**rtd_modern.MODERN, **rtd_modern.VARIANTS[variant][0]}
    cfg = context_study.variant_config(overrides, seed=1, seq_len=128, vocab_size=8192,
                                       budget_steps=rtd_modern.BUDGET_STEPS)
    cfg.validate()
    return cfg


@pytest.mark.parametrize("variant", list(rtd_modern.VARIANTS))
def test_every_variant_is_tiny_modern_at_the_demo_budget(variant):
    cfg = config(variant)
    assert cfg.model.architecture == "modern" and cfg.model.num_hidden_layers == 7
    per_step = sum(objective_step_flops(cfg.model, cfg.objective, 32, 128).values())
    budget = rtd_modern.BUDGET_STEPS * sum(objective_step_flops(
        context_study.variant_config({}, 1, 128, 8192).model,
        context_study.variant_config({}, 1, 128, 8192).objective, 32, 128).values())
    assert abs(cfg.train.steps * per_step - budget) <= per_step / 2  # equal FLOPs, to a step


def test_the_budget_is_800_tiny_modern_electra_steps_and_mlm_buys_1321():
    assert config("electra").train.steps == 799
    assert config("mlm").train.steps == 1321
    assert config("gen1").train.steps == 872  # a one-layer generator costs less per step
    assert config("share-all").objective.generator_layers is None  # the whole network


def test_the_ner_check_reads_wikigold_split_by_article(tmp_path):
    from tests.test_document_split import WIKIGOLD_DIR

    if not WIKIGOLD_DIR.is_dir():
        pytest.skip("WikiGold not in ../shared/data/wikigold")
    data = rtd_modern.check_data(tmp_path, "ner")
    assert sorted(p.name for p in data.iterdir()) == ["dev.txt", "split.json", "test.txt",
                                                      "train.txt"]

"""The context study's ladder variants: the efficiency ladder re-run with the CPU recipe
(docs/experiments/ladder.md) at the ladder's equal-FLOP budget."""


import pytest

from benchmarks import equal_budget
from experiments import context_study


@pytest.mark.parametrize("variant,objective,multiplier", [
    ("base-rate+alibi-steep", "electra", 0.5), ("mlm+alibi-steep", "mlm", 0.5),
    ("all-tokens-mlm+alibi-steep", "all-tokens-mlm", 0.5),
    ("replace-mlm+alibi-steep", "replace-mlm", 0.5), ("electra-15+alibi-steep", "electra-15", 0.5),
    ("base-rate+alibi-steep-gen0.125", "electra", 0.125),
    ("base-rate+alibi-steep-gen1", "electra", 1.0)])
def test_context_study_ladder_variants_spend_the_ladders_budget(variant, objective, multiplier):
    """The ladder re-run with the CPU recipe goes through the context study's data;
    its variants must spend the budget `objective_ladder.py` gives them, on the same tiny-local
    encoder. The study rounds to the nearest step where the ladder rounds down, so the two
    agree to one step (within half a step's FLOPs of the budget)."""
    vocab = 8192
    cfg = context_study.variant_config(context_study.VARIANTS[variant][0], seed=1, seq_len=128,
                                       vocab_size=vocab, budget_steps=1000)
    cfg.validate()
    budget = equal_budget.budget_flops(1000, vocab)
    per_step = equal_budget.step_cost(equal_budget.run_config(objective, 1, multiplier), vocab)
    assert abs(cfg.train.steps * per_step - budget) <= per_step / 2
    assert cfg.train.steps - equal_budget.steps_for_budget(budget, objective, vocab,
                                                           multiplier) in (0, 1)
    assert (cfg.objective.name, cfg.objective.generator_multiplier) == (objective, multiplier)
    assert (cfg.model.position_bias, cfg.model.alibi_max_slope) == ("alibi", 1.0)
    assert cfg.objective.disc_bias_init == ("base-rate" if objective == "electra" else "zero")


def test_an_mlm_run_shows_its_heldout_accuracy_where_a_discriminator_shows_its_auc():
    """The study's table has one probe column: the unigram-fake AUC, or for an objective with no
    discriminator its held-out MLM accuracy, labelled (step 0 is left out of both)."""
    mlm = [{"step": 0, "heldout_mlm_acc": 0.0003}, {"step": 10, "heldout_mlm_acc": 0.2466}]
    electra = [{"step": 0, "heldout_auc_unigram": 0.5}, {"step": 10, "heldout_auc_unigram": 0.861}]
    assert context_study.probe_curve(mlm) == "MLM accuracy: 0.25"
    assert context_study.probe_curve(electra) == "0.86"

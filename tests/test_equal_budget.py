"""The equal-compute step counts the objective benchmarks train with (section 5.2.2)."""


import pytest

from benchmarks import equal_budget


@pytest.mark.parametrize("objective,multiplier", [
    ("electra", 0.5), ("mlm", 0.5), ("replace-mlm", 0.5), ("all-tokens-mlm", 0.5),
    ("electra-15", 0.5), ("electric", 0.5), ("electra-tt", 0.5), ("electra", 0.125),
    ("electra", 1.0)])
def test_steps_buy_the_budget_and_no_more(objective, multiplier):
    vocab = 8192
    budget = equal_budget.budget_flops(1000, vocab)
    steps = equal_budget.steps_for_budget(budget, objective, vocab, multiplier)
    per_step = equal_budget.step_cost(equal_budget.run_config(objective, 1, multiplier), vocab)
    assert steps * per_step <= budget < (steps + 1) * per_step


def test_cheaper_objectives_train_longer():
    """BERT's MLM skips the generator, so at ELECTRA's budget it takes more steps (Table 5.1's
    1.45M vs 1M for Small); all-tokens MLM's softmax everywhere makes it take fewer."""
    budget = equal_budget.budget_flops(1000, 8192)
    steps = {o: equal_budget.steps_for_budget(budget, o, 8192)
             for o in ("electra", "mlm", "all-tokens-mlm")}
    assert steps["electra"] == 1000
    assert steps["mlm"] > 1000 > steps["all-tokens-mlm"]


@pytest.mark.parametrize("objective", ["electra", "mlm", "electra-15", "replace-mlm"])
def test_tiny_local_configs_validate_for_every_ladder_objective(objective):
    cfg = equal_budget.run_config(objective, 10, preset="tiny-local")
    cfg.validate()
    assert cfg.model.position_bias == "alibi"
    assert cfg.objective.disc_bias_init == ("base-rate" if objective == "electra" else "zero")


def test_a_work_directory_keeps_its_settings(tmp_path):
    """Runs are cached by name: a WORK made with one preset refuses another."""
    equal_budget.pin_settings(tmp_path, {"preset": "tiny", "layerwise_decay": None})
    equal_budget.pin_settings(tmp_path, {"preset": "tiny", "layerwise_decay": None})  # same: ok
    with pytest.raises(SystemExit, match="preset: 'tiny' there, 'tiny-local' now"):
        equal_budget.pin_settings(tmp_path, {"preset": "tiny-local", "layerwise_decay": None})

"""Training algorithms for ELECTRA: two-stage (dissertation 5.3.3) and adversarial (5.3.4)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_electra_objective import SPECIAL, make_batch, small_model

from electra.config import ObjectiveConfig
from electra.errors import ElectraError
from electra.objectives import build_objective


def build(**kw):
    torch.manual_seed(0)
    return build_objective(small_model(), ObjectiveConfig(**kw), SPECIAL)


def two_stage(**kw):
    return build(algorithm="two-stage", generator_multiplier=1.0, **kw)


def has_grad(p: torch.Tensor) -> bool:
    return p.grad is not None and bool(p.grad.any())


def params_with_grad(module: torch.nn.Module) -> set[str]:
    return {n for n, p in module.named_parameters() if has_grad(p)}


def all_params(module: torch.nn.Module) -> set[str]:
    return {n for n, _ in module.named_parameters()}


# --- two-stage ------------------------------------------------------------------------------


def test_two_stage_needs_generator_of_discriminator_size():
    with pytest.raises(ElectraError, match="generator_multiplier=1.0"):
        build(algorithm="two-stage", generator_multiplier=0.5)
    with pytest.raises(ElectraError, match="generator_layers"):
        build(algorithm="two-stage", generator_multiplier=1.0, generator_layers=1)


def test_two_stage_networks_are_separate():
    obj = two_stage()
    assert obj.generator.electra.embeddings is not obj.discriminator.electra.embeddings


def test_two_stage_stage_one_trains_the_generator_alone():
    obj = two_stage()
    obj.on_step_start(0, 10)
    assert obj.phase == "generator"
    out = obj(make_batch())
    assert "disc_loss" not in out.losses and "disc_logits" not in out.details
    torch.testing.assert_close(out.loss, out.losses["gen_loss"])
    out.loss.backward()
    assert params_with_grad(obj.discriminator) == set()
    assert params_with_grad(obj.generator) == all_params(obj.generator)


def test_two_stage_switch_initialises_discriminator_from_generator_once():
    obj = two_stage(two_stage_generator_steps=3)
    for step in range(3):
        obj.on_step_start(step, 10)
        assert obj.phase == "generator"
    gen_state = {k: v.clone() for k, v in obj.generator.electra.state_dict().items()}
    assert not torch.equal(obj.discriminator.electra.layers[0].ffn_in.weight,
                           gen_state["layers.0.ffn_in.weight"])
    obj.on_step_start(3, 10)
    assert obj.phase == "discriminator"
    disc_state = obj.discriminator.electra.state_dict()
    assert disc_state.keys() == gen_state.keys()
    for name, value in gen_state.items():
        assert torch.equal(disc_state[name], value), name
    # copies, not ties: training the discriminator leaves the generator as it was
    assert (obj.discriminator.electra.layers[0].ffn_in.weight
            is not obj.generator.electra.layers[0].ffn_in.weight)
    # idempotent: a later call (or the call right after a resume) copies nothing again
    with torch.no_grad():
        obj.discriminator.electra.layers[0].ffn_in.weight.add_(1.0)
    obj.on_step_start(4, 10)
    assert not torch.equal(obj.discriminator.electra.layers[0].ffn_in.weight,
                           gen_state["layers.0.ffn_in.weight"])


def test_two_stage_default_switch_is_half_of_training():
    obj = two_stage()
    obj.on_step_start(4, 10)
    assert obj.phase == "generator"
    obj.on_step_start(5, 10)
    assert obj.phase == "discriminator"


def test_two_stage_stage_two_trains_discriminator_with_generator_frozen():
    obj = two_stage()
    obj.on_step_start(5, 10)
    out = obj(make_batch())
    torch.testing.assert_close(out.loss, 50.0 * out.losses["disc_loss"])
    assert "gen_loss" in out.losses  # still reported
    out.loss.backward()
    assert params_with_grad(obj.generator) == set()
    expected = all_params(obj.discriminator)
    assert params_with_grad(obj.discriminator) == expected


def test_two_stage_phase_survives_a_resume_through_the_state_dict():
    obj = two_stage()
    obj.on_step_start(6, 10)
    with torch.no_grad():
        obj.discriminator.electra.layers[0].ffn_in.weight.add_(1.0)
    resumed = two_stage()
    assert resumed.phase == "generator"
    resumed.load_state_dict(obj.state_dict())
    assert resumed.phase == "discriminator"
    resumed.on_step_start(6, 10)  # the loop calls this right after a resume
    assert torch.equal(resumed.discriminator.electra.layers[0].ffn_in.weight,
                       obj.discriminator.electra.layers[0].ffn_in.weight)
    early = two_stage()
    early.on_step_start(2, 10)
    again = two_stage()
    again.load_state_dict(early.state_dict())
    assert again.phase == "generator"


# --- adversarial ------------------------------------------------------------------------


def test_adversarial_total_loss_has_no_maximum_likelihood_term():
    obj = build(algorithm="adversarial")
    out = obj(make_batch())
    losses = out.losses
    torch.testing.assert_close(out.loss, 50.0 * losses["disc_loss"] + losses["adv_loss"]
                               + losses["baseline_loss"])
    assert "gen_loss" in losses  # reported as a metric only


def test_adversarial_generator_gets_gradient_only_from_reinforce():
    """gen_weight = 0 removes the REINFORCE term: the generator (but for the embeddings it
    shares with the discriminator) gets no gradient, the baseline still learns."""
    obj = build(algorithm="adversarial", gen_weight=0.0)
    obj(make_batch()).loss.backward()
    gen = {n for n in params_with_grad(obj.generator) if "electra.embeddings." not in n}
    assert gen == set()
    assert has_grad(obj.baseline.weight)


def test_adversarial_discriminator_gets_no_gradient_from_reinforce():
    obj = build(algorithm="adversarial", disc_weight=0.0)
    obj(make_batch()).loss.backward()
    disc = {n for n in params_with_grad(obj.discriminator) if "electra.embeddings." not in n}
    assert disc == set()
    assert {"generator_predictions.dense.weight", "output_bias",
            "electra.layers.0.ffn_in.weight"} <= params_with_grad(obj.generator)
    assert has_grad(obj.baseline.weight)


def test_adversarial_reward_and_learned_baseline_hand_computed():
    obj = build(algorithm="adversarial")
    # The third slot is the fixed shape's padding (weight False): it counts nowhere.
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0]],
                          requires_grad=True)
    hidden = torch.randn(3, obj.baseline.in_features)
    samples = torch.tensor([0, 2, 1])
    reward = torch.tensor([0.3, 2.0, 100.0])  # the discriminator's per-token losses there
    weights = torch.tensor([True, True, False])
    adv, base = obj._reinforce(logits, hidden, samples, None, reward, weights)
    reward, hidden = reward[:2], hidden[:2]
    z = obj.baseline(hidden).squeeze(-1)
    b = -F.logsigmoid(z)
    log_q = F.log_softmax(logits[:2], -1)[[0, 1], [0, 2]]
    torch.testing.assert_close(adv, -(log_q * (reward - b)).mean())
    # the baseline fits sigmoid(w^T h) to exp(-R), so that b = -log sigmoid(.) tracks R
    torch.testing.assert_close(base, F.binary_cross_entropy_with_logits(z, torch.exp(-reward)))
    # ascent on the reward: the sample rewarded above the baseline becomes more likely
    adv.backward()
    assert (reward - b.detach())[1] > 0
    assert logits.grad[1, 2] < 0
    assert torch.equal(logits.grad[2], torch.zeros(3))


def test_adversarial_baseline_optimum_is_expected_reward():
    """Minimising the cross-entropy gives sigmoid(z) = E[exp(-R)], i.e. b = -log E[exp(-R)]."""
    z = torch.zeros(1, requires_grad=True)
    rewards = torch.tensor([0.2, 1.5])
    opt = torch.optim.SGD([z], lr=2.0)
    for _ in range(300):
        opt.zero_grad()
        F.binary_cross_entropy_with_logits(z.expand(2), torch.exp(-rewards)).backward()
        opt.step()
    assert torch.sigmoid(z).item() == pytest.approx(torch.exp(-rewards).mean().item(), abs=1e-4)
    assert -F.logsigmoid(z).item() == pytest.approx(
        -math.log(torch.exp(-rewards).mean().item()), abs=1e-3)


def test_algorithms_need_an_mlm_generator():
    with pytest.raises(ElectraError, match="objective.generator='mlm'"):
        build(algorithm="adversarial", generator="uniform")

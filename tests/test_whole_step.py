"""The static, sync-free step (electra.pretraining.step, electra.objectives.masking.select_slots):
masked positions as fixed weighted slots chosen as the official implementation chooses them,
AdamW guarded on the device, and the whole step captured as one graph that trains exactly as
the eager step does."""

from __future__ import annotations

import functools
import json

import pytest
import torch
import torch._dynamo
from objective_helpers import SPECIAL, make_batch, small_model
from scipy.stats import chisquare

from electra.config import ObjectiveConfig, TrainConfig
from electra.model.encoder import known_padding
from electra.objectives import build_objective
from electra.objectives.masking import max_predictions, select_slots
from electra.pretraining.loop import _window_values
from electra.pretraining.step import WholeStep, guarded_adamw
from electra.runtime.optim import build_optimizer

# ----------------------------------------------------------------------------- slots


def test_slots_hold_round_15_percent_of_real_tokens_capped_as_the_official_code():
    """Official pretrain_helpers.mask: round(mask_prob * tokens) per row, at most
    max_predictions_per_seq = int((mask_prob + 0.005) * S); P = that cap slots per row."""
    batch = make_batch(batch=4, seq=40, pad_from=12)
    slots = select_slots(batch["input_ids"], batch["attention_mask"], 0.15, SPECIAL)
    cap = max_predictions(40, 0.15)
    assert cap == 6 and slots.index.shape == slots.weights.shape == (4, cap)
    # rows of 40 real tokens: round(6.0) = 6; the padded row has 12: round(1.8) = 2
    assert slots.weights.sum(1).tolist() == [6, 6, 6, 2]
    for row in range(4):  # distinct positions per row, so no slot overwrites another
        assert slots.index[row].unique().numel() == cap
    masked = slots.mask()
    assert torch.equal(masked.sum(1), slots.weights.sum(1))
    ids = batch["input_ids"]
    assert not (masked & ((ids == SPECIAL.cls) | (ids == SPECIAL.sep)
                          | (batch["attention_mask"] == 0))).any()
    flat = masked.view(-1)[slots.positions]
    assert torch.equal(flat, slots.flat_weights)  # positions and weights in one order


def test_slots_are_uniform_among_the_candidates():
    """Every non-special real token is equally likely to be masked (chi-square, 4,000 draws)."""
    batch = make_batch(batch=1, seq=24, sentence_pair=False)
    torch.manual_seed(0)
    hits = torch.zeros(24)
    for _ in range(4000):
        hits += select_slots(batch["input_ids"], batch["attention_mask"], 0.15,
                             SPECIAL).mask()[0].float()
    assert hits[0] == hits[-1] == 0  # [CLS], [SEP]
    assert chisquare(hits[1:-1].numpy()).pvalue > 1e-3


def test_slots_choose_the_positions_a_full_sort_chooses():
    """The same random scores give the same masked set as ranking every position (the
    earlier path): the distribution is unchanged, only fewer random numbers are drawn later."""
    batch = make_batch(batch=6, seq=32, pad_from=9, seed=4)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for seed in range(20):
        torch.manual_seed(seed)
        masked = select_slots(ids, mask, 0.15, SPECIAL).mask()
        torch.manual_seed(seed)
        scores = torch.rand(ids.shape)
        candidates = mask.bool() & (ids != SPECIAL.cls) & (ids != SPECIAL.sep)
        scores = scores.masked_fill(~candidates, -1.0)
        count = masked.sum(1)
        ranks = scores.argsort(1, descending=True).argsort(1)
        assert torch.equal(masked, ranks < count[:, None])


# ----------------------------------------------------------------------------- AdamW


def _params_and_optimizers(fused: bool = False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5))
    twin = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5))
    twin.load_state_dict(model.state_dict())
    cfg = TrainConfig(learning_rate=1e-2, weight_decay=0.1)
    return model, build_optimizer(model, cfg), twin, build_optimizer(twin, cfg)


def _grads(model, seed):
    g = torch.Generator().manual_seed(seed)
    return {p: torch.randn(p.shape, generator=g) for p in model.parameters()}


def test_guarded_adamw_is_torchs_adamw_with_its_weight_decay_groups():
    model, opt, twin, reference = _params_and_optimizers()
    from electra.pretraining.step import ensure_adamw_state

    ensure_adamw_state(opt)
    for seed in range(4):
        grads = _grads(model, seed)
        lrs = torch.tensor([g["lr"] for g in opt.param_groups])
        guarded_adamw(opt, grads, lrs, torch.tensor(True))
        for p, q in zip(twin.parameters(), grads, strict=True):
            p.grad = grads[q].clone()
        reference.step()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(opt.state[p][key].float(),
                                       reference.state[q][key].float(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("first", [True, False])
def test_a_nonfinite_update_leaves_parameters_moments_and_step_exactly_as_they_were(first):
    model, opt, *_ = _params_and_optimizers()
    from electra.pretraining.step import ensure_adamw_state

    ensure_adamw_state(opt)
    lrs = torch.tensor([g["lr"] for g in opt.param_groups])
    if not first:
        guarded_adamw(opt, _grads(model, 0), lrs, torch.tensor(True))
    before = {p: (p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items()})
              for p in model.parameters()}
    poisoned = {p: g * float("nan") for p, g in _grads(model, 1).items()}
    guarded_adamw(opt, poisoned, lrs, torch.tensor(False))
    for p in model.parameters():
        assert torch.equal(p, before[p][0])
        for k, v in opt.state[p].items():
            assert torch.equal(v, before[p][1][k]), k


# ----------------------------------------------------------------------------- the step

BACKEND = "eager"
OBJECTIVES = {
    "electra": {},
    "electra-15": {"name": "electra-15"},
    "adversarial": {"algorithm": "adversarial"},
    "two-stage": {"algorithm": "two-stage", "generator_multiplier": 1.0,
                  "two_stage_generator_steps": 1},
    "gdes": {"sharing": "gdes"},
    "uniform-sampler": {"generator": "uniform"},
    "mlm": {"name": "mlm"},
    "replace-mlm": {"name": "replace-mlm"},
    "all-tokens-mlm": {"name": "all-tokens-mlm"},
    "teams": {"name": "teams"},
    "electric": {"name": "electric"},
    "electra-tt": {"name": "electra-tt"},
}


def _objective(kw: dict, layers: int = 2):
    torch.manual_seed(0)
    obj_cfg = ObjectiveConfig(**{"generator_multiplier": 0.5, **kw})
    objective = build_objective(small_model(num_hidden_layers=layers), obj_cfg)
    return objective, build_optimizer(objective, TrainConfig(learning_rate=1e-3))


def _train(kw: dict, compiled: bool, steps: int = 3, layers: int = 2
           ) -> tuple[list[float], list[torch.Tensor]]:
    """`steps` whole steps, the last batch padded (every step takes the padded path: one graph
    to compile); returns the losses and the parameters."""
    objective, optimizer = _objective(kw, layers)
    step = WholeStep(objective, optimizer, 1.0, False, _window_values)
    if compiled:  # one graph (fullgraph: nothing asks the host), AOT autograd, eager kernels
        torch._dynamo.config.trace_autograd_ops = True
        torch._dynamo.reset()
        step._run = torch.compile(step._step, fullgraph=True, backend=BACKEND)
    torch.manual_seed(5)
    losses = []
    for i in range(steps):
        objective.on_step_start(i, steps)
        batch = make_batch(batch=3, seq=24, seed=i, pad_from=15 if i == steps - 1 else None)
        losses.append(step([batch], padded=True).loss.item())
    return losses, [p.detach().clone() for p in objective.parameters()]


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_whole_step_compiles_as_one_graph_and_trains_as_the_eager_step(name):
    """Every objective's step captures with fullgraph=True (no `nonzero`, no `.item()`, no
    data-dependent shape), and 3 compiled steps give the eager steps' losses and weights."""
    layers = 2 if name == "teams" else 1  # TEAMS' RTD head reads layer L-1
    eager_losses, eager_params = _train(OBJECTIVES[name], compiled=False, layers=layers)
    losses, params = _train(OBJECTIVES[name], compiled=True, layers=layers)
    assert losses == pytest.approx(eager_losses, rel=1e-5, abs=1e-5)
    for a, b in zip(params, eager_params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_whole_step_updates_as_the_loops_eager_update():
    """WholeStep (uncompiled) against the loop's path: backward, clip_grad_norm_, torch's
    AdamW; the same losses and weights after 3 steps."""
    losses, params = _train({}, compiled=False)
    objective, optimizer = _objective({})
    torch.manual_seed(5)
    reference = []
    for i in range(3):
        batch = make_batch(batch=3, seq=24, seed=i, pad_from=15 if i == 2 else None)
        with known_padding(True):
            out = objective(batch)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(objective.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        reference.append(out.loss.item())
    assert losses == pytest.approx(reference, rel=1e-6)
    for a, b in zip(params, objective.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_whole_step_skips_a_nonfinite_step_on_the_device():
    objective, optimizer = _objective({})
    step = WholeStep(objective, optimizer, 1.0, False, _window_values)
    step([make_batch(seed=0)])
    before = [p.detach().clone() for p in objective.parameters()]
    handle = objective.register_forward_hook(
        lambda m, i, out: setattr(out, "loss", out.loss * float("nan")) or out)
    result = step([make_batch(seed=1)])
    handle.remove()
    assert not result.finite
    assert all(torch.equal(a, b) for a, b in zip(before, objective.parameters(), strict=True))
    assert step([make_batch(seed=2)]).finite


@pytest.mark.slow  # inductor generates and compiles C++ for every kernel: ~2-3 min on 2 cores
def test_inductor_compiled_step_trains_as_the_eager_step():
    """The real compiler (as `train.compile_step` runs it; a CUDA graph on CUDA), with
    inductor drawing random numbers as eager code does."""
    from electra.pretraining.step import deterministic_compiled_random

    kw = {"generator_layers": 1}
    eager_losses, eager_params = _train(kw, compiled=False, steps=2)
    objective, optimizer = _objective(kw)
    step = WholeStep(objective, optimizer, 1.0, False, _window_values, compile=True)
    torch.manual_seed(5)
    losses = []
    with deterministic_compiled_random():
        for i in range(2):  # both steps take the padded path: one graph to compile
            batch = make_batch(batch=3, seq=24, seed=i, pad_from=15 if i == 1 else None)
            losses.append(step([batch], padded=True).loss.item())
    assert losses == pytest.approx(eager_losses, rel=1e-5, abs=1e-5)
    for a, b in zip(objective.parameters(), eager_params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- the loop


def test_pretrain_with_compile_step_resumes_bit_exact(data_dir, tmp_path, monkeypatch):
    """`train.compile_step` through the pre-training loop (dynamo capturing the whole step,
    dropout included, run by its eager backend here): a run interrupted after its step-2
    checkpoint and resumed ends bit-identical to an uninterrupted one."""
    from resume_helpers import interrupted_and_resumed
    from safetensors.torch import load_file
    from test_gpu_path import _tiny

    from electra.pretraining.loop import pretrain

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", functools.partial(real_compile, backend=BACKEND))

    def run(out, resume=False):
        cfg = _tiny(4, 2, compile_step=True, save_every=2)
        assert cfg.model.hidden_dropout_prob > 0
        return pretrain(cfg, data_dir, out, resume=resume, device="cpu", show_progress=False)

    run(tmp_path / "reference")
    resumed = interrupted_and_resumed(run, tmp_path / "out", monkeypatch, stop_after=2)
    assert resumed["steps"] == 4
    for name in ("discriminator", "generator"):
        weights = [load_file(str(tmp_path / run_dir / "final" / name / "model.safetensors"))
                   for run_dir in ("reference", "out")]
        assert weights[0].keys() == weights[1].keys()
        for key, value in weights[0].items():
            assert torch.equal(value, weights[1][key]), key
    assert json.loads((tmp_path / "out" / "settings.json").read_text())[
        "train"]["compile_step"] is True


def test_compiled_step_compiles_once_per_run_through_warmup_and_decay(data_dir, tmp_path,
                                                                     monkeypatch):
    """Every step of warm-up and decay has a new learning rate; it enters the graph as a
    tensor, so a run compiles its step once, and a resumed run once again (dynamo guarded on
    `param_groups[0]['lr']` when the step read the optimizer: one graph per step)."""
    from resume_helpers import interrupted_and_resumed
    from test_gpu_path import _tiny

    from electra.pretraining.loop import pretrain

    compiled: list[int] = []

    def counting_backend(graph_module, example_inputs):
        compiled.append(len(example_inputs))
        return graph_module.forward

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", functools.partial(real_compile,
                                                            backend=counting_backend))

    def run(out, resume=False):
        torch._dynamo.reset()
        cfg = _tiny(6, 3, compile_step=True, save_every=3, warmup_steps=3)
        return pretrain(cfg, data_dir, out, resume=resume, device="cpu", show_progress=False)

    summary = run(tmp_path / "whole")
    assert summary["steps"] == 6
    assert len(compiled) == 1, compiled
    lrs = [json.loads(line).get("lr") for line in
           (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert len({lr for lr in lrs if lr is not None}) == 2  # logged at steps 3 and 6: they differ
    compiled.clear()
    interrupted_and_resumed(run, tmp_path / "out", monkeypatch, stop_after=3)
    assert len(compiled) == 2  # the interrupted run's compilation and the resumed run's

"""BERT's masked LM (Devlin et al. 2019 section 3.1; dissertation 5.1.1), Replace MLM and
All-Tokens MLM (dissertation 5.4.3)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_electra_objective import SPECIAL, VOCAB, make_batch, small_model

from electra.config import ObjectiveConfig
from electra.model.networks import Generator
from electra.objectives import build_objective, metrics_from_counts, resolved
from electra.objectives.masking import corrupt_bert_style, non_special_ids, select_positions
from electra.objectives.replace_mlm import copy_mixture_log_likelihood, copy_mixture_predictions

SPECIAL_IDS = [SPECIAL.pad, SPECIAL.unk, SPECIAL.cls, SPECIAL.sep, SPECIAL.mask]


def build(name: str, **kw):
    torch.manual_seed(0)
    return build_objective(small_model(), ObjectiveConfig(name=name, generator_multiplier=0.5,
                                                          **kw), SPECIAL)


def spy_positions(monkeypatch, module):
    """Record the flat positions and logits of module.forward(ids, types, mask, positions)."""
    seen = {}
    original = module.forward

    def spy(*args, **kw):
        logits = original(*args, **kw)
        seen["input"], seen["positions"], seen["logits"] = args[0], args[3], logits
        return logits

    monkeypatch.setattr(module, "forward", spy)
    return seen


# --- BERT -------------------------------------------------------------------------------


def test_mlm_defaults_are_bert_80_10_10():
    cfg = resolved(ObjectiveConfig(name="mlm"))
    assert (cfg.mask_token_prob, cfg.random_token_prob) == (0.8, 0.1)
    assert resolved(ObjectiveConfig(name="electra")).mask_token_prob == 0.85


def test_bert_80_mask_10_random_10_kept_statistics():
    torch.manual_seed(0)
    batch = make_batch(batch=128, seq=128)
    ids = batch["input_ids"]
    masked = select_positions(ids, batch["attention_mask"], 0.15, SPECIAL)
    corrupted = corrupt_bert_style(ids, masked, 0.8, 0.1, SPECIAL.mask,
                                   non_special_ids(VOCAB, SPECIAL))
    assert torch.equal(corrupted[~masked], ids[~masked])
    at = corrupted[masked]
    n = at.numel()
    became_mask = (at == SPECIAL.mask).float().mean().item()
    same = (at == ids[masked]).float().mean().item()
    other = ((at != SPECIAL.mask) & (at != ids[masked])).float().mean().item()
    # a random draw equals the original 1 time in 45 (45 non-special ids)
    assert abs(became_mask - 0.8) < 3 * math.sqrt(0.16 / n)
    assert abs(other - 0.1 * 44 / 45) < 0.01
    assert abs(same - (0.1 + 0.1 / 45)) < 0.01
    assert not torch.isin(at[at != SPECIAL.mask], torch.tensor(SPECIAL_IDS)).any()


def test_non_special_ids_leave_out_the_five_special_tokens():
    assert non_special_ids(8, SPECIAL).tolist() == [5, 6, 7]


def test_mlm_loss_is_cross_entropy_at_masked_positions_only(monkeypatch):
    obj = build("mlm").eval()
    batch = make_batch(batch=3, seq=32, pad_from=20)
    seen = spy_positions(monkeypatch, obj.model)
    out = obj(batch)
    masked = out.details["masked"]
    # Fixed slots: max_predictions(32, 0.15) = 4 per row; those on masked positions weigh 1.
    assert seen["positions"].shape == (3 * 4,)
    weights = masked.view(-1)[seen["positions"]]
    assert torch.equal(seen["positions"][weights].sort().values,
                       masked.view(-1).nonzero().squeeze(1))
    assert masked.sum(1).tolist() == [4, 4, 3]  # round(0.15 * real tokens)
    targets = batch["input_ids"].view(-1)[seen["positions"]]
    torch.testing.assert_close(out.loss, F.cross_entropy(seen["logits"][weights],
                                                         targets[weights]))
    assert torch.equal(seen["input"], out.details["corrupted"])
    assert out.counts["mlm_predicted"] == masked.sum()
    assert set(metrics_from_counts(out.counts)) == {"mlm_acc"}


def test_mlm_model_is_a_full_size_generator_exported_as_the_model():
    obj = build("mlm")
    exported = obj.exportable()
    assert list(exported) == ["model"]
    assert type(exported["model"]) is Generator
    assert exported["model"].config == small_model()
    obj(make_batch()).loss.backward()
    assert all(p.grad is not None for p in obj.parameters())


# --- Replace MLM ---------------------------------------------------------------------------


def test_replace_mlm_input_has_generator_samples_instead_of_mask(monkeypatch):
    obj = build("replace-mlm").eval()
    batch = make_batch(batch=4, seq=32)
    gen = spy_positions(monkeypatch, obj.generator)
    main = spy_positions(monkeypatch, obj.model)
    out = obj(batch)
    ids, masked = batch["input_ids"], out.details["masked"]
    # the generator saw [MASK] (85%) at the masked positions; the main model sees none
    assert (gen["input"] == SPECIAL.mask).any()
    assert not (main["input"] == SPECIAL.mask).any()
    assert torch.equal(main["input"][~masked], ids[~masked])
    assert torch.equal(main["positions"], gen["positions"])
    replaced = (main["input"] != ids) & masked
    assert out.counts["replaced"] == replaced.sum() > 0
    # the main model predicts the original token at the masked positions (the weighted slots)
    weights = masked.view(-1)[main["positions"]]
    targets = ids.view(-1)[main["positions"]]
    torch.testing.assert_close(out.losses["mlm_loss"],
                               F.cross_entropy(main["logits"][weights], targets[weights]))
    torch.testing.assert_close(out.loss, out.losses["gen_loss"] + out.losses["mlm_loss"])


def test_replace_mlm_generator_is_electras_with_shared_embeddings():
    obj = build("replace-mlm")
    assert obj.generator.electra.embeddings is obj.model.electra.embeddings
    assert obj.generator.config.hidden_size == 16
    assert list(obj.exportable()) == ["model", "generator"]


def test_replace_mlm_loss_does_not_reach_generator_layers():
    obj = build("replace-mlm", gen_weight=0.0)
    obj(make_batch()).loss.backward()
    for name, p in obj.generator.named_parameters():
        if "electra.embeddings." not in name:
            assert p.grad is None or not p.grad.any(), name


# --- All-Tokens MLM ------------------------------------------------------------------------


def test_copy_mechanism_hand_computed():
    """p(x) = D [input = x] + (1 - D) softmax(x), D = sigmoid(z) (section 5.4.3)."""
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]] * 3))
    z = torch.tensor([0.0, 0.0, math.log(3.0)])  # D = 0.5, 0.5, 0.75
    inputs = torch.tensor([1, 2, 0])
    targets = torch.tensor([1, 0, 0])
    p = copy_mixture_log_likelihood(logits, z, inputs, targets).exp()
    torch.testing.assert_close(p, torch.tensor([0.5 + 0.5 * 0.25, 0.5 * 0.5, 0.75 + 0.25 * 0.5]))
    # mixtures: [.25,.625,.125], [.25,.125,.625], [.875,.0625,.0625]
    assert copy_mixture_predictions(logits, z, inputs).tolist() == [1, 2, 0]


def test_all_tokens_mlm_predicts_every_non_padding_token_with_copy_head():
    obj = build("all-tokens-mlm")
    batch = make_batch(batch=3, seq=32, pad_from=20)
    out = obj(batch)
    assert out.counts["mlm_predicted"] == batch["attention_mask"].sum()
    out.loss.backward()
    assert obj.copy_head.weight.grad.any()
    assert obj.model.output_bias.grad.any()
    assert list(obj.exportable()) == ["model", "generator"]


def test_all_tokens_mlm_loss_is_mean_negative_log_mixture_likelihood(monkeypatch):
    obj = build("all-tokens-mlm").eval()
    batch = make_batch(batch=2, seq=16)
    captured = {}
    original = copy_mixture_log_likelihood

    def spy(logits, copy_logit, inputs, targets):
        captured.update(logits=logits, z=copy_logit, inputs=inputs, targets=targets)
        return original(logits, copy_logit, inputs, targets)

    import electra.objectives.replace_mlm as module
    monkeypatch.setattr(module, "copy_mixture_log_likelihood", spy)
    out = obj(batch)
    d = torch.sigmoid(captured["z"])
    soft = captured["logits"].softmax(-1).gather(-1, captured["targets"][:, None])[:, 0]
    p = d * (captured["inputs"] == captured["targets"]) + (1 - d) * soft
    torch.testing.assert_close(out.losses["mlm_loss"], -p.log().mean())
    assert torch.equal(captured["targets"], batch["input_ids"].view(-1))


@pytest.mark.parametrize("name", ["replace-mlm", "all-tokens-mlm"])
def test_replace_objectives_with_uniform_generator(name):
    obj = build(name, generator="uniform")
    assert obj.generator is None and list(obj.exportable()) == ["model"]
    out = obj(make_batch())
    assert "gen_loss" not in out.losses
    torch.testing.assert_close(out.loss, out.losses["mlm_loss"])

"""Each faithful detail of the ELECTRA objective (dissertation 5.1, official implementation)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from objective_helpers import SPECIAL, VOCAB, make_batch, small_model  # noqa: E402

from electra.config import ObjectiveConfig, PretrainConfig
from electra.objectives import build_objective, metrics_from_counts
from electra.objectives.masking import (
    categorical_sample,
    corrupt_with_mask_token,
    gumbel_sample,
    max_predictions,
    select_positions,
)


def objective(gen_mult=0.5, **obj_kw):
    torch.manual_seed(0)
    return build_objective(small_model(), ObjectiveConfig(generator_multiplier=gen_mult,
                                                          **obj_kw), SPECIAL)


def test_masked_count_is_round_15_percent_of_real_tokens():
    batch = make_batch(batch=3, seq=100, pad_from=40)
    masked = select_positions(batch["input_ids"], batch["attention_mask"], 0.15, SPECIAL)
    real = batch["attention_mask"].sum(1)
    expected = torch.round(real.float() * 0.15).long().clamp(1, max_predictions(100, 0.15))
    assert masked.sum(1).tolist() == expected.tolist() == [15, 15, 6]
    # the official cap: max_predictions_per_seq = int((0.15 + 0.005) * 128) = 19
    assert max_predictions(128, 0.15) == 19


def test_never_masks_cls_sep_or_padding():
    batch = make_batch(batch=8, seq=24, pad_from=12)
    ids = batch["input_ids"]
    for _ in range(50):
        masked = select_positions(ids, batch["attention_mask"], 0.5, SPECIAL)
        assert not masked[ids == SPECIAL.cls].any()
        assert not masked[ids == SPECIAL.sep].any()
        assert not masked[batch["attention_mask"] == 0].any()


def test_positions_are_uniform_among_candidates():
    batch = make_batch(batch=1, seq=12)
    hits = torch.zeros(12)
    for _ in range(3000):
        hits += select_positions(batch["input_ids"], batch["attention_mask"], 0.25, SPECIAL)[0]
    candidate = hits[[i for i in range(12) if i not in (0, 6, 11)]]
    assert hits[[0, 6, 11]].sum() == 0
    assert (candidate / 3000).sub(3 / 9).abs().max() < 0.04  # 3 of 9 candidates each time


def test_85_percent_mask_token_15_percent_kept_and_no_random_replacement():
    """Official pretrain_helpers.mask: [MASK] 85% of the time, otherwise the original token."""
    torch.manual_seed(1)
    batch = make_batch(batch=64, seq=128)
    ids = batch["input_ids"]
    masked = select_positions(ids, batch["attention_mask"], 0.15, SPECIAL)
    corrupted = corrupt_with_mask_token(ids, masked, 0.85, SPECIAL.mask)
    assert torch.equal(corrupted[~masked], ids[~masked])  # unmasked untouched
    became_mask = corrupted[masked] == SPECIAL.mask
    kept = corrupted[masked] == ids[masked]
    assert bool((became_mask | kept).all())  # never a random other token
    assert abs(became_mask.float().mean().item() - 0.85) < 0.03


@pytest.mark.parametrize("preset,hidden,heads,ffn,layers", [
    ("small", 64, 1, 256, 12), ("base", 256, 4, 1024, 12), ("large", 256, 4, 1024, 24)])
def test_generator_size_table_5_1(preset, hidden, heads, ffn, layers):
    cfg = PretrainConfig.from_preset(preset)
    gen = cfg.model.scaled(cfg.objective.generator_multiplier)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size,
            gen.num_hidden_layers) == (hidden, heads, ffn, layers)
    assert gen.embedding_size == cfg.model.embedding_size  # tied embeddings keep size E


def test_large_preset_masks_25_percent():
    assert PretrainConfig.from_preset("large").objective.mask_prob == 0.25
    assert PretrainConfig.from_preset("small").objective.mask_prob == 0.15


def test_embeddings_and_layernorm_shared_between_generator_and_discriminator():
    obj = objective()
    d_emb = obj.discriminator.electra.embeddings
    g_emb = obj.generator.electra.embeddings
    assert d_emb is g_emb
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings",
                 "LayerNorm"):
        assert getattr(d_emb, name).weight is getattr(g_emb, name).weight
    # the generator is narrower, so it has its own E -> H_gen projection
    assert obj.generator.electra.embeddings_project.weight.shape == (16, 24)
    assert obj.discriminator.electra.embeddings_project.weight.shape == (32, 24)


def test_generator_head_dense_gelu_layernorm_tied_output_at_masked_positions_only():
    obj = objective().eval()
    gen = obj.generator
    batch = make_batch()
    positions = torch.tensor([1, 5, 40, 70])
    logits = gen(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], positions)
    assert logits.shape == (4, VOCAB)
    hidden = gen.electra(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    h = hidden.reshape(-1, hidden.shape[-1])[positions]
    head = gen.generator_predictions
    manual = F.layer_norm(F.gelu(head.dense(h)), (24,), head.LayerNorm.weight,
                          head.LayerNorm.bias, eps=1e-12)
    manual = manual @ obj.discriminator.electra.embeddings.word_embeddings.weight.T
    manual = manual + gen.output_bias
    torch.testing.assert_close(logits, manual, rtol=1e-5, atol=1e-5)


def test_categorical_sampling_follows_softmax_without_gradient(monkeypatch):
    """Inverse-CDF sampling (our replacement for the official Gumbel-max, same distribution):
    frequencies match the softmax, over 4 tokens and over 30,000."""
    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0]], requires_grad=True)
    samples = categorical_sample(logits.to(torch.bfloat16).expand(20000, 4),
                                 generator=torch.Generator().manual_seed(0))
    assert not samples.requires_grad and samples.dtype == torch.long
    freq = torch.bincount(samples, minlength=4).float() / 20000
    torch.testing.assert_close(freq, logits.detach().softmax(-1)[0], atol=0.015, rtol=0)
    wide = torch.zeros(1, 30000)
    wide[0, 7] = math.log(0.05 * 29999 / 0.95)  # p = 0.05 among 30,000 tokens
    wide[0, 9] = float("-inf")
    gen = torch.Generator().manual_seed(1)
    draws = torch.cat([categorical_sample(wide.expand(500, -1), gen) for _ in range(10)])
    assert abs((draws == 7).float().mean().item() - 0.05) < 0.012 and (draws != 9).all()
    assert len(draws.unique()) > 3000  # the other tokens are drawn too, spread out
    # u = 0 exactly (torch.rand can return it): the first entry with probability > 0, never a
    # leading zero-probability one (searchsorted right=True); u just below 1: the last such
    never = torch.tensor([[float("-inf"), float("-inf"), 0.0, 0.0, float("-inf")]])
    for value, expected in ((0.0, 2), (1.0 - 2**-53, 3)):
        with monkeypatch.context() as patch:
            patch.setattr(torch, "rand", lambda *a, value=value, **k: torch.full(
                a[0], value, dtype=k.get("dtype")))
            assert categorical_sample(never).item() == expected


def test_categorical_sampling_cdf_is_the_float64_softmax_of_the_logits():
    """The CDF is computed by casting to float64 first (faster on CPU than softmax's dtype
    argument); the samples are those of softmax(logits, dtype=float64), bit for bit."""
    logits = (torch.randn(64, 3000, generator=torch.Generator().manual_seed(2)) * 4)
    for dtype in (torch.float32, torch.bfloat16):
        x = logits.to(dtype)
        cdf = torch.softmax(x, dim=-1, dtype=torch.float64).cumsum(-1)
        u = torch.rand((64, 1), generator=torch.Generator().manual_seed(3),
                       dtype=torch.float64) * cdf[:, -1:]
        expected = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_max(2999)
        assert torch.equal(categorical_sample(x, torch.Generator().manual_seed(3)), expected)


def test_gumbel_sampling_is_fp32_without_gradient_and_follows_softmax():
    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0]], requires_grad=True)
    samples = gumbel_sample(logits.to(torch.bfloat16).expand(20000, 4))
    assert not samples.requires_grad
    freq = torch.bincount(samples, minlength=4).float() / 20000
    torch.testing.assert_close(freq, logits.detach().softmax(-1)[0], atol=0.015, rtol=0)


def test_sample_equal_to_original_is_labelled_original():
    """A generator that always predicts the original token replaces nothing."""
    obj = objective()
    batch = make_batch(batch=4, seq=32)
    with torch.no_grad():
        obj.generator.output_bias.zero_()
        obj.generator.generator_predictions.dense.weight.zero_()
        obj.generator.generator_predictions.dense.bias.zero_()
        obj.generator.generator_predictions.LayerNorm.weight.zero_()
        obj.generator.generator_predictions.LayerNorm.bias.zero_()
        # every token in this batch gets an overwhelming bias; only one distinct token id
        batch["input_ids"][batch["input_ids"] >= 5] = 7
        obj.generator.output_bias[7] = 1e4
    out = obj(batch)
    assert out.counts["masked"] > 0
    assert out.counts["replaced"] == 0
    assert not out.details["is_replaced"].any()


def test_losses_gen_plus_50_disc_and_disc_averaged_over_non_padding():
    obj = objective()
    batch = make_batch(batch=3, seq=32, pad_from=10)
    torch.manual_seed(3)
    out = obj(batch)
    assert obj.cfg.disc_weight == 50.0 and obj.cfg.gen_weight == 1.0
    torch.testing.assert_close(out.loss.detach(),
                               out.losses["gen_loss"] + 50.0 * out.losses["disc_loss"])
    d = out.details
    real = d["real"]
    manual = F.binary_cross_entropy_with_logits(d["disc_logits"][real],
                                                d["is_replaced"][real].float())
    torch.testing.assert_close(out.losses["disc_loss"], manual)
    assert out.counts["tokens"] == batch["attention_mask"].sum()


def test_generator_loss_is_mean_cross_entropy_over_masked_positions(monkeypatch):
    obj = objective().eval()
    batch = make_batch(batch=2, seq=32)
    captured = {}
    original = obj.generator.forward

    def spy(*args, **kw):
        logits = original(*args, **kw)
        captured["logits"], captured["positions"] = logits, args[3]
        return logits

    monkeypatch.setattr(obj.generator, "forward", spy)
    out = obj(batch)
    targets = batch["input_ids"].view(-1)[captured["positions"]]
    manual = F.cross_entropy(captured["logits"].float(), targets)
    torch.testing.assert_close(out.losses["gen_loss"], manual)
    assert captured["logits"].shape[0] == out.counts["masked"]


def test_discriminator_loss_does_not_reach_generator_through_samples():
    """Sampling blocks gradient: with the generator loss weighted 0, only the shared
    embeddings of the generator side receive gradient."""
    obj = objective(gen_weight=0.0)
    out = obj(make_batch())
    out.loss.backward()
    for name, p in obj.generator.named_parameters():
        if "electra.embeddings." in name:
            continue
        assert p.grad is None or not p.grad.any(), name
    assert obj.discriminator.electra.embeddings.word_embeddings.weight.grad.any()


def test_generator_loss_does_not_reach_discriminator_layers():
    obj = objective(disc_weight=0.0)
    obj(make_batch()).loss.backward()
    for name, p in obj.discriminator.named_parameters():
        if "electra.embeddings." in name:
            continue
        assert p.grad is None or not p.grad.any(), name


def test_metrics_precision_recall_from_counts():
    counts = {"masked": 10, "gen_correct": 4, "tokens": 100, "disc_correct": 90,
              "replaced": 6, "disc_pred_pos": 8, "disc_true_pos": 4}
    m = metrics_from_counts(counts)
    assert m["gen_acc"] == 0.4 and m["disc_acc"] == 0.9
    assert m["disc_precision"] == 0.5 and m["disc_recall"] == pytest.approx(4 / 6)
    assert m["replaced_frac"] == 0.6


def test_objective_counts_match_details():
    obj = objective()
    out = obj(make_batch(batch=4, seq=32, pad_from=20))
    d = out.details
    predicted = (d["disc_logits"] > 0) & d["real"]
    assert out.counts["disc_pred_pos"] == predicted.sum()
    assert out.counts["disc_true_pos"] == (predicted & d["is_replaced"]).sum()
    assert out.counts["replaced"] == d["is_replaced"].sum()


def test_bf16_autocast_runs_and_keeps_losses_fp32():
    obj = objective()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = obj(make_batch())
    assert out.loss.dtype == torch.float32
    assert torch.isfinite(out.loss)
    out.loss.backward()


def test_generator_multiplier_must_give_whole_sizes():
    from electra.errors import ElectraError

    cfg = dataclasses.replace(PretrainConfig.from_preset("tiny"))
    cfg.objective.generator_multiplier = 1 / 3  # 128 / 3 is not a whole hidden size
    with pytest.raises(ElectraError, match="whole sizes"):
        cfg.validate()


@pytest.mark.parametrize("preset,heads", [("small", 1), ("base", 4), ("large", 4), ("tiny", 1)])
def test_generator_heads_follow_official_rule(preset, heads):
    """Official get_generator_config: heads = max(1, generator hidden // 64); Table 5.1 sizes."""
    cfg = PretrainConfig.from_preset(preset)
    gen = cfg.model.scaled(cfg.objective.generator_multiplier)
    assert gen.num_attention_heads == heads == max(1, gen.hidden_size // 64)
    assert gen.intermediate_size == 4 * gen.hidden_size


def test_generator_eighth_of_tiny_is_one_narrow_head():
    gen = PretrainConfig.from_preset("tiny").model.scaled(1 / 8)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == (16, 1, 64)


# --- ELECTRA 15% (dissertation 5.4.3) --------------------------------------------------------


def test_electra_15_discriminator_loss_only_over_masked_positions(monkeypatch):
    import electra.objectives.core as core_module

    captured = {}
    real_select = core_module.select_slots

    def spy(*args, **kw):
        slots = real_select(*args, **kw)
        captured["masked"] = slots.mask()
        return slots

    monkeypatch.setattr(core_module, "select_slots", spy)
    obj = objective(name="electra-15")
    batch = make_batch(batch=3, seq=32, pad_from=10)
    out = obj(batch)
    masked, d = captured["masked"], out.details
    assert torch.equal(d["real"], masked)
    manual = F.binary_cross_entropy_with_logits(d["disc_logits"][masked],
                                                d["is_replaced"][masked].float())
    torch.testing.assert_close(out.losses["disc_loss"], manual)
    assert out.counts["tokens"] == masked.sum() < batch["attention_mask"].sum()
    # gradient flows from the masked positions only: a loss on other positions is absent
    torch.testing.assert_close(out.loss, out.losses["gen_loss"] + 50.0 * manual)


def test_electra_15_costs_what_electra_costs():
    from electra.objectives import objective_step_flops

    model = small_model()
    full = objective_step_flops(model, ObjectiveConfig(name="electra"), 8, 32)
    fifteen = objective_step_flops(model, ObjectiveConfig(name="electra-15"), 8, 32)
    assert full == fifteen


def test_discriminator_bias_starts_at_zero_as_the_official_code():
    obj = objective()
    assert obj.discriminator.discriminator_predictions.dense_prediction.bias.item() == 0.0


def test_base_rate_bias_init_predicts_the_replaced_share_before_training():
    """objective.disc_bias_init="base-rate" (ours, docs/experiments/collapse.md): the untrained
    discriminator's mean P(replaced) is mask_prob, not 0.5."""
    obj = objective(disc_bias_init="base-rate", mask_prob=0.15)
    obj.eval()
    batch = make_batch(batch=4, seq=32)
    with torch.no_grad():
        logits = obj.discriminator(batch["input_ids"], batch["token_type_ids"],
                                   batch["attention_mask"])
    assert torch.sigmoid(logits).mean().item() == pytest.approx(0.15, abs=0.02)
    bias = obj.discriminator.discriminator_predictions.dense_prediction.bias.item()
    assert bias == pytest.approx(-1.7346, abs=1e-4)  # log(0.15 / 0.85)


def test_base_rate_bias_init_is_refused_where_not_every_token_is_scored():
    from electra.errors import ElectraError

    cfg = ObjectiveConfig(name="electra-15", disc_bias_init="base-rate")
    with pytest.raises(ElectraError, match="disc_bias_init"):
        cfg.validate()
    with pytest.raises(ElectraError, match="objective.disc_bias_init"):
        ObjectiveConfig(disc_bias_init="half").validate()


def test_paper_presets_keep_the_official_bias_and_positions():
    for preset in ("tiny", "small", "base", "large"):
        cfg = PretrainConfig.from_preset(preset)
        cfg.validate()
        assert cfg.objective.disc_bias_init == "zero"
        assert cfg.model.position_bias == "none"


def test_tiny_local_preset_is_tiny_plus_its_two_departures():
    tiny, local = PretrainConfig.from_preset("tiny"), PretrainConfig.from_preset("tiny-local")
    assert dataclasses.replace(local.model, position_bias="none",
                               alibi_max_slope=None) == tiny.model
    assert (local.model.position_bias, local.model.alibi_max_slope) == ("alibi", 1.0)
    assert local.train == tiny.train
    local.validate()
    assert local.objective.disc_bias_init == "base-rate"


@pytest.mark.parametrize("objective", ["mlm", "electra-15", "teams", "electric"])
def test_a_presets_objective_settings_apply_to_their_objective_only(objective):
    """`--preset tiny-local --objective X` trains X with X's own settings: the preset's
    base-rate bias is ELECTRA's, so any other objective starts at zero, one flag apart."""
    cfg = PretrainConfig.from_preset("tiny-local")
    cfg.objective.name = objective
    cfg.validate()
    assert cfg.objective.disc_bias_init == "zero"
    assert cfg.model.position_bias == "alibi"  # the preset's model is the preset's still


def test_flops_reports_the_settings_training_would_use():
    from electra.pretraining.flops_report import flops_report

    for objective, bias in (("electra", "base-rate"), ("mlm", "zero")):
        cfg = PretrainConfig.from_preset("tiny-local")
        cfg.objective.name = objective
        assert flops_report(cfg)["objective_config"]["disc_bias_init"] == bias


def test_a_base_rate_bias_asked_for_another_objective_is_refused():
    from electra.errors import ElectraError

    cfg = PretrainConfig.from_preset("tiny-local")
    cfg.objective.name, cfg.objective.disc_bias_init = "mlm", "base-rate"
    with pytest.raises(ElectraError, match="disc_bias_init unset or zero"):
        cfg.validate()

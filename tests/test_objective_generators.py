"""Generator options and weight sharing (dissertation 5.3.1-5.3.2; official run_pretraining.py
`temperature`, `disallow_correct`, `uniform_generator`; DeBERTa-V3's GDES)."""

from __future__ import annotations

import pytest
import torch
from test_electra_objective import SPECIAL, VOCAB, make_batch, small_model

from electra.config import ObjectiveConfig
from electra.errors import ElectraError
from electra.model.hf import load_encoder, save_pretrained
from electra.model.networks import Discriminator
from electra.objectives import ObjectiveContext, build_objective
from electra.objectives.generators import (
    GdesEmbeddings,
    build_sampler,
    generator_config,
    sample_from_logits,
)

SPECIAL_IDS = [SPECIAL.pad, SPECIAL.unk, SPECIAL.cls, SPECIAL.sep, SPECIAL.mask]


def build(context: ObjectiveContext | None = None, **obj_kw):
    torch.manual_seed(0)
    return build_objective(small_model(), ObjectiveConfig(**obj_kw), SPECIAL, context)


def grads_of(module: torch.nn.Module) -> dict[str, bool]:
    return {n: p.grad is not None and bool(p.grad.any()) for n, p in module.named_parameters()}


# --- generator size and depth ------------------------------------------------------------


def test_generator_multiplier_one_and_own_depth():
    obj = build(generator_multiplier=1.0, generator_layers=1)
    gen_cfg = obj.generator.config
    assert (gen_cfg.hidden_size, gen_cfg.num_attention_heads, gen_cfg.intermediate_size) == (
        32, 4, 64)
    assert len(obj.generator.electra.layers) == 1
    assert len(obj.discriminator.electra.layers) == 2
    out = obj(make_batch())
    assert torch.isfinite(out.loss)


def test_generator_config_quarter_width_same_embedding_size():
    cfg = generator_config(small_model(), ObjectiveConfig(generator_multiplier=0.25,
                                                          generator_layers=2))
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size,
            cfg.num_hidden_layers, cfg.embedding_size) == (8, 1, 16, 2, 24)


# --- sampling ------------------------------------------------------------------------------


def test_temperature_samples_from_softmax_of_logits_over_t():
    torch.manual_seed(0)
    logits = torch.tensor([[3.0, 1.0, 0.0, -1.0]]).expand(40000, 4)
    freq = torch.bincount(sample_from_logits(logits, temperature=2.0), minlength=4) / 40000
    torch.testing.assert_close(freq, (logits[0] / 2.0).softmax(-1), atol=0.01, rtol=0)
    cold = torch.bincount(sample_from_logits(logits, temperature=0.05), minlength=4) / 40000
    assert cold[0] > 0.999


def test_disallow_correct_never_samples_the_original():
    torch.manual_seed(0)
    logits = torch.zeros(5000, 6)
    original = torch.randint(0, 6, (5000,))
    logits[torch.arange(5000), original] = 30.0  # the original is almost certain
    samples = sample_from_logits(logits, disallow=original)
    assert not (samples == original).any()
    # without the option nearly all samples are the original
    assert (sample_from_logits(logits) == original).float().mean() > 0.99


def test_disallow_correct_replaces_every_masked_position():
    obj = build(disallow_correct=True)
    out = obj(make_batch())
    assert out.counts["replaced"] == out.counts["masked"] > 0


def test_uniform_sampler_is_flat_over_non_special_tokens():
    sampler = build_sampler("uniform", VOCAB, SPECIAL, ObjectiveContext())
    torch.manual_seed(0)
    samples = sample_from_logits(sampler.logits(45000))
    freq = torch.bincount(samples, minlength=VOCAB).float() / 45000
    assert freq[SPECIAL_IDS].sum() == 0
    assert (freq[5:] - 1 / (VOCAB - 5)).abs().max() < 0.006


def test_unigram_sampler_follows_corpus_counts_and_never_samples_special_tokens():
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    counts[SPECIAL_IDS] = 1e6  # [PAD] and [CLS]/[SEP] are the most frequent ids in a corpus
    counts[10], counts[11], counts[12] = 6.0, 3.0, 1.0
    sampler = build_sampler("unigram", VOCAB, SPECIAL,
                            ObjectiveContext(token_counts=lambda: counts))
    torch.manual_seed(0)
    freq = torch.bincount(sample_from_logits(sampler.logits(30000)), minlength=VOCAB) / 30000
    assert freq[SPECIAL_IDS].sum() == 0
    torch.testing.assert_close(freq[[10, 11, 12]], torch.tensor([0.6, 0.3, 0.1]), atol=0.012,
                               rtol=0)
    assert freq.sum() == pytest.approx(freq[[10, 11, 12]].sum())


def test_unigram_needs_corpus_counts():
    with pytest.raises(ElectraError, match="token counts"):
        build(generator="unigram")


@pytest.mark.parametrize("kind", ["unigram", "uniform"])
def test_network_free_generator_has_no_weights_and_no_generator_loss(kind):
    counts = torch.ones(VOCAB, dtype=torch.float64)
    obj = build(ObjectiveContext(special=SPECIAL, token_counts=lambda: counts), generator=kind)
    assert obj.generator is None
    assert list(obj.exportable()) == ["discriminator"]
    out = obj(make_batch())
    assert "gen_loss" not in out.losses
    torch.testing.assert_close(out.loss, 50.0 * out.losses["disc_loss"])
    assert out.counts["replaced"] > 0.9 * out.counts["masked"]  # 45 candidate tokens


def test_sharing_other_than_embeddings_needs_an_mlm_generator():
    with pytest.raises(ElectraError, match="objective.sharing"):
        build(ObjectiveContext(token_counts=lambda: torch.ones(VOCAB)), generator="uniform",
              sharing="none")


# --- weight sharing ------------------------------------------------------------------------


def test_sharing_none_gives_separate_embeddings():
    obj = build(sharing="none")
    d, g = obj.discriminator.electra.embeddings, obj.generator.electra.embeddings
    assert d is not g
    disc_ptrs = {p.data_ptr() for p in obj.discriminator.parameters()}
    assert not disc_ptrs & {p.data_ptr() for p in obj.generator.parameters()}
    # the generator's output matrix is still its own input embeddings (tied as in BERT)
    obj(make_batch()).loss.backward()
    assert g.word_embeddings.weight.grad.any()


def test_sharing_all_ties_every_encoder_weight_as_one_tensor():
    obj = build(sharing="all", generator_multiplier=1.0)
    disc = dict(obj.discriminator.electra.named_parameters())
    gen = dict(obj.generator.electra.named_parameters())
    assert disc.keys() == gen.keys() and len(disc) > 10
    for name in disc:
        assert disc[name] is gen[name], name
    # the heads stay separate
    assert obj.generator.generator_predictions is not None
    head_ptrs = {p.data_ptr() for p in obj.generator.generator_predictions.parameters()}
    assert not head_ptrs & {p.data_ptr() for p in obj.discriminator.parameters()}
    out = obj(make_batch())
    out.loss.backward()


@pytest.mark.parametrize("kw", [{"generator_multiplier": 0.5},
                                {"generator_multiplier": 1.0, "generator_layers": 1}])
def test_sharing_all_requires_same_size(kw):
    with pytest.raises(ElectraError, match="generator_multiplier=1.0"):
        build(sharing="all", **kw)


def test_gdes_discriminator_table_is_generator_table_detached_plus_zero_delta():
    obj = build(sharing="gdes")
    emb = obj.discriminator.electra.embeddings
    assert isinstance(emb, GdesEmbeddings)
    shared = obj.generator.electra.embeddings
    assert emb.shared is shared
    for delta in emb.deltas.values():
        assert not delta.any()  # zero-initialised
    with torch.no_grad():
        emb.deltas["word_embeddings__weight"].normal_()
    effective = emb.effective_parameters()["word_embeddings.weight"]
    torch.testing.assert_close(effective, shared.word_embeddings.weight
                               + emb.deltas["word_embeddings__weight"])
    # the discriminator's embedding output uses E_G + E_delta
    obj.eval()
    ids = make_batch()["input_ids"]
    types = torch.zeros_like(ids)
    manual = (effective[ids] + shared.position_embeddings.weight[: ids.shape[1]]
              + shared.token_type_embeddings.weight[types])
    manual = torch.nn.functional.layer_norm(manual, (24,), shared.LayerNorm.weight,
                                            shared.LayerNorm.bias, eps=1e-12)
    torch.testing.assert_close(emb(ids, types), manual)


def test_gdes_generator_table_gets_no_gradient_from_the_discriminator_loss():
    obj = build(sharing="gdes", gen_weight=0.0)
    obj(make_batch()).loss.backward()
    gen = grads_of(obj.generator)
    assert not any(gen.values()), [n for n, g in gen.items() if g]
    assert obj.discriminator.electra.embeddings.deltas["word_embeddings__weight"].grad.any()


def test_gdes_delta_gets_no_gradient_from_the_mlm_loss():
    obj = build(sharing="gdes", disc_weight=0.0)
    obj(make_batch()).loss.backward()
    assert obj.generator.electra.embeddings.word_embeddings.weight.grad.any()
    deltas = obj.discriminator.electra.embeddings.deltas
    assert all(d.grad is None or not d.grad.any() for d in deltas.values())


def test_gdes_export_holds_the_effective_table_and_loads(tmp_path):
    obj = build(sharing="gdes").eval()
    with torch.no_grad():
        for delta in obj.discriminator.electra.embeddings.deltas.values():
            delta.normal_(std=0.1)
    exported = obj.exportable()["discriminator"]
    assert type(exported) is Discriminator
    batch = make_batch(pad_from=20)
    with torch.no_grad():
        expected = obj.discriminator(batch["input_ids"], batch["token_type_ids"],
                                     batch["attention_mask"])
        torch.testing.assert_close(exported(batch["input_ids"], batch["token_type_ids"],
                                            batch["attention_mask"]), expected)
    path = save_pretrained(exported, tmp_path / "disc")
    encoder = load_encoder(path)
    shared = obj.generator.electra.embeddings.word_embeddings.weight
    delta = obj.discriminator.electra.embeddings.deltas["word_embeddings__weight"]
    torch.testing.assert_close(encoder.embeddings.word_embeddings.weight, shared + delta)

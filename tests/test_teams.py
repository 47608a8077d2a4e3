"""TEAMS (Shen et al., 2021, section 3): candidate sets, multi-word selection, partial layer
sharing, attention-based task-specific heads, loss weights, end-to-end pre-training."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from objective_helpers import SPECIAL, VOCAB  # noqa: E402
from objective_helpers import make_batch as _make_batch  # noqa: E402
from resume_helpers import interrupted_and_resumed
from safetensors.torch import load_file
from test_train import read_metrics  # noqa: E402

from electra.config import ModelConfig, ObjectiveConfig, PretrainConfig, merge
from electra.errors import ElectraError
from electra.model.encoder import attention_bias
from electra.model.hf import load_pretrained
from electra.model.networks import Discriminator, Generator
from electra.objectives import (
    build_objective,
    metrics_from_counts,
    objective_step_flops,
    resolved,
)
from electra.objectives import core as core_mod
from electra.objectives.masking import MaskedSlots
from electra.objectives.teams import mws_loss, sample_candidates
from electra.pretraining.loop import pretrain


def model_cfg(**kw) -> ModelConfig:
    base = dict(vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=4,
                num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return ModelConfig(**{**base, **kw})


def objective(model_kw=None, **obj_kw):
    torch.manual_seed(0)
    return build_objective(model_cfg(**(model_kw or {})), ObjectiveConfig(name="teams", **obj_kw),
                           SPECIAL)


make_batch = functools.partial(_make_batch, batch=3, seq=20, pad_from=15, sentence_pair=False)


def test_published_settings_lambda1_5_lambda2_2_k5_section_4_1():
    cfg = resolved(ObjectiveConfig(name="teams"))
    assert (cfg.disc_weight, cfg.mws_weight, cfg.teams_candidates) == (5.0, 2.0, 5)


def test_candidate_set_original_plus_k_distinct_non_original_tokens():
    torch.manual_seed(0)
    logits = torch.randn(300, 30) * 3
    originals = torch.randint(0, 30, (300,))
    logits[torch.arange(300), originals] = 100.0  # even when the original is near-certain
    cands = sample_candidates(logits, originals, 5)
    assert cands.shape == (300, 6)  # K + 1 entries
    assert torch.equal(cands[:, 0], originals)  # the original is always in the set
    assert not (cands[:, 1:] == originals[:, None]).any()  # and only once
    assert all(len(set(row.tolist())) == 6 for row in cands)  # no duplicates


def test_candidates_sampled_without_replacement_from_generator_distribution():
    """First negative ~ p_j / (1 - p_original); with K = V - 1 every other token appears."""
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(20000, 4)
    originals = torch.zeros(20000, dtype=torch.long)
    first = sample_candidates(logits, originals, 1, torch.Generator().manual_seed(1))[:, 1]
    freq = torch.bincount(first, minlength=4).float() / 20000
    assert freq[0].item() == 0
    assert torch.allclose(freq[1:], torch.tensor([0.6, 0.3, 0.1]), atol=0.015)
    everything = sample_candidates(logits[:10], originals[:10], 3)
    assert all(sorted(row.tolist()) == [0, 1, 2, 3] for row in everything)
    with pytest.raises(ElectraError, match="teams_candidates"):
        sample_candidates(logits[:2], originals[:2], 4)


def test_mws_loss_hand_computed_eq_7_8():
    emb = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    h = torch.tensor([[2.0, 1.0], [0.0, 1.0]])
    cands = torch.tensor([[2, 0, 1], [3, 1, 0]])  # original first
    loss, logits = mws_loss(h, cands, emb)
    assert logits.tolist() == [[3.0, 2.0, 1.0], [0.0, 1.0, 0.0]]
    first = math.log(1 + math.exp(-1) + math.exp(-2))
    second = -math.log(1 / (1 + math.e + 1))
    assert loss.item() == pytest.approx((first + second) / 2, rel=1e-6)


def test_partial_layer_sharing_bottom_half_of_generator_is_one_tensor_section_3_2():
    obj = objective()  # 4 discriminator layers -> generator 2 layers, bottom 1 shared
    disc, gen = obj.discriminator.electra, obj.generator.electra
    assert len(gen.layers) == 2 and obj.shared_layers == 1
    assert gen.config.hidden_size == disc.config.hidden_size == 32  # the discriminator's width
    assert gen.config.intermediate_size == 64 and gen.config.num_attention_heads == 2
    assert gen.layers[0].attention.qkv.weight is disc.layers[0].attention.qkv.weight
    assert gen.layers[0].ffn_out.weight is disc.layers[0].ffn_out.weight
    assert gen.layers[1].ffn_out.weight is not disc.layers[1].ffn_out.weight
    assert gen.embeddings is disc.embeddings
    assert gen.embeddings_project is disc.embeddings_project
    names = [n for n, _ in obj.named_parameters()]
    assert not any(n.startswith("generator.electra.layers.0.") for n in names)  # listed once
    both = objective(teams_shared_layers=2)
    assert both.generator.electra.layers[1] is both.discriminator.electra.layers[1]
    deeper = objective(generator_layers=3)
    assert len(deeper.generator.electra.layers) == 3 and deeper.shared_layers == 1


def test_generator_loss_trains_the_shared_discriminator_layer_only():
    obj = objective(disc_weight=0.0, mws_weight=0.0)  # generator loss only
    obj(make_batch()).loss.backward()
    assert torch.count_nonzero(obj.discriminator.electra.layers[0].ffn_in.weight.grad) > 0
    assert torch.count_nonzero(obj.discriminator.electra.layers[1].ffn_in.weight.grad) == 0


def test_rtd_from_extra_layer_over_layer_l_minus_1_mws_from_layer_l_and_total_loss(monkeypatch):
    """Section 3.2 "Attention-based Task-specific Heads" (layer L-1 -> one extra layer -> RTD;
    layer L -> MWS, Eq. 7) and Eq. 9: MLM + 5 RTD + 2 MWS."""
    batch = make_batch()
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    masked = torch.zeros_like(ids, dtype=torch.bool)
    masked[0, [2, 5]] = masked[1, 3] = masked[2, 9] = True
    ids[0, 5] = 7  # a masked position whose sample (7) equals the original: not replaced
    # Two slots per row, the masked positions first in ascending order.
    index = masked.int().argsort(dim=1, descending=True, stable=True)[:, :2]
    slots = MaskedSlots(index, masked.gather(1, index), ids.shape[1])
    weights = slots.flat_weights
    monkeypatch.setattr(core_mod, "select_slots", lambda *a, **k: slots)
    monkeypatch.setattr(core_mod, "sample_from_logits",
                        lambda logits, *a, **k: torch.full(logits.shape[:-1], 7))
    obj = objective()
    out = obj(batch)
    noised = ids.masked_fill(masked, 7)
    replaced = noised != ids
    assert torch.equal(out.details["is_replaced"], replaced) and replaced.sum() == 3
    enc = obj.discriminator.electra
    with torch.no_grad():
        final = enc(noised, types, mask)  # the ordinary encoder forward: layer L
        x = enc.embeddings_project(enc.embeddings(noised, types))
        bias = attention_bias(mask, x.dtype)
        for layer in enc.layers[:-1]:  # layers 1 .. L-1
            x = layer(x, bias)
        rtd_logits = obj.discriminator.discriminator_predictions(obj.rtd_layer(x, bias))
        cands = out.details["candidates"]
        assert torch.equal(out.details["slot_weights"], weights)
        cands = cands[weights]
        assert torch.equal(cands[:, 0], ids[masked])  # candidate rows in masked order
        h = obj.mws_head(final[masked])
        mws_logits = torch.einsum("me,mce->mc", h, enc.embeddings.word_embeddings.weight[cands])
    assert torch.allclose(out.details["disc_logits"], rtd_logits, atol=1e-5)
    assert torch.allclose(out.details["mws_logits"][weights], mws_logits, atol=1e-5)
    bce = F.binary_cross_entropy_with_logits(rtd_logits, replaced.float(), reduction="none")
    rtd = (bce * mask).sum() / mask.sum()
    mws = F.cross_entropy(mws_logits, torch.zeros(4, dtype=torch.long))
    gen = out.losses["gen_loss"]
    assert out.losses["disc_loss"].item() == pytest.approx(rtd.item(), rel=1e-5)
    assert out.losses["mws_loss"].item() == pytest.approx(mws.item(), rel=1e-5)
    assert out.loss.item() == pytest.approx(gen.item() + 5 * rtd.item() + 2 * mws.item(),
                                            rel=1e-5)


def test_one_candidate_set_of_k_plus_1_per_masked_position_by_default():
    obj = objective()
    out = obj(make_batch(batch=4, seq=30))
    assert out.counts["masked"].item() == 4 + 4 + 4 + 2  # round(0.15 * 30), round(0.15 * 15)
    # 4 slots per row (max_predictions(30, 0.15)), 14 of them masked positions
    assert out.details["candidates"].shape == (16, 6)
    assert out.details["mws_logits"].shape == (16, 6)
    assert out.details["slot_weights"].sum() == 14


def test_mws_accuracy_is_logged_from_the_counts():
    """mws_acc: the share of masked positions where the original token scores highest among
    its K + 1 candidates; with the generator and discriminator metrics of ELECTRA."""
    out = objective()(make_batch(batch=4, seq=30))
    counts = {k: float(v) for k, v in out.counts.items()}
    metrics = metrics_from_counts(counts)
    assert metrics == metrics_from_counts(counts, "teams")
    rows = out.details["mws_logits"][out.details["slot_weights"]]
    top = (rows.argmax(-1) == 0).float().mean().item()
    assert metrics["mws_acc"] == pytest.approx(top)
    assert {"gen_acc", "replaced_frac", "disc_acc", "disc_precision", "disc_recall"} < set(metrics)


@pytest.mark.parametrize("model_kw,obj_kw,field", [
    ({}, {"teams_shared_layers": 3}, "objective.teams_shared_layers"),
    ({"num_hidden_layers": 1}, {}, "num_hidden_layers"),
    ({}, {"teams_candidates": 50}, "objective.teams_candidates"),
    ({}, {"sharing": "none"}, "objective.sharing"),
])
def test_bad_settings_are_errors(model_kw, obj_kw, field):
    with pytest.raises(ElectraError, match=field):
        objective(model_kw, **obj_kw)


def test_step_flops_breakdown():
    from electra import flops

    cfg = model_cfg()
    out = objective_step_flops(cfg, ObjectiveConfig(name="teams"), 2, 32)
    assert out["discriminator.rtd_layer"] == 2 * 2 * flops.layer_flops(cfg, 32)
    assert out["generator.layers"] == 2 * 2 * 2 * flops.layer_flops(cfg, 32)  # 2 layers, width H
    assert out["discriminator.layers"] == 2 * 2 * 4 * flops.layer_flops(cfg, 32)
    assert out["discriminator.mws_head"] > 0


TINY_RUN = {
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"name": "teams", "teams_shared_layers": 1},
    "train": {"steps": 3, "batch_size": 8, "learning_rate": 1e-3, "warmup_steps": 1,
              "log_every": 1, "save_every": 3, "seed": 3},
}


def test_pretrains_end_to_end_and_exports(data_dir: Path, tmp_path: Path):
    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg, TINY_RUN)
    summary = pretrain(cfg, data_dir, tmp_path / "run", device="cpu", show_progress=False)
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) for r in records)
    assert all(0.0 <= r["mws_acc"] <= 1.0 and "disc_acc" in r for r in records)
    disc = load_pretrained(summary["final"]["discriminator"])
    gen = load_pretrained(summary["final"]["generator"])
    assert isinstance(disc, Discriminator) and isinstance(gen, Generator)
    assert len(disc.electra.layers) == 2 and len(gen.electra.layers) == 1
    assert gen.config.hidden_size == 32
    d = load_file(str(Path(summary["final"]["discriminator"]) / "model.safetensors"))
    g = load_file(str(Path(summary["final"]["generator"]) / "model.safetensors"))
    key = "electra.encoder.layer.0.attention.self.query.weight"
    assert torch.equal(d[key], g[key])  # the shared layer, exported into both
    assert not any("rtd_layer" in k or "mws" in k for k in d)  # pre-training heads dropped


def test_resume_restores_shared_layers_exactly(data_dir: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch):
    """Checkpoints hold the shared layers once; interrupted after step 2 and resumed, a
    3-step run ends bit-identical to an uninterrupted one."""
    def run(out: Path, resume: bool = False) -> Path:
        cfg = PretrainConfig.from_preset("tiny")
        merge(cfg, TINY_RUN)
        merge(cfg, {"train": {"save_every": 2}})
        pretrain(cfg, data_dir, out, resume=resume, device="cpu", show_progress=False)
        return out / "final"

    straight = run(tmp_path / "a")
    resumed = interrupted_and_resumed(run, tmp_path / "b", monkeypatch)
    for name in ("discriminator", "generator"):
        a = load_file(str(straight / name / "model.safetensors"))
        b = load_file(str(resumed / name / "model.safetensors"))
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), name

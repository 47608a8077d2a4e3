"""Electric (NCE, dissertation 5.1.3-5.1.5, Algorithm 2) and ELECTRA-TT (5.4.4-5.4.5)."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from objective_helpers import SPECIAL, small_model  # noqa: E402
from objective_helpers import make_batch as _make_batch  # noqa: E402
from safetensors.torch import load_file
from test_train import read_metrics  # noqa: E402

from electra.config import ModelConfig, ObjectiveConfig, PretrainConfig, merge
from electra.errors import ElectraError
from electra.model.hf import load_pretrained
from electra.model.two_tower import TwoTowerGenerator, load_two_tower
from electra.objectives import build_objective, metrics_from_counts, objective_step_flops
from electra.objectives import electric as electric_mod
from electra.objectives.electric import nce_logits
from electra.pretraining.loop import pretrain

make_batch = functools.partial(_make_batch, batch=3, seq=20, sentence_pair=False)


def objective(name: str, **obj_kw):
    torch.manual_seed(0)
    return build_objective(small_model(), ObjectiveConfig(name=name, generator_multiplier=0.5,
                                                          **obj_kw), SPECIAL)


def test_nce_logit_hand_computed_algorithm_2():
    """D = k q / ((n - k) exp(-E) + k q) = sigmoid(E + log(k q / (n - k))); n = 4, k = 1."""
    energy = torch.tensor([[0.5, -1.0, 2.0, 0.0]])
    q = torch.tensor([[0.2, 0.5, 0.01, 0.9]])
    logits = nce_logits(energy, q.log(), torch.tensor([1]), torch.tensor([4]))
    assert logits[0, 0].item() == pytest.approx(0.5 + math.log(0.2 / 3), abs=1e-6)
    d = q / (3 * torch.exp(-energy) + q)
    assert torch.allclose(torch.sigmoid(logits), d, atol=1e-6)
    # per example k and n: a second example with n = 10, k = 2
    two = nce_logits(torch.zeros(2, 1), torch.zeros(2, 1), torch.tensor([1, 2]),
                     torch.tensor([4, 10]))
    assert two[:, 0].tolist() == pytest.approx([math.log(1 / 3), math.log(2 / 8)], abs=1e-6)


def _fixed_samples(monkeypatch, value: int):
    """Make the noise sampler return token `value` at every masked position."""
    def fake(logits, temperature=1.0, disallow=None):
        return torch.full(logits.shape[:-1], value, dtype=torch.long)
    monkeypatch.setattr(electric_mod, "sample_from_logits", fake)


def test_electric_every_replaced_position_is_noise_even_if_sample_equals_original(monkeypatch):
    """Algorithm 2 step 4 (official: labels = masked under electric_objective)."""
    batch = make_batch()
    batch["input_ids"][:, 1:-1] = 9  # every candidate token is 9 ...
    _fixed_samples(monkeypatch, 9)  # ... and every sample is 9: nothing actually changes
    out = objective("electric")(batch)
    labels = out.details["is_replaced"]
    assert labels.sum().item() == out.counts["masked"].item() == 3 * 3  # round(0.15 * 20)
    assert out.counts["sample_differs"].item() == 0
    tt = objective("electra-tt")(batch)
    assert tt.details["is_replaced"].sum().item() == 0  # negative sampling: not replaced


def test_electric_loss_hand_computed(monkeypatch):
    """disc logits = E(noised)_t + log q(noised_t | clean context) + log(k / (n - k)),
    BCE over real tokens; generator ML over every real non-special position of the clean
    input; loss = gen_weight * gen + disc_weight * disc."""
    batch = make_batch(pad_from=14)
    _fixed_samples(monkeypatch, 7)
    obj = objective("electric", gen_weight=1.5, disc_weight=50.0)
    out = obj(batch)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    masked = out.details["is_replaced"]
    noised = ids.masked_fill(masked, 7)
    with torch.no_grad():
        log_q = obj.generator(ids, batch["token_type_ids"], mask).float().log_softmax(-1)
        energy = obj.discriminator(noised, batch["token_type_ids"], mask)
    targets = mask.bool() & (ids > SPECIAL.mask)
    gen = -log_q.gather(-1, ids[..., None]).squeeze(-1)[targets].mean()
    k, n = masked.sum(1).float(), mask.sum(1).float()
    assert k.tolist() == [3, 3, 2] and n.tolist() == [20, 20, 14]
    logits = energy + log_q.gather(-1, noised[..., None]).squeeze(-1) + (k / (n - k)).log()[:, None]
    assert torch.allclose(out.details["disc_logits"][mask.bool()], logits[mask.bool()], atol=1e-5)
    bce = F.binary_cross_entropy_with_logits(logits, masked.float(), reduction="none")
    disc = (bce * mask).sum() / mask.sum()
    assert out.losses["gen_loss"].item() == pytest.approx(gen.item(), rel=1e-5)
    assert out.losses["disc_loss"].item() == pytest.approx(disc.item(), rel=1e-5)
    assert out.loss.item() == pytest.approx(1.5 * gen.item() + 50 * disc.item(), rel=1e-5)
    assert torch.equal(out.details["energy"], energy)


def test_q_is_detached_in_the_nce_logit():
    obj = objective("electric", gen_weight=0.0)
    obj(make_batch()).loss.backward()
    tower = obj.generator.ltr_layers[0].ffn_in.weight
    assert tower.grad is None or torch.count_nonzero(tower.grad) == 0
    assert torch.count_nonzero(obj.discriminator.electra.layers[0].ffn_in.weight.grad) > 0


@pytest.mark.parametrize("name", ["electric", "electra-tt"])
def test_generator_reads_the_clean_input_no_mask_token(name: str):
    obj = objective(name)
    seen = []
    obj.generator.register_forward_hook(lambda m, args, out: seen.append(args[0].clone()))
    batch = make_batch()
    obj(batch)
    assert len(seen) == 1 and torch.equal(seen[0], batch["input_ids"])


def test_electra_tt_samples_only_at_masked_positions_and_labels_differences():
    torch.manual_seed(3)
    obj = objective("electra-tt")
    batch = make_batch(batch=4, seq=30)
    out = obj(batch)
    replaced = out.details["is_replaced"]
    assert replaced.sum() <= out.counts["masked"]
    assert not replaced[:, 0].any() and not replaced[:, -1].any()
    assert out.counts["replaced"].item() == out.counts["sample_differs"].item()


@pytest.mark.parametrize("name", ["electric", "electra-tt"])
def test_sample_differs_frac_is_logged_from_the_counts(name: str, monkeypatch):
    """The share of noise samples that differ from the original token. Electric labels every
    masked position noise, so its replaced_frac is 1 and this is the informative one."""
    batch = make_batch(batch=4, seq=30)
    batch["input_ids"][:, 1:-1:2] = 9  # half the candidate tokens are 9 ...
    _fixed_samples(monkeypatch, 9)  # ... and every sample is 9
    out = objective(name)(batch)
    counts = {k: float(v) for k, v in out.counts.items()}
    metrics = metrics_from_counts(counts)
    assert metrics == metrics_from_counts(counts, name)
    masked = out.counts["masked"].item()
    assert metrics["sample_differs_frac"] == out.counts["sample_differs"].item() / masked
    assert 0 < metrics["sample_differs_frac"] < 1
    if name == "electric":
        assert metrics["replaced_frac"] == 1.0
    else:
        assert metrics["replaced_frac"] == metrics["sample_differs_frac"]


def test_electra_tt_disallow_correct_always_replaces():
    obj = objective("electra-tt", disallow_correct=True)
    out = obj(make_batch(batch=4, seq=30))
    assert out.counts["replaced"].item() == out.counts["masked"].item() == 4 * 4


def test_shared_embeddings_and_tower_sizes():
    obj = objective("electric", generator_layers=1)
    assert isinstance(obj.generator, TwoTowerGenerator)
    assert obj.generator.embeddings is obj.discriminator.electra.embeddings
    assert obj.generator.config.hidden_size == 16 and len(obj.generator.ltr_layers) == 1
    unshared = objective("electric", sharing="none")
    assert unshared.generator.embeddings is not unshared.discriminator.electra.embeddings


@pytest.mark.parametrize("kw,field", [({"sharing": "all"}, "objective.sharing"),
                                      ({"generator": "unigram"}, "objective.generator"),
                                      ({"algorithm": "two-stage"}, "objective.algorithm"),
                                      ({"disallow_correct": True}, "objective.disallow_correct")])
def test_unsupported_options_are_errors(kw, field):
    with pytest.raises(ElectraError, match=field):
        objective("electric", **kw)


def test_step_flops_two_towers_and_electra_discriminator():
    model_cfg = small_model()
    obj_cfg = ObjectiveConfig(name="electric", generator_multiplier=0.5)
    out = objective_step_flops(model_cfg, obj_cfg, 4, 32)
    from electra import flops
    gen = model_cfg.scaled(0.5)
    assert out["generator.layers"] == 2 * 4 * 2 * 2 * flops.layer_flops(gen, 32)
    assert out["discriminator.head"] == 2 * 4 * flops.binary_head_flops(model_cfg, 32)
    tt = objective_step_flops(model_cfg, ObjectiveConfig(name="electra-tt",
                                                         generator_multiplier=0.5), 4, 32)
    assert tt == out


TINY_RUN = {
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"generator_multiplier": 0.5},
    "train": {"steps": 3, "batch_size": 8, "learning_rate": 1e-3, "warmup_steps": 1,
              "log_every": 1, "save_every": 3, "seed": 3},
}


def run_pretrain(name: str, data_dir: Path, out: Path) -> dict:
    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg, {**TINY_RUN, "objective": {**TINY_RUN["objective"], "name": name}})
    return pretrain(cfg, data_dir, out, device="cpu", show_progress=False)


@pytest.mark.parametrize("name", ["electric", "electra-tt"])
def test_pretrains_end_to_end_and_exports(name: str, data_dir: Path, tmp_path: Path):
    summary = run_pretrain(name, data_dir, tmp_path / "run")
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) for r in records)
    assert all(0.0 <= r["sample_differs_frac"] <= 1.0 and "disc_acc" in r for r in records)
    disc_dir = Path(summary["final"]["discriminator"])
    gen_dir = Path(summary["final"]["generator"])
    disc = load_pretrained(disc_dir)  # HF ElectraForPreTraining: the energy head
    gen = load_two_tower(gen_dir)
    assert (gen_dir / "vocab.txt").is_file()
    assert json.loads((gen_dir / "config.json").read_text())["electra_toolkit"]["objective"] \
        == name
    # the exported generator is the trained one, embeddings included
    tensors = load_file(str(gen_dir / "model.safetensors"))
    assert torch.equal(tensors["embeddings.word_embeddings.weight"],
                       disc.electra.embeddings.word_embeddings.weight)
    cfg = json.loads((tmp_path / "run" / "settings.json").read_text())
    per_step = sum(objective_step_flops(
        ModelConfig(**cfg["model"]), ObjectiveConfig(**cfg["objective"]), 8, 32).values())
    assert records[-1]["flops"] == pytest.approx(3 * per_step)
    x = torch.tensor([[2, 10, 11, 12, 3]])
    assert gen.token_log_probs(x).shape == (1, 5)

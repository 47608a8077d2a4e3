"""Held-out probes: fixed corruptions, the discriminator AUC on them, and their place in a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_train import TINY, read_metrics

from electra.config import PretrainConfig, merge
from electra.data.dataset import PretrainingDataset
from electra.pretraining.heldout import CORRUPTIONS, build_fixed_corruptions, probe_discriminator
from electra.pretraining.loop import pretrain, special_ids_for


@pytest.fixture(scope="module")
def probes(data_dir: Path):
    train = PretrainingDataset(data_dir, "train")
    heldout = PretrainingDataset(data_dir, "heldout")
    return build_fixed_corruptions(heldout, train.token_counts(), special_ids_for(data_dir))


def test_fixed_corruptions_are_fixed_and_labelled(data_dir: Path, probes):
    again = build_fixed_corruptions(PretrainingDataset(data_dir, "heldout"),
                                    PretrainingDataset(data_dir, "train").token_counts(),
                                    special_ids_for(data_dir))
    special = special_ids_for(data_dir)
    original = probes["unigram"].input_ids.masked_fill(probes["unigram"].is_replaced, -1)
    for kind in CORRUPTIONS:
        p = probes[kind]
        assert torch.equal(p.input_ids, again[kind].input_ids)  # same seed, same probe
        assert p.is_replaced.any()
        assert not (p.is_replaced & ~p.scored).any()  # never [CLS]/[SEP]/padding
        assert not torch.isin(p.input_ids[p.is_replaced],
                              torch.tensor([special.cls, special.sep, special.mask,
                                            special.pad])).any()
        # The kinds differ only in the replacements, at the same positions.
        unchanged = ~(p.is_replaced | probes["unigram"].is_replaced)
        assert torch.equal(p.input_ids[unchanged], original[unchanged])


def test_probing_does_not_touch_the_global_rng(data_dir: Path):
    state = torch.get_rng_state()
    build_fixed_corruptions(PretrainingDataset(data_dir, "heldout"),
                            PretrainingDataset(data_dir, "train").token_counts(),
                            special_ids_for(data_dir))
    assert torch.equal(state, torch.get_rng_state())


class _Oracle(torch.nn.Module):
    """Knows which tokens were replaced (they differ from `reference` there)."""

    def __init__(self, reference: torch.Tensor, sign: float = 1.0):
        super().__init__()
        self.reference, self.sign = reference, sign

    def replaced_logits(self, input_ids, token_type_ids, attention_mask):
        return self.sign * (input_ids != self.reference).float()


def test_probe_auc_of_an_oracle_and_an_anti_oracle(probes):
    for kind in CORRUPTIONS:
        p = probes[kind]
        reference = p.input_ids.masked_fill(p.is_replaced, -1)
        assert probe_discriminator(_Oracle(reference), {kind: p}) == {
            f"heldout_auc_{kind}": 1.0}
        assert probe_discriminator(_Oracle(reference, -1.0), {kind: p}) == {
            f"heldout_auc_{kind}": 0.0}
    assert probe_discriminator(torch.nn.Linear(1, 1), probes) == {}  # no discriminator


def _run(data_dir: Path, out: Path, eval_every: int) -> dict:
    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg, TINY)
    cfg.train.eval_every = eval_every
    return pretrain(cfg, data_dir, out, device="cpu", show_progress=False)


def test_pretrain_logs_probes_without_changing_training(data_dir: Path, tmp_path: Path):
    _run(data_dir, tmp_path / "probed", eval_every=3)
    _run(data_dir, tmp_path / "plain", eval_every=0)
    probed = read_metrics(tmp_path / "probed", heldout=True)
    assert [r["step"] for r in probed] == [0, 3, 6, 8]  # before training, every 3, the end
    for r in probed:
        assert 0.0 <= r["heldout_auc_unigram"] <= 1.0 and 0.0 <= r["heldout_auc_uniform"] <= 1.0
        assert 0.0 <= r["heldout_gen_acc"] <= 1.0 and "heldout_disc_auc" in r
        assert -1.0 <= r["heldout_token_cosine"] <= 1.0
    assert read_metrics(tmp_path / "plain", heldout=True) == []
    # Training records and weights are identical with and without probes.
    strip = [{k: v for k, v in r.items() if k != "tokens_per_s"}
             for r in read_metrics(tmp_path / "probed")]
    assert strip == [{k: v for k, v in r.items() if k != "tokens_per_s"}
                     for r in read_metrics(tmp_path / "plain")]
    a = load_file(str(tmp_path / "probed" / "final" / "discriminator" / "model.safetensors"))
    b = load_file(str(tmp_path / "plain" / "final" / "discriminator" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "probed" / "settings.json").read_text())[
        "train"]["eval_every"] == 3


def test_token_cosine_is_one_for_collapsed_vectors_and_small_for_random(probes):
    from electra.config import ModelConfig
    from electra.model.encoder import init_weights
    from electra.model.networks import Discriminator
    from electra.pretraining.heldout import token_cosine

    vocab = int(probes["unigram"].input_ids.max()) + 1
    holder = torch.nn.Module()
    holder.discriminator = Discriminator(ModelConfig(
        vocab_size=vocab, embedding_size=32, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
    init_weights(holder, 0.02)
    healthy = token_cosine(holder, probes["unigram"])
    assert healthy is not None and -0.2 < healthy < 0.6
    with torch.no_grad():  # every token -> the same vector: the final LayerNorm's bias
        holder.discriminator.electra.layers[0].ffn_norm.weight.zero_()
        holder.discriminator.electra.layers[0].ffn_norm.bias.fill_(1.0)
    assert token_cosine(holder, probes["unigram"]) == pytest.approx(1.0)
    assert token_cosine(torch.nn.Linear(1, 1), probes["unigram"]) is None


def test_eval_every_flag(data_dir: Path, tmp_path: Path):
    from test_train import pretrain_argv, tiny_config_file

    from electra.cli import main

    config = tiny_config_file(tmp_path)
    main(pretrain_argv(config, data_dir, tmp_path / "off", "--eval-every", "0"))
    main(pretrain_argv(config, data_dir, tmp_path / "on", "--eval-every", "4"))
    assert read_metrics(tmp_path / "off", heldout=True) == []
    assert [r["step"] for r in read_metrics(tmp_path / "on", heldout=True)] == [0, 4, 8]

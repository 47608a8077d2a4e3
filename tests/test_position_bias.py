"""ALiBi as an encoder option (Press et al. 2022), made symmetric for a bidirectional encoder."""

from __future__ import annotations

import json

import pytest
import torch

from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.model.encoder import Encoder, alibi_bias, alibi_slopes, init_weights
from electra.model.hf import load_pretrained, save_pretrained
from electra.model.networks import Discriminator

CFG = dict(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=2,
           num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)


def test_alibi_slopes_follow_the_paper_section_3():
    # 8 heads: 1/2, 1/4, ..., 1/256; 16 heads interleave a second sequence.
    assert alibi_slopes(8).tolist() == [2.0 ** -(i + 1) for i in range(8)]
    assert alibi_slopes(2).tolist() == [2.0 ** -4, 2.0 ** -8]
    twelve = alibi_slopes(12)
    assert twelve[:8].tolist() == alibi_slopes(8).tolist() and len(twelve) == 12


def test_alibi_bias_is_symmetric_distance_times_slope():
    bias = alibi_bias(2, 5, torch.float32, torch.device("cpu"))
    assert bias.shape == (1, 2, 5, 5)
    assert torch.equal(bias, bias.transpose(-1, -2))
    assert bias[0, 0, 1, 4].item() == -3 * 2.0 ** -4 and bias[0, 1, 2, 2].item() == 0.0


def test_alibi_changes_attention_and_keeps_padding_masked():
    torch.manual_seed(0)
    plain = Encoder(ModelConfig(**CFG)).eval()
    init_weights(plain, 0.2)
    alibi = Encoder(ModelConfig(**CFG, position_bias="alibi")).eval()
    alibi.load_state_dict(plain.state_dict())
    ids = torch.randint(5, 50, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    assert not torch.allclose(plain(ids, attention_mask=mask), alibi(ids, attention_mask=mask))
    # Padding stays invisible: changing padded tokens leaves real positions unchanged.
    other = ids.clone()
    other[1, 7:] = 5
    out_a, out_b = alibi(ids, attention_mask=mask), alibi(other, attention_mask=mask)
    assert torch.allclose(out_a[1, :7], out_b[1, :7], atol=1e-6)


def test_alibi_export_is_remote_code_and_round_trips(tmp_path):
    model = Discriminator(ModelConfig(**CFG, position_bias="alibi"))
    save_pretrained(model, tmp_path / "m")
    raw = json.loads((tmp_path / "m" / "config.json").read_text())
    assert raw["position_embedding_type"] == "alibi" and "position_bias" not in raw
    # transformers' own ELECTRA would ignore the bias: the directory names its own classes.
    assert raw["model_type"] == "electra-toolkit"
    assert raw["auto_map"]["AutoModelForPreTraining"].endswith("ElectraToolkitForPreTraining")
    assert (tmp_path / "m" / "modeling_electra_toolkit.py").is_file()
    loaded = load_pretrained(tmp_path / "m")
    assert loaded.config.position_bias == "alibi"


def test_unknown_position_bias_is_refused():
    with pytest.raises(ElectraError, match="position_bias"):
        ModelConfig(**CFG, position_bias="rope").validate()


def test_alibi_max_slope_rescales_the_geometric_sequence():
    """model.alibi_max_slope (ours): tiny's 2 heads get 1 and 1/16 instead of 1/16 and 1/256."""
    assert alibi_slopes(2, max_slope=1.0).tolist() == [1.0, 2.0 ** -4]
    assert alibi_slopes(1, max_slope=1.0).tolist() == [1.0]
    bias = alibi_bias(2, 3, torch.float32, torch.device("cpu"), max_slope=1.0)
    assert bias[0, 0, 0].tolist() == [0.0, -1.0, -2.0]


def test_alibi_max_slope_needs_alibi_and_round_trips_through_export(tmp_path):
    with pytest.raises(ElectraError, match="alibi_max_slope"):
        ModelConfig(**CFG, alibi_max_slope=1.0).validate()
    model = Discriminator(ModelConfig(**CFG, position_bias="alibi", alibi_max_slope=0.5))
    save_pretrained(model, tmp_path / "m")
    assert load_pretrained(tmp_path / "m").config.alibi_max_slope == 0.5

"""The architecture records (`electra.architectures`): each names pieces that exist and agree
with what its encoder builds, the lists derived from ModelConfig's field metadata are the ones
the checkpoint and export code had written out, and no code outside the registry asks for an
architecture by name."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from electra import architectures, flops
from electra.architectures import ARCHITECTURES, Architecture, register_architecture
from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.model.hf import _NOT_ELECTRACONFIG_FIELDS
from electra.model.networks import build_encoder, make_layer
from electra.pretraining.init_from import ARCHITECTURE_FIELDS

SRC = Path(__file__).resolve().parents[1] / "src" / "electra"
SIZES = {"vocab_size": 90, "embedding_size": 32, "hidden_size": 32, "num_hidden_layers": 4,
         "num_attention_heads": 2, "intermediate_size": 48, "max_position_embeddings": 64}


def test_fields_a_checkpoint_fixes_and_electraconfig_lacks_come_from_the_metadata():
    assert ARCHITECTURE_FIELDS == (
        "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
        "num_attention_heads", "intermediate_size", "max_position_embeddings",
        "type_vocab_size", "layer_norm_eps", "position_bias", "alibi_max_slope", "architecture",
        "global_attn_every_n_layers", "local_attention", "global_rope_theta",
        "local_rope_theta")
    assert _NOT_ELECTRACONFIG_FIELDS == (
        "position_bias", "architecture", "global_attn_every_n_layers", "local_attention",
        "global_rope_theta", "local_rope_theta")


@pytest.mark.parametrize("name", ["bert", "modern"])
def test_a_records_pieces_are_what_its_encoder_builds(name):
    arch = ARCHITECTURES[name]
    for field in dataclasses.fields(Architecture):
        if isinstance(getattr(arch, field.name), str) and ":" in getattr(arch, field.name):
            assert arch.load(field.name) is not None
    cfg = ModelConfig(architecture=name, **SIZES)
    cfg.validate()
    torch.manual_seed(0)
    encoder = build_encoder(cfg)
    assert isinstance(encoder, arch.load("encoder"))
    assert isinstance(encoder.embeddings, arch.load("embeddings"))
    assert all(isinstance(layer, arch.load("layer")) for layer in encoder.layers)
    assert isinstance(make_layer(cfg, 1), arch.load("layer"))
    assert hasattr(encoder, "final_norm") == arch.final_norm
    assert flops.encoder_params(cfg) == sum(p.numel() for p in encoder.parameters())
    has_bias = [n for n, _ in encoder.named_parameters() if n.endswith(".bias")]
    assert bool(has_bias) == arch.biases


def test_an_unknown_architecture_is_one_error():
    with pytest.raises(ElectraError, match="model.architecture must be one of bert, modern, "
                                           "got 'gpt'"):
        ModelConfig(architecture="gpt").validate()


def test_registering_takes_a_new_name_once(monkeypatch):
    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(ARCHITECTURES))
    toy = dataclasses.replace(ARCHITECTURES["bert"], name="toy", transformers=None)
    assert register_architecture(toy) is toy
    assert register_architecture(toy) is toy  # the same record again: nothing changes
    ModelConfig(architecture="toy", **SIZES).validate()
    with pytest.raises(ElectraError, match="'toy' is already registered"):
        register_architecture(dataclasses.replace(toy, final_norm=True))
    with pytest.raises(ElectraError, match="'toy' architecture's record has no 'transformers'"):
        toy.load("transformers")


def test_no_code_outside_the_registry_asks_for_an_architecture_by_name():
    asking = re.compile(r"is_modern|[=!]=\s*[\"']modern[\"']|\.architecture\s*[=!]=|"
                        r"\.architecture\s+(not\s+)?in\b")
    found = [f"{path.relative_to(SRC)}:{i}: {line.strip()}"
             for path in sorted(SRC.rglob("*.py")) if path.name != "architectures.py"
             for i, line in enumerate(path.read_text().splitlines(), 1) if asking.search(line)]
    assert not found, "\n".join(found)

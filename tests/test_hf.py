"""Hugging Face interoperability, both ways, with local files only (no hub).

Our exports load in `transformers` with no missing, unexpected or mismatched keys and compute
the same logits; models built and saved by `transformers` load into ours and compute the same
outputs. Batches have padding and two segments, so masks and token types are exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers")

from electra.cli import main  # noqa: E402
from electra.config import ModelConfig, ObjectiveConfig  # noqa: E402
from electra.errors import ElectraError  # noqa: E402
from electra.model.hf import load_encoder, load_pretrained, save_pretrained  # noqa: E402
from electra.model.networks import Discriminator, Generator  # noqa: E402
from electra.objectives import build_objective  # noqa: E402
from electra.tokenizer import load_tokenizer  # noqa: E402

TOL = 1e-4
TINY = {
    "preset": "tiny",
    # embedding_size != hidden_size for the discriminator; the generator (x0.5) has
    # hidden_size == embedding_size, so both layouts are exported.
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"generator_multiplier": 0.5},
    "train": {"steps": 3, "batch_size": 8, "warmup_steps": 1, "log_every": 1,
              "save_every": 3, "seed": 5},
}
HEADS = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}


def make_batch(vocab_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Three rows of 20 tokens: two segments each, and two rows with padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (3, 20), generator=g)
    types = torch.zeros_like(ids)
    mask = torch.ones_like(ids)
    for row, (sep, length) in enumerate([(9, 20), (6, 14), (3, 8)]):
        ids[row, 0] = 2
        ids[row, sep] = 3
        ids[row, length - 1] = 3
        types[row, sep + 1: length] = 1
        ids[row, length:] = 0
        mask[row, length:] = 0
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def hf_logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def our_logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])


def perturb_(model: torch.nn.Module, seed: int) -> None:
    """Random values in every parameter (HF initialises biases and LayerNorm to 0/1, which
    would hide a mix-up between them)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("hf_run")
    config = root / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = root / "out"
    argv = ["pretrain", "--config", str(config), "--data", str(data_dir), "--out", str(out),
            "--quiet"]
    assert main(argv) == 0
    return out / "final"


@pytest.mark.parametrize("name", list(HEADS))
def test_export_loads_in_transformers_with_same_logits(name, exported):
    hf_cls = getattr(transformers, HEADS[name])
    hf_model, info = hf_cls.from_pretrained(exported / name, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"] and not info["error_msgs"]
    hf_model.eval()
    ours = load_pretrained(exported / name).eval()
    assert type(ours) is (Discriminator if name == "discriminator" else Generator)
    batch = make_batch(ours.config.vocab_size)
    theirs, mine = hf_logits(hf_model, batch), our_logits(ours, batch)
    assert theirs.shape == mine.shape
    assert (theirs - mine).abs().max().item() < TOL
    if name == "generator":  # the LM head is the (tied) word embedding matrix
        assert hf_model.generator_lm_head.weight.data_ptr() == \
            hf_model.electra.embeddings.word_embeddings.weight.data_ptr()


@pytest.mark.parametrize("name", list(HEADS))
def test_exported_tokenizer_loads_with_auto_tokenizer(name, exported, data_dir):
    tok = transformers.AutoTokenizer.from_pretrained(exported / name)
    ours = load_tokenizer(data_dir / "tokenizer")
    first, second = "The café in Zürich was naïve.", "Kalo mizel, tasvor!"
    encoded = tok(first, second)
    expected = ours.encode(first, second)
    assert encoded["input_ids"] == expected.ids
    assert encoded["token_type_ids"] == expected.type_ids
    assert tok.mask_token == "[MASK]" and tok.pad_token_id == 0
    assert tok.convert_tokens_to_ids("[MASK]") == ours.token_to_id("[MASK]")


def test_embeddings_are_shared_and_exported_equal(exported):
    cfg = ModelConfig(vocab_size=60, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    objective = build_objective(cfg, ObjectiveConfig(generator_multiplier=0.5))
    gen, disc = objective.generator.electra, objective.discriminator.electra
    assert gen.embeddings is disc.embeddings
    assert gen.embeddings.word_embeddings.weight is disc.embeddings.word_embeddings.weight

    # The exports come from a trained run, so equality is not an accident of initialisation.
    tensors = {name: load_file(str(exported / name / "model.safetensors")) for name in HEADS}
    shared = [k for k in tensors["discriminator"] if k.startswith("electra.embeddings.")]
    assert "electra.embeddings.word_embeddings.weight" in shared
    assert "electra.embeddings.LayerNorm.weight" in shared
    for key in shared:
        assert torch.equal(tensors["discriminator"][key], tensors["generator"][key]), key
    # The discriminator projects E=16 to H=32; the generator (H=16) needs no projection.
    assert "electra.embeddings_project.weight" in tensors["discriminator"]
    assert "electra.embeddings_project.weight" not in tensors["generator"]


@pytest.mark.parametrize("embedding_size", [24, 32])
@pytest.mark.parametrize("head", ["ElectraForPreTraining", "ElectraForMaskedLM"])
def test_transformers_electra_loads_into_ours(head, embedding_size, tmp_path):
    hf_cfg = transformers.ElectraConfig(
        vocab_size=99, embedding_size=embedding_size, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=48, max_position_embeddings=40)
    torch.manual_seed(0)
    hf_model = getattr(transformers, head)(hf_cfg).eval()
    perturb_(hf_model, 1)
    hf_model.save_pretrained(tmp_path / "hf")
    ours = load_pretrained(tmp_path / "hf").eval()
    assert ours.config.embedding_size == embedding_size
    assert (ours.electra.embeddings_project is None) == (embedding_size == 32)
    batch = make_batch(99, seed=1)
    assert (hf_logits(hf_model, batch) - our_logits(ours, batch)).abs().max().item() < TOL

    # And back: our export of it loads in transformers and still agrees.
    save_pretrained(ours, tmp_path / "ours")
    again, info = type(hf_model).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    assert (hf_logits(again.eval(), batch) - hf_logits(hf_model, batch)).abs().max() < TOL


@pytest.mark.parametrize("head", ["BertModel", "BertForMaskedLM"])
def test_bert_initialises_our_encoder(head, tmp_path):
    hf_cfg = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=40)
    torch.manual_seed(0)
    hf_model = getattr(transformers, head)(hf_cfg).eval()
    perturb_(hf_model, 2)
    hf_model.save_pretrained(tmp_path / "bert")
    encoder = load_encoder(tmp_path / "bert").eval()
    assert encoder.embeddings_project is None
    bert = hf_model if head == "BertModel" else hf_model.bert
    batch = make_batch(99, seed=2)
    with torch.no_grad():
        theirs = bert(**batch).last_hidden_state  # before any pooler
        mine = encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    assert theirs.shape == mine.shape
    assert (theirs - mine).abs().max().item() < TOL


@pytest.mark.parametrize("field,value", [("position_embedding_type", "relative_key"),
                                         ("hidden_act", "relu"), ("model_type", "roberta")])
def test_unsupported_architectures_are_refused(field, value, tmp_path):
    """Loading them would silently compute something else than the checkpoint's model."""
    hf_model = transformers.BertModel(transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=40))
    hf_model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[field] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ElectraError, match=field):
        load_encoder(tmp_path)

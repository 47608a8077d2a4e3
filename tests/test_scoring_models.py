"""Model directories for the scoring tests (built here, shared with the other scoring test files
through `scoring_models`), and tests of how a scorer is picked and loaded from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.model.encoder import init_weights
from electra.model.hf import save_pretrained
from electra.model.networks import Discriminator, Generator
from electra.model.two_tower import TwoTowerGenerator, save_two_tower
from electra.scoring import detect_scorer, load_scorer
from electra.scoring.load import load_mlm, training_mask_prob
from electra.scoring.pll import ElectraTTScorer, ElectricScorer, MlmScorer

# Random weights this wide make per-token scores differ by whole nats, so the tests that compare
# scores (ordering, batching) compare distinct numbers, not near-ties.
INIT_STD = 0.2
MAX_POSITIONS = 64


def tiny_config(vocab_dir: Path, hidden: int = 32) -> ModelConfig:
    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    return ModelConfig(vocab_size=vocab_size, embedding_size=hidden, hidden_size=hidden,
                       num_hidden_layers=2, num_attention_heads=2, intermediate_size=2 * hidden,
                       max_position_embeddings=MAX_POSITIONS)


def build_scoring_models(root: Path, vocab_dir: Path) -> dict[str, Path]:
    """Exports as the training loop writes them: OUT/final/{generator,discriminator} with
    `electra_toolkit.objective`, plus OUT/config.json (for the training mask_prob)."""
    torch.manual_seed(0)
    cfg = tiny_config(vocab_dir)
    dirs: dict[str, Path] = {}
    gen = Generator(cfg)
    init_weights(gen, INIT_STD)
    dirs["mlm"] = save_pretrained(gen, root / "electra" / "final" / "generator", vocab_dir,
                                  {"objective": "electra"})
    for objective in ("electra", "electric", "electra-tt"):
        disc = Discriminator(cfg)
        init_weights(disc, INIT_STD)
        out = root / objective
        dirs[f"{objective}-disc"] = save_pretrained(disc, out / "final" / "discriminator",
                                                    vocab_dir, {"objective": objective})
        (out / "config.json").write_text(json.dumps(
            {"config": {"objective": {"name": objective, "mask_prob": 0.25}}}))
    tt = TwoTowerGenerator(cfg)
    init_weights(tt, INIT_STD)
    dirs["two-tower"] = save_two_tower(tt, root / "electra-tt" / "final" / "generator",
                                       vocab_dir, {"objective": "electra-tt"})
    return dirs


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, vocab_dir: Path) -> dict[str, Path]:
    return build_scoring_models(tmp_path_factory.mktemp("scoring"), vocab_dir)


def test_detect_scorer_from_export_metadata(models):
    assert detect_scorer(models["mlm"]) == "mlm"
    assert detect_scorer(models["electric-disc"]) == "electric"
    assert detect_scorer(models["electra-tt-disc"]) == "electra-tt"
    with pytest.raises(ElectraError, match="objective 'electra' gives no pseudo-log"):
        detect_scorer(models["electra-disc"])


def test_load_scorer_builds_the_right_kind(models):
    assert isinstance(load_scorer(models["mlm"]), MlmScorer)
    assert isinstance(load_scorer(models["electric-disc"]), ElectricScorer)
    # --scorer overrides the metadata (e.g. a discriminator exported without it).
    assert isinstance(load_scorer(models["electra-disc"], scorer="electric"), ElectricScorer)
    with pytest.raises(ElectraError, match="needs the two-tower generator: pass --generator"):
        load_scorer(models["electra-tt-disc"])
    with pytest.raises(ElectraError, match="needs an ElectraForPreTraining"):
        load_scorer(models["mlm"], scorer="electric")


def test_missing_and_broken_model_dirs(tmp_path, models):
    with pytest.raises(ElectraError, match="does not exist"):
        detect_scorer(tmp_path / "nope")
    broken = tmp_path / "broken"
    shutil.copytree(models["mlm"], broken)
    (broken / "config.json").write_text("{\n  \"a\": oops\n}")
    with pytest.raises(ElectraError, match=r"config.json: line 2: invalid JSON"):
        detect_scorer(broken)


def test_training_mask_prob_read_from_run_config(models):
    # The export sits in OUT/final/discriminator; OUT/config.json has the run's mask_prob.
    assert training_mask_prob(models["electra-tt-disc"]) == 0.25


def test_electra_tt_scorer_loads_with_generator(models):
    scorer = load_scorer(models["electra-tt-disc"], models["two-tower"])
    assert isinstance(scorer, ElectraTTScorer)
    assert scorer.mask_prob == 0.25
    assert detect_scorer(models["two-tower"]) == "two-tower"
    assert load_scorer(models["two-tower"]).name == "two-tower"


def test_bert_mlm_directory_matches_transformers(tmp_path, vocab_dir):
    """A `transformers` BertForMaskedLM directory loads as our Generator with the same logits."""
    transformers = pytest.importorskip("transformers")
    cfg = tiny_config(vocab_dir)
    hf_cfg = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=MAX_POSITIONS)
    torch.manual_seed(0)
    hf_model = transformers.BertForMaskedLM(hf_cfg).eval()
    with torch.no_grad():  # a non-zero output bias, so that loading it is tested
        hf_model.cls.predictions.bias.normal_()
    hf_model.save_pretrained(tmp_path / "bert")
    shutil.copy(vocab_dir / "vocab.txt", tmp_path / "bert" / "vocab.txt")
    ours = load_mlm(tmp_path / "bert").eval()
    ids = torch.tensor([[2, 10, 11, 12, 4, 3]])
    with torch.no_grad():
        expected = hf_model(input_ids=ids).logits
        got = ours(ids)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert detect_scorer(tmp_path / "bert") == "mlm"
    assert load_scorer(tmp_path / "bert").pll(["the cat"])[0] < 0

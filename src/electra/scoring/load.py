"""Pick and build a PLL scorer from model directories and their metadata.

An exported model's config.json names its architecture and, in `electra_toolkit`, the
objective that trained it: a masked LM (ELECTRA/BERT generator) -> n-pass MLM scoring; a
two-tower generator alone -> one pass of q; a discriminator -> the scorer its objective
class declares (`discriminator_scorer`: Electric one pass, ELECTRA-TT one pass plus its
two-tower generator).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from electra.errors import ElectraError
from electra.model.hf import (
    architecture_of,
    encoder_from_hf,
    is_discriminator,
    load_pretrained,
    read_config_json,
    read_model_dir,
)
from electra.model.networks import Discriminator, Generator
from electra.objectives import REGISTRY, objective_class
from electra.scoring.pll import (
    SCORER_NAMES,
    ElectraTTScorer,
    ElectricScorer,
    MlmScorer,
    PllScorer,
    TwoTowerScorer,
)
from electra.tokenizer import load_tokenizer

MLM_ARCHITECTURES = ("ElectraForMaskedLM", "BertForMaskedLM", "ModernBertForMaskedLM")
DEFAULT_MASK_PROB = 0.15  # Table 5.1, all sizes but Large
TWO_TOWER_MODEL_TYPE = "electra-two-tower"  # electra.model.two_tower.MODEL_TYPE


def objective_of(raw: dict) -> str | None:
    meta = raw.get("electra_toolkit")
    return meta.get("objective") if isinstance(meta, dict) else None


def discriminator_scorer(objective: str | None) -> str | None:
    """The scorer for a discriminator trained with `objective`, as its class declares."""
    if not isinstance(objective, str) or objective not in REGISTRY:
        return None
    return objective_class(objective).discriminator_scorer


def detect_scorer(model_dir: str | Path) -> str:
    """The scorer a model directory calls for, from its config.json."""
    raw = read_config_json(model_dir)
    arch = architecture_of(raw)
    if arch in MLM_ARCHITECTURES:
        return "mlm"
    if raw.get("model_type") == TWO_TOWER_MODEL_TYPE:
        return "two-tower"
    if is_discriminator(raw):
        objective = objective_of(raw)
        scorer = discriminator_scorer(objective)
        if scorer is not None:
            return scorer
        raise ElectraError(
            f"{model_dir}: a discriminator trained with objective {objective!r} gives no "
            "pseudo-log-likelihoods; score with its generator (a masked LM, e.g. "
            "OUT/final/generator) or pass --scorer electric / electra-tt")
    raise ElectraError(f"{model_dir}: architecture {arch!r} is not a masked LM "
                       f"({', '.join(MLM_ARCHITECTURES)}) or an ElectraForPreTraining "
                       "discriminator")


def training_mask_prob(model_dir: str | Path) -> float | None:
    """mask_prob of the run that wrote MODEL: config.json's `electra_toolkit`, else the run's
    OUT/config.json (exports live in OUT/final/NAME)."""
    meta = read_config_json(model_dir).get("electra_toolkit")
    if isinstance(meta, dict) and isinstance(meta.get("mask_prob"), (int, float)):
        return float(meta["mask_prob"])
    run_config = Path(model_dir).resolve().parent.parent / "config.json"
    try:
        value = json.loads(run_config.read_text())["config"]["objective"]["mask_prob"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def load_mlm(model_dir: str | Path) -> Generator:
    """A masked LM from an ElectraForMaskedLM or BertForMaskedLM directory (local files)."""
    raw = read_config_json(model_dir)
    arch = architecture_of(raw)
    if arch in ("ElectraForMaskedLM", "ModernBertForMaskedLM"):
        model = load_pretrained(model_dir)
        assert isinstance(model, Generator)
        return model
    if arch != "BertForMaskedLM":
        raise ElectraError(f"{model_dir}: architecture {arch!r} is not a masked LM")
    return _load_bert_mlm(model_dir)


def _load_bert_mlm(model_dir: str | Path) -> Generator:
    """BERT's MLM head (transform dense -> GELU -> LayerNorm -> tied decoder + bias) has the
    same shape as ELECTRA's generator head with embedding size = hidden size."""
    cfg, _, state = read_model_dir(model_dir)
    model = Generator(cfg)
    _load_strict(model.electra, encoder_from_hf(state, cfg), model_dir)
    head = "cls.predictions."
    names = {"dense.weight": "transform.dense.weight", "dense.bias": "transform.dense.bias",
             "LayerNorm.weight": "transform.LayerNorm.weight",
             "LayerNorm.bias": "transform.LayerNorm.bias"}
    missing = [head + v for v in names.values() if head + v not in state]
    bias = state.get(head + "bias", state.get(head + "decoder.bias"))
    if missing or bias is None:
        raise ElectraError(f"{model_dir}: BERT checkpoint lacks {(missing or [head + 'bias'])[0]}")
    _load_strict(model.generator_predictions, {k: state[head + v] for k, v in names.items()},
                 model_dir)
    decoder = state.get(head + "decoder.weight")
    if decoder is not None and not torch.equal(decoder, state[
            next(k for k in state if k.endswith("embeddings.word_embeddings.weight"))]):
        raise ElectraError(f"{model_dir}: the MLM decoder is not tied to the word embeddings, "
                           "which this loader requires")
    with torch.no_grad():
        model.output_bias.copy_(bias)
    return model


def _load_strict(module: torch.nn.Module, state: dict, where: str | Path) -> None:
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ElectraError(f"{where}: weights do not match the config "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


def load_two_tower_generator(generator_dir: str | Path) -> torch.nn.Module:
    try:
        from electra.model.two_tower import load_two_tower
    except ModuleNotFoundError as e:
        if e.name != "electra.model.two_tower":
            raise
        raise ElectraError("ELECTRA-TT scoring needs the two-tower generator "
                           "(electra.model.two_tower), which this version lacks") from None
    if not Path(generator_dir).is_dir():
        raise ElectraError(f"{generator_dir}: generator directory does not exist")
    return load_two_tower(generator_dir)


def load_scorer(model_dir: str | Path, generator_dir: str | Path | None = None,
                scorer: str | None = None, device: str | torch.device = "cpu",
                bf16: bool = False, mask_prob: float | None = None, positives: str = "n"
                ) -> PllScorer:
    """A ready scorer. `scorer` overrides what the metadata says; `mask_prob` (ELECTRA-TT's
    k / n) defaults to the training run's, else 0.15; `positives`: see `tt_noise_ratio`."""
    name = scorer or detect_scorer(model_dir)
    if name not in SCORER_NAMES:
        raise ElectraError(f"unknown scorer {name!r}; choose one of {', '.join(SCORER_NAMES)}")
    tokenizer = load_tokenizer(model_dir)
    if name == "mlm":
        model = load_mlm(model_dir)
        return MlmScorer(model, tokenizer, model.config.max_position_embeddings, device, bf16)
    if name == "two-tower":
        gen = load_two_tower_generator(model_dir)
        return TwoTowerScorer(gen, tokenizer, gen.config.max_position_embeddings, device, bf16)
    disc = load_pretrained(model_dir)
    if not isinstance(disc, Discriminator):
        raise ElectraError(f"{model_dir}: scorer {name!r} needs an ElectraForPreTraining "
                           "discriminator")
    max_len = disc.config.max_position_embeddings
    if name == "electric":
        return ElectricScorer(disc, tokenizer, max_len, device, bf16)
    if generator_dir is None:
        sibling = Path(model_dir).parent / "generator"
        raise ElectraError(f"{model_dir}: ELECTRA-TT scoring needs the two-tower generator: "
                           f"pass --generator DIR (e.g. {sibling})")
    generator = load_two_tower_generator(generator_dir)
    if mask_prob is None:
        mask_prob = training_mask_prob(model_dir) or DEFAULT_MASK_PROB
    return ElectraTTScorer(disc, generator, tokenizer, max_len, mask_prob, device, bf16,
                           positives)

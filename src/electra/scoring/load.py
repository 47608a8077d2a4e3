"""Pick and build a PLL scorer from model directories and their metadata.

An exported model's config.json names its architecture and, in `electra_toolkit`, the
objective that trained it: a masked LM (ELECTRA/BERT generator) -> n-pass MLM scoring; a
two-tower generator alone -> one pass of q; a discriminator -> the scorer its objective
class declares (`discriminator_scorer`: Electric one pass, ELECTRA-TT one pass plus its
two-tower generator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from electra.errors import ElectraError
from electra.hub import resolve_model_path
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
    ElectraTTScorer,
    ElectricScorer,
    MlmScorer,
    PllScorer,
    TwoTowerScorer,
)
from electra.settings import read_run
from electra.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

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
    OUT/settings.json (exports live in OUT/final/NAME)."""
    meta = read_config_json(model_dir).get("electra_toolkit")
    if isinstance(meta, dict) and isinstance(meta.get("mask_prob"), (int, float)):
        return float(meta["mask_prob"])
    try:
        value = read_run(Path(model_dir).resolve().parent.parent)[0]["objective"]["mask_prob"]
    except (ElectraError, KeyError, TypeError):
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
                bf16: bool = False, mask_prob: float | None = None, positives: str = "n",
                revision: str | None = None) -> PllScorer:
    """A ready scorer. `scorer` overrides what the metadata says; `mask_prob` (ELECTRA-TT's
    k / n) defaults to the training run's, else 0.15; `positives`: see `tt_noise_ratio`.
    `model_dir` and `generator_dir` may be Hub ids (`electra.hub`; `revision`: the model's)."""
    model_dir = resolve_model_path(model_dir, revision)
    if generator_dir is not None:
        generator_dir = resolve_model_path(generator_dir, what="--generator")
    name = scorer or detect_scorer(model_dir)
    if name not in SCORERS:
        raise ElectraError(f"unknown scorer {name!r}; choose one of {', '.join(SCORER_NAMES)}")
    request = ScorerRequest(model_dir, name, load_tokenizer(model_dir), generator_dir,
                            device, bf16, mask_prob, positives)
    return SCORERS[name](request)


@dataclass
class ScorerRequest:
    """What `load_scorer` was asked for, as each scorer's builder reads it."""

    model_dir: str | Path
    name: str
    tokenizer: Tokenizer
    generator_dir: str | Path | None
    device: str | torch.device
    bf16: bool
    mask_prob: float | None
    positives: str

    def discriminator(self) -> Discriminator:
        disc = load_pretrained(self.model_dir)
        if not isinstance(disc, Discriminator):
            raise ElectraError(f"{self.model_dir}: scorer {self.name!r} needs an "
                               "ElectraForPreTraining discriminator")
        return disc


def mlm_scorer(r: ScorerRequest) -> PllScorer:
    model = load_mlm(r.model_dir)
    return MlmScorer(model, r.tokenizer, model.config.max_position_embeddings, r.device, r.bf16)


def electric_scorer(r: ScorerRequest) -> PllScorer:
    disc = r.discriminator()
    return ElectricScorer(disc, r.tokenizer, disc.config.max_position_embeddings, r.device,
                          r.bf16)


def electra_tt_scorer(r: ScorerRequest) -> PllScorer:
    disc = r.discriminator()
    if r.generator_dir is None:
        sibling = Path(r.model_dir).parent / "generator"
        raise ElectraError(f"{r.model_dir}: ELECTRA-TT scoring needs the two-tower generator: "
                           f"pass --generator DIR (e.g. {sibling})")
    generator = load_two_tower_generator(r.generator_dir)
    mask_prob = r.mask_prob
    if mask_prob is None:
        mask_prob = training_mask_prob(r.model_dir) or DEFAULT_MASK_PROB
    return ElectraTTScorer(disc, generator, r.tokenizer, disc.config.max_position_embeddings,
                           mask_prob, r.device, r.bf16, r.positives)


def two_tower_scorer(r: ScorerRequest) -> PllScorer:
    gen = load_two_tower_generator(r.model_dir)
    return TwoTowerScorer(gen, r.tokenizer, gen.config.max_position_embeddings, r.device,
                          r.bf16)


# The scorers by name (`--scorer`), each with its builder.
SCORERS: dict[str, Callable[[ScorerRequest], PllScorer]] = {
    "mlm": mlm_scorer,
    "electric": electric_scorer,
    "electra-tt": electra_tt_scorer,
    "two-tower": two_tower_scorer,
}
SCORER_NAMES = tuple(SCORERS)

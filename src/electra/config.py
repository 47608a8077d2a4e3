"""Typed configuration: the pre-training config, the objective registry, strict merging.

Every run writes its full configuration next to its outputs; loading a configuration with an
unknown key, a wrong type or a nonsensical value raises `ElectraError`. The encoder's shape is
`electra.model_config.ModelConfig` and the presets (Table 5.1) are `electra.presets`; both are
re-exported here for the modules that read them from `electra.config`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from electra.errors import ElectraError
from electra.model_config import POSITION_BIASES as POSITION_BIASES
from electra.model_config import ModelConfig
from electra.precision import PRECISIONS
from electra.presets import DEMO_PRESETS as DEMO_PRESETS
from electra.presets import PRESETS as PRESETS
from electra.presets import Preset as Preset
from electra.presets import get_preset

# ObjectiveConfig fields an objective leaves at None take its published values, kept here beside
# the registry (not on the classes) so that validating a config imports no objective.
# ELECTRA: of the masked positions 85% [MASK], 15% kept, no random tokens (official
# pretrain_helpers.mask); discriminator loss weight 50 (section 5.2.1).
# The discriminator's output bias starts at zero, as in the official code (a preset may give its
# objective another start: `Preset.objective_defaults`).
ELECTRA_DEFAULTS: dict[str, Any] = {"mask_token_prob": 0.85, "random_token_prob": 0.0,
                                    "disc_weight": 50.0, "disc_bias_init": "zero"}
# BERT: 80% [MASK], 10% random, 10% kept (Devlin et al. 2019, section 3.1).
BERT_DEFAULTS: dict[str, Any] = {**ELECTRA_DEFAULTS, "mask_token_prob": 0.8,
                                 "random_token_prob": 0.1}
# TEAMS: the replaced token detection weight lambda_1 = 5 (TEAMS paper, section 4.1).
TEAMS_DEFAULTS: dict[str, Any] = {**ELECTRA_DEFAULTS, "disc_weight": 5.0}


class ObjectiveSpec(NamedTuple):
    """A registry line: the class as "module:Class" in electra.objectives (imported only when
    used) and the values of the ObjectiveConfig fields it leaves at None."""

    target: str
    defaults: dict[str, Any]


# The objective registry. The class declares the rest (metrics, generator, scorer, FLOPs; see
# electra.objectives.base), so a new objective is one module and one line here.
OBJECTIVES: dict[str, ObjectiveSpec] = {
    "electra": ObjectiveSpec("electra:ElectraObjective", ELECTRA_DEFAULTS),
    "electra-15": ObjectiveSpec("electra:Electra15Objective", ELECTRA_DEFAULTS),
    "mlm": ObjectiveSpec("mlm:MlmObjective", BERT_DEFAULTS),
    "replace-mlm": ObjectiveSpec("replace_mlm:ReplaceMlmObjective", ELECTRA_DEFAULTS),
    "all-tokens-mlm": ObjectiveSpec("replace_mlm:AllTokensMlmObjective", ELECTRA_DEFAULTS),
    "electric": ObjectiveSpec("electric:ElectricObjective", ELECTRA_DEFAULTS),
    "electra-tt": ObjectiveSpec("electric:ElectraTwoTowerObjective", ELECTRA_DEFAULTS),
    "teams": ObjectiveSpec("teams:TeamsObjective", TEAMS_DEFAULTS),
}
OBJECTIVE_NAMES = tuple(OBJECTIVES)


class GeneratorSpec(NamedTuple):
    """A generator line (section 5.3.2). `sampler`: a network-free sampler's token weights, as
    "module:function" in electra.objectives (imported only when used); None for the MLM
    network, which trains beside the model and shares weights with it (`WEIGHT_SHARING`)."""

    sampler: str | None = None

    @property
    def network(self) -> bool:
        return self.sampler is None


class SharingSpec(NamedTuple):
    """A weight-sharing line (section 5.3.1): "module:function" in electra.objectives that
    builds the MLM generator for the network it trains; `whole_encoder`: the generator's
    encoder is that network's, so the two must be the same size."""

    target: str
    whole_encoder: bool = False
    ties_embeddings: bool = True  # one token embedding matrix for both networks


# Where the ELECTRA family's replacements come from: an MLM generator, corpus token frequencies
# ("unigram", section 5.3.2) or uniform over the vocabulary (the official uniform_generator).
GENERATORS: dict[str, GeneratorSpec] = {
    "mlm": GeneratorSpec(),
    "unigram": GeneratorSpec("generators:unigram_weights"),
    "uniform": GeneratorSpec("generators:uniform_weights"),
}
# What the MLM generator shares with the network it trains: the embedding module, nothing, the
# whole encoder, or DeBERTa-V3's gradient-disentangled embedding sharing.
WEIGHT_SHARING: dict[str, SharingSpec] = {
    "embeddings": SharingSpec("generators:share_embeddings"),
    "none": SharingSpec("generators:share_nothing", ties_embeddings=False),
    "all": SharingSpec("generators:share_encoder", whole_encoder=True),
    "gdes": SharingSpec("generators:share_gdes"),
}
# The ELECTRA objective's training algorithms (sections 5.3.3-5.3.5), as "module:Class" in
# electra.objectives: joint (the default), two-stage (5.3.3), adversarial (5.3.4).
TRAINING_ALGORITHMS: dict[str, str] = {
    "joint": "algorithms:Joint",
    "two-stage": "algorithms:TwoStage",
    "adversarial": "algorithms:Adversarial",
}
GENERATOR_KINDS = tuple(GENERATORS)
SHARING_MODES = tuple(WEIGHT_SHARING)
ALGORITHMS = tuple(TRAINING_ALGORITHMS)
DISC_BIAS_INITS = ("zero", "base-rate")


@dataclass
class ObjectiveConfig:
    """The pre-training objective and its generator. Fields left at None take the objective's
    published default when the config is validated (its `OBJECTIVES` line), so the
    `config.json` written next to a run always holds the values actually used."""

    name: str = "electra"
    mask_prob: float = 0.15
    # Of the masked positions, the share that becomes [MASK] and the share that becomes a random
    # token (the rest keep the original): ELECTRA 85% / 0%, BERT 80% / 10%.
    mask_token_prob: float | None = None
    random_token_prob: float | None = None
    # Generator (section 5.3.2): an MLM of `generator_multiplier` times the discriminator's
    # width (and `generator_layers` deep; None = as deep as the discriminator), or a network-free
    # sampler from corpus token frequencies ("unigram") or uniform over the vocabulary.
    generator: str = "mlm"
    generator_multiplier: float = 0.25
    generator_layers: int | None = None
    temperature: float = 1.0  # samples from softmax(logits / temperature)
    disallow_correct: bool = False  # never sample the original token
    # Weight sharing between generator and discriminator (section 5.3.1; GDES: DeBERTa-V3).
    sharing: str = "embeddings"
    # Training algorithm (sections 5.3.3-5.3.5).
    algorithm: str = "joint"
    two_stage_generator_steps: int | None = None  # None: half of train.steps
    gen_weight: float = 1.0
    disc_weight: float | None = None  # ELECTRA's 50 (section 5.2.1); TEAMS' lambda_1 = 5
    # The discriminator's output bias at step 0: "zero" (the official code) or "base-rate",
    # the log-odds of mask_prob, the share of tokens replaced while the generator is still
    # untrained. Ours, for small budgets (docs/experiments/collapse.md): with a zero bias, the
    # fastest way for Adam to lower every logit to the base rate is to push every token vector
    # in one shared direction, and the token vectors collapse before context is learned.
    # None: the objective's default (zero), or the preset's for that objective (`tiny-local`
    # starts ELECTRA's at the base rate, and any other objective at zero).
    disc_bias_init: str | None = None
    # TEAMS (TEAMS paper, section 3 and 4.1): K non-original candidates, the multi-word
    # selection loss weight lambda_2, and how many bottom layers the generator shares with the
    # discriminator (None: half of them).
    teams_candidates: int = 5
    mws_weight: float = 2.0
    teams_shared_layers: int | None = None

    @property
    def takes_disc_bias_init(self) -> bool:
        """Whether a discriminator bias other than zero applies: ELECTRA's, which scores every
        token (docs/experiments/collapse.md)."""
        return self.name == "electra"

    def resolve_defaults(self, preset: dict[str, Any] | None = None) -> None:
        """Fill fields left at None (in place) with `preset`'s values for this objective, else
        the objective's own defaults."""
        if self.name not in OBJECTIVES:
            raise ElectraError(f"unknown objective {self.name!r}; choose one of "
                               f"{', '.join(OBJECTIVES)}")
        for key, value in {**OBJECTIVES[self.name].defaults, **(preset or {})}.items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        if self.disc_bias_init is None:  # an objective whose defaults do not name it
            self.disc_bias_init = "zero"

    def validate(self) -> None:
        for name, allowed in (("name", tuple(OBJECTIVES)), ("generator", GENERATOR_KINDS),
                              ("sharing", SHARING_MODES), ("algorithm", ALGORITHMS),
                              ("disc_bias_init", (*DISC_BIAS_INITS, None))):
            if getattr(self, name) not in allowed:
                raise ElectraError(f"unknown objective.{name} {getattr(self, name)!r}; choose "
                                   f"one of: {', '.join(a for a in allowed if a)}")
        self.resolve_defaults()
        if not 0.0 < self.mask_prob < 1.0:
            raise ElectraError(f"objective.mask_prob must be in (0, 1), got {self.mask_prob}")
        for name in ("mask_token_prob", "random_token_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ElectraError(f"objective.{name} must be in [0, 1], got "
                                   f"{getattr(self, name)}")
        if self.mask_token_prob + self.random_token_prob > 1.0:
            raise ElectraError("objective.mask_token_prob + objective.random_token_prob must be "
                               "at most 1")
        if not 0.0 < self.generator_multiplier <= 1.0:
            raise ElectraError(
                f"objective.generator_multiplier must be in (0, 1], got "
                f"{self.generator_multiplier}")
        if self.generator_layers is not None and self.generator_layers < 1:
            raise ElectraError(
                f"objective.generator_layers must be positive, got {self.generator_layers}")
        if self.temperature <= 0:
            raise ElectraError(f"objective.temperature must be positive, got {self.temperature}")
        if self.teams_candidates < 1:
            raise ElectraError(
                f"objective.teams_candidates must be positive, got {self.teams_candidates}")
        for name in ("gen_weight", "disc_weight", "mws_weight"):
            if getattr(self, name) < 0:
                raise ElectraError(f"objective.{name} must be >= 0, got {getattr(self, name)}")
        if self.disc_bias_init != "zero" and not self.takes_disc_bias_init:
            raise ElectraError(f"objective.disc_bias_init={self.disc_bias_init!r} is for the "
                               f"electra objective, which scores every token (got "
                               f"objective.name={self.name!r}; leave "
                               f"objective.disc_bias_init unset or zero)")


@dataclass
class TrainConfig:
    steps: int = 2000
    # A budget instead of `steps` (electra.pretraining.budget): wall-clock seconds for the whole
    # run (set-up to export), or training FLOPs as `electra flops` counts them. The steps it
    # buys are planned by the run and recorded in its config.json.
    budget_seconds: float | None = None
    budget_flops: float | None = None
    # With a budget: checkpoints at this many evenly spaced points of the run (its last step
    # included) instead of every `save_every` steps, so they fall at the same fractions of any
    # budget.
    checkpoints_per_run: int = 10
    batch_size: int = 32
    grad_accum: int = 1
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0
    seed: int = 1
    # auto, fp32, bf16 or fp16 (electra.precision): auto takes what the hardware computes
    # fastest; the run's config.json records the precision it resolved to.
    precision: str = "auto"
    # A step whose loss or gradient norm is not finite: False stops the run with an error
    # (nothing applied, no checkpoint from it); True skips its update (the schedule advances)
    # and counts it as `skipped_nonfinite` in the metrics.
    skip_nonfinite: bool = False
    # torch.compile every Transformer layer (opt-in: compiling takes minutes, needs a C++
    # compiler on CPU, and was not yet measured on a GPU; see docs/speed.md).
    compile: bool = False
    # The whole step (every micro-batch's forward and backward, clipping, AdamW) as one
    # compiled graph, replayed as a CUDA graph on CUDA (electra.pretraining.step); one process only.
    compile_step: bool = False
    log_every: int = 10
    save_every: int = 500
    # Held-out probes (electra.pretraining.heldout) every `eval_every` steps and before the first:
    # None = at 4 evenly spaced points of the run, 0 = never. Needs a "heldout" split.
    eval_every: int | None = None
    eval_examples: int = 256
    keep_checkpoints: int = 2
    # Also keep every checkpoint whose step is a multiple of this (0: none), beside the
    # `keep_checkpoints` newest: the points of a learning curve (docs/pretraining.md).
    keep_every: int = 0
    num_workers: int = 0

    def validate(self) -> None:
        for name in ("steps", "batch_size", "grad_accum", "log_every", "save_every",
                     "keep_checkpoints", "checkpoints_per_run"):
            if getattr(self, name) < 1:
                raise ElectraError(f"train.{name} must be positive, got {getattr(self, name)}")
        if self.batch_size % self.grad_accum:
            raise ElectraError(f"train.batch_size ({self.batch_size}) must be divisible by "
                               f"train.grad_accum ({self.grad_accum})")
        if self.learning_rate <= 0:
            raise ElectraError(f"train.learning_rate must be positive, got {self.learning_rate}")
        if self.warmup_steps < 0:
            raise ElectraError(f"train.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.weight_decay < 0 or self.max_grad_norm <= 0 or self.adam_eps <= 0:
            raise ElectraError("train.weight_decay must be >= 0 and max_grad_norm, adam_eps > 0")
        if self.precision not in PRECISIONS:
            raise ElectraError(f"train.precision must be one of {', '.join(PRECISIONS)}, got "
                               f"{self.precision!r}")
        if self.budget_seconds is not None and self.budget_flops is not None:
            raise ElectraError("train.budget_seconds and train.budget_flops: give one budget")
        for name in ("budget_seconds", "budget_flops"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ElectraError(f"train.{name} must be a positive number, got {value}")
        if self.keep_every < 0:
            raise ElectraError(f"train.keep_every must be >= 0 (0: keep none beyond "
                               f"keep_checkpoints), got {self.keep_every}")
        if self.num_workers < 0:
            raise ElectraError(f"train.num_workers must be >= 0, got {self.num_workers}")
        if (self.eval_every is not None and self.eval_every < 0) or self.eval_examples < 1:
            raise ElectraError("train.eval_every must be >= 0 (0: no held-out probes) and "
                               "train.eval_examples positive")

    @property
    def budgeted(self) -> bool:
        return self.budget_seconds is not None or self.budget_flops is not None


@dataclass
class PretrainConfig:
    preset: str = "tiny"
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self) -> None:
        self.model.validate()
        preset = PRESETS.get(self.preset)
        if self.objective.name in OBJECTIVES and preset is not None:
            # the preset's settings for the objective being trained, and only for it
            self.objective.resolve_defaults(preset.objective_defaults.get(self.objective.name))
        self.objective.validate()
        self.train.validate()
        self.model.scaled(self.objective.generator_multiplier)  # raises if not whole
        if (self.objective.generator_layers or 0) > self.model.num_hidden_layers:
            raise ElectraError(
                f"objective.generator_layers ({self.objective.generator_layers}) exceeds the "
                f"discriminator's depth ({self.model.num_hidden_layers})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_preset(cls, name: str) -> PretrainConfig:
        p = get_preset(name)
        return cls(
            preset=name,
            model=p.model,
            objective=ObjectiveConfig(mask_prob=p.mask_prob,
                                      generator_multiplier=p.generator_multiplier,
                                      generator_layers=p.generator_layers),
            train=TrainConfig(steps=p.electra_steps, batch_size=p.batch_size,
                              learning_rate=p.learning_rate, warmup_steps=p.warmup_steps),
        )


def with_precision(values: dict[str, Any]) -> dict[str, Any]:
    """Settings written before `precision` held `bf16` (true, false, or null for the
    default): read as the precision they meant. Other values pass unchanged."""
    if "bf16" not in values or "precision" in values:
        return values
    legacy = values["bf16"]
    return {**{k: v for k, v in values.items() if k != "bf16"},
            "precision": {True: "bf16", False: "fp32", None: "auto"}.get(legacy, legacy)}


def read_config_json(path: str | Path) -> Any:
    """A settings file's JSON; a missing file or invalid JSON is an error naming the file (and
    the line)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ElectraError(f"{path}: config file not found") from None
    except json.JSONDecodeError as e:
        raise ElectraError(f"{path}: line {e.lineno}: invalid JSON ({e.msg})") from None


def _check_type(value: Any, annotation: Any, where: str) -> Any:
    """Return `value` coerced to `annotation` (int -> float allowed), or raise."""
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation in (int, float, str, bool):
        if isinstance(value, annotation) and not (annotation is int and isinstance(value, bool)):
            return value
        raise ElectraError(f"{where}: expected {annotation.__name__}, got {value!r}")
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            if arg is type(None) and value is None:
                return None
            try:
                return _check_type(value, arg, where)
            except ElectraError:
                continue
        raise ElectraError(f"{where}: unexpected value {value!r}")
    return value


def merge(cfg: Any, overrides: dict[str, Any], where: str = "config",
          name_keys: bool = True) -> None:
    """Merge a nested dict into a dataclass in place. Unknown keys are errors, with the nearest
    known ones. Messages start with `where`, followed by ".KEY" when `name_keys` (a file's
    section; a `--set SECTION.KEY=VALUE` names its key already)."""
    if not isinstance(overrides, dict):
        raise ElectraError(f"{where}: expected an object, got {type(overrides).__name__}")
    hints = typing.get_type_hints(type(cfg))
    names = {f.name for f in dataclasses.fields(cfg)}
    if "precision" in names:
        overrides = with_precision(overrides)
    for key, value in overrides.items():
        if key not in names:
            close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
            hint = (f"did you mean {' or '.join(close)}?" if close
                    else f"known: {', '.join(sorted(names))}")
            raise ElectraError(f"{where}: unknown key {key!r} ({hint})")
        at = f"{where}.{key}" if name_keys else where
        current = getattr(cfg, key)
        if dataclasses.is_dataclass(current):
            merge(current, value, where=at, name_keys=name_keys)
        else:
            setattr(cfg, key, _check_type(value, hints[key], at))

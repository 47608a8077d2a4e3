"""Typed configuration: model presets from Table 5.1 of the dissertation, strict merging.

Every run writes its full configuration next to its outputs; loading a configuration with an
unknown key, a wrong type or a nonsensical value raises `ElectraError`.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from electra.errors import ElectraError

POSITION_BIASES = ("none", "alibi")


@dataclass
class ModelConfig:
    """A BERT-architecture encoder. Field names match Hugging Face's ElectraConfig."""

    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    # Position information beyond the learned absolute embeddings: "none" (BERT/ELECTRA), or
    # "alibi" (Press et al. 2022, made symmetric for a bidirectional encoder): a fixed
    # -slope_h * |i - j| added to head h's attention scores, a locality prior from step 0.
    # Not part of Hugging Face's ELECTRA: `transformers` would ignore it (see model/hf.py).
    position_bias: str = "none"
    # With "alibi": the steepest head's slope (None: ALiBi's own, 2**(-8/heads)); the others
    # follow at ALiBi's ratio. Ours: `tiny`'s 2 heads get slopes 1/16 and 1/256, too flat to
    # make any head local; 1.0 gives 1 and 1/16 (README: the collapse study).
    alibi_max_slope: float | None = None

    def validate(self) -> None:
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                     "num_attention_heads", "intermediate_size", "max_position_embeddings",
                     "type_vocab_size"):
            if getattr(self, name) < 1:
                raise ElectraError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ElectraError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by "
                f"model.num_attention_heads ({self.num_attention_heads})")
        if self.position_bias not in POSITION_BIASES:
            raise ElectraError(f"model.position_bias must be one of {', '.join(POSITION_BIASES)}"
                               f", got {self.position_bias!r}")
        if self.alibi_max_slope is not None and (self.position_bias != "alibi"
                                                 or self.alibi_max_slope <= 0):
            raise ElectraError(f"model.alibi_max_slope ({self.alibi_max_slope}) needs "
                               f"model.position_bias='alibi' and a positive value")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ElectraError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")

    def scaled(self, multiplier: float) -> ModelConfig:
        """The generator's config: hidden and FFN sizes times `multiplier`, same depth and
        embedding size (Table 5.1, "Generator Size"). Heads keep the discriminator's head size,
        at least one head, as the official get_generator_config does (num_attention_heads =
        max(1, hidden // 64) with 64-wide heads in every preset), so any fraction that gives a
        whole hidden size works, e.g. 1/8 of `tiny` is one 16-wide head."""
        frac = Fraction(multiplier).limit_denominator(64)
        hidden = self.hidden_size * frac
        ffn = self.intermediate_size * frac
        head_size = self.hidden_size // self.num_attention_heads
        if hidden.denominator != 1 or ffn.denominator != 1 or hidden < 1:
            raise ElectraError(
                f"generator multiplier {multiplier} does not give whole sizes for this model "
                f"(hidden {self.hidden_size}, FFN {self.intermediate_size})")
        heads = max(1, int(hidden) // head_size)
        if int(hidden) % heads:
            raise ElectraError(f"generator multiplier {multiplier}: hidden size {int(hidden)} "
                               f"is not divisible into {heads} heads of {head_size}")
        return dataclasses.replace(self, hidden_size=int(hidden), intermediate_size=int(ffn),
                                   num_attention_heads=heads)


@dataclass
class Preset:
    model: ModelConfig
    generator_multiplier: float
    mask_prob: float
    learning_rate: float
    batch_size: int
    seq_len: int
    warmup_steps: int
    electra_steps: int
    bert_steps: int
    disc_bias_init: str = "zero"


# Table 5.1. `tiny` is ours, for CPUs; its generator is 1/2 the width because 1/4 of two
# attention heads is not a whole head.
PRESETS: dict[str, Preset] = {
    "tiny": Preset(ModelConfig(embedding_size=128, hidden_size=128, num_hidden_layers=4,
                               num_attention_heads=2, intermediate_size=512),
                   generator_multiplier=0.5, mask_prob=0.15, learning_rate=1e-3,
                   batch_size=32, seq_len=128, warmup_steps=100, electra_steps=2000,
                   bert_steps=2000),
    # `tiny` with two departures that let it learn context at small budgets (README: the collapse
    # study): a base-rate discriminator bias, and ALiBi with one local head (slopes 1 and 1/16).
    # Exports load in our tools; `transformers` would ignore the ALiBi bias.
    "tiny-local": Preset(ModelConfig(embedding_size=128, hidden_size=128, num_hidden_layers=4,
                                     num_attention_heads=2, intermediate_size=512,
                                     position_bias="alibi", alibi_max_slope=1.0),
                         generator_multiplier=0.5, mask_prob=0.15, learning_rate=1e-3,
                         batch_size=32, seq_len=128, warmup_steps=100, electra_steps=2000,
                         bert_steps=2000, disc_bias_init="base-rate"),
    "small": Preset(ModelConfig(embedding_size=128, hidden_size=256, num_hidden_layers=12,
                                num_attention_heads=4, intermediate_size=1024),
                    generator_multiplier=1 / 4, mask_prob=0.15, learning_rate=5e-4,
                    batch_size=128, seq_len=128, warmup_steps=10000, electra_steps=1_000_000,
                    bert_steps=1_450_000),
    "base": Preset(ModelConfig(embedding_size=768, hidden_size=768, num_hidden_layers=12,
                               num_attention_heads=12, intermediate_size=3072),
                   generator_multiplier=1 / 3, mask_prob=0.15, learning_rate=2e-4,
                   batch_size=256, seq_len=512, warmup_steps=10000, electra_steps=766_000,
                   bert_steps=1_000_000),
    "large": Preset(ModelConfig(embedding_size=1024, hidden_size=1024, num_hidden_layers=24,
                                num_attention_heads=16, intermediate_size=4096),
                    generator_multiplier=1 / 4, mask_prob=0.25, learning_rate=2e-4,
                    batch_size=2048, seq_len=512, warmup_steps=10000, electra_steps=400_000,
                    bert_steps=464_000),
}

# What `electra demo --preset` offers: `tiny-local` (the default: its discriminator learns
# context within the demo's budget) and `tiny` (plain BERT architecture, loads in transformers).
DEMO_PRESETS = ("tiny", "tiny-local")


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ElectraError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name], model=dataclasses.replace(PRESETS[name].model))


# The objective registry: name -> "module:Class" in electra.objectives, imported only when used.
# The class declares the rest (config defaults, metrics, generator, scorer, FLOPs; see
# electra.objectives.base), so a new objective is one module and one line here.
OBJECTIVES: dict[str, str] = {
    "electra": "electra:ElectraObjective",
    "electra-15": "electra:ElectraObjective",
    "mlm": "mlm:MlmObjective",
    "replace-mlm": "replace_mlm:ReplaceMlmObjective",
    "all-tokens-mlm": "replace_mlm:AllTokensMlmObjective",
    "electric": "electric:ElectricObjective",
    "electra-tt": "electric:ElectraTwoTowerObjective",
    "teams": "teams:TeamsObjective",
}
OBJECTIVE_NAMES = tuple(OBJECTIVES)
GENERATOR_KINDS = ("mlm", "unigram", "uniform")
SHARING_MODES = ("embeddings", "none", "all", "gdes")
ALGORITHMS = ("joint", "two-stage", "adversarial")
DISC_BIAS_INITS = ("zero", "base-rate")

@dataclass
class ObjectiveConfig:
    """The pre-training objective and its generator. Fields left at None take the objective's
    published default when the config is validated (its class's `config_defaults`), so the
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
    # untrained. Ours, for small budgets (README: the collapse study): with a zero bias, the
    # fastest way for Adam to lower every logit to the base rate is to push every token vector
    # in one shared direction, and the token vectors collapse before context is learned.
    disc_bias_init: str = "zero"
    # TEAMS (TEAMS paper, section 3 and 4.1): K non-original candidates, the multi-word
    # selection loss weight lambda_2, and how many bottom layers the generator shares with the
    # discriminator (None: half of them).
    teams_candidates: int = 5
    mws_weight: float = 2.0
    teams_shared_layers: int | None = None

    def resolve_defaults(self) -> None:
        """Fill fields left at None with this objective's defaults (in place)."""
        from electra.objectives import objective_class  # lazy: the objectives import this

        for key, value in objective_class(self.name).config_defaults.items():
            if getattr(self, key) is None:
                setattr(self, key, value)

    def validate(self) -> None:
        for name, allowed in (("name", tuple(OBJECTIVES)), ("generator", GENERATOR_KINDS),
                              ("sharing", SHARING_MODES), ("algorithm", ALGORITHMS),
                              ("disc_bias_init", DISC_BIAS_INITS)):
            if getattr(self, name) not in allowed:
                raise ElectraError(f"unknown objective.{name} {getattr(self, name)!r}; choose "
                                   f"one of: {', '.join(allowed)}")
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
        if self.disc_bias_init != "zero" and self.name != "electra":
            raise ElectraError(f"objective.disc_bias_init={self.disc_bias_init!r} is for the "
                               f"electra objective, which scores every token (got "
                               f"objective.name={self.name!r}; set "
                               f"objective.disc_bias_init=zero, e.g. after --preset tiny-local)")


@dataclass
class TrainConfig:
    steps: int = 2000
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
    bf16: bool = False
    # A step whose loss or gradient norm is not finite: False stops the run with an error
    # (nothing applied, no checkpoint from it); True skips its update (the schedule advances)
    # and counts it as `skipped_nonfinite` in the metrics.
    skip_nonfinite: bool = False
    # torch.compile every Transformer layer (opt-in: compiling takes minutes, needs a C++
    # compiler on CPU, and was not yet measured on a GPU; see README: Speed).
    compile: bool = False
    log_every: int = 10
    save_every: int = 500
    # Held-out probes (electra.train.heldout) every `eval_every` steps and before the first:
    # None = 4 times per run, 0 = never. Needs a "heldout" split in the data.
    eval_every: int | None = None
    eval_examples: int = 256
    keep_checkpoints: int = 2
    num_workers: int = 0

    def validate(self) -> None:
        for name in ("steps", "batch_size", "grad_accum", "log_every", "save_every",
                     "keep_checkpoints"):
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
        if self.num_workers < 0:
            raise ElectraError(f"train.num_workers must be >= 0, got {self.num_workers}")
        if (self.eval_every is not None and self.eval_every < 0) or self.eval_examples < 1:
            raise ElectraError("train.eval_every must be >= 0 (0: no held-out probes) and "
                               "train.eval_examples positive")

    def resolved_eval_every(self) -> int:
        """Steps between held-out probes: `eval_every`, or 4 probes per run when unset."""
        if self.eval_every is None:
            return max(1, self.steps // 4)
        return self.eval_every


@dataclass
class PretrainConfig:
    preset: str = "tiny"
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self) -> None:
        self.model.validate()
        self.objective.validate()
        self.train.validate()
        self.model.scaled(self.objective.generator_multiplier)  # raises if not whole
        if (self.objective.generator_layers or 0) > self.model.num_hidden_layers:
            raise ElectraError(
                f"objective.generator_layers ({self.objective.generator_layers}) exceeds the "
                f"discriminator's depth ({self.model.num_hidden_layers})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_preset(cls, name: str) -> PretrainConfig:
        p = get_preset(name)
        return cls(
            preset=name,
            model=p.model,
            objective=ObjectiveConfig(mask_prob=p.mask_prob,
                                      generator_multiplier=p.generator_multiplier,
                                      disc_bias_init=p.disc_bias_init),
            train=TrainConfig(steps=p.electra_steps, batch_size=p.batch_size,
                              learning_rate=p.learning_rate, warmup_steps=p.warmup_steps),
        )

    @classmethod
    def load(cls, path: str | Path) -> PretrainConfig:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ElectraError(f"{path}: config file not found") from None
        except json.JSONDecodeError as e:
            raise ElectraError(f"{path}: line {e.lineno}: invalid JSON ({e.msg})") from None
        cfg = cls.from_preset(data.get("preset", "tiny")) if isinstance(data, dict) else cls()
        merge(cfg, data, where=str(path))
        return cfg


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


def merge(cfg: Any, overrides: dict[str, Any], where: str = "config") -> None:
    """Merge a nested dict into a dataclass in place. Unknown keys are errors."""
    if not isinstance(overrides, dict):
        raise ElectraError(f"{where}: expected an object, got {type(overrides).__name__}")
    hints = typing.get_type_hints(type(cfg))
    names = {f.name for f in dataclasses.fields(cfg)}
    for key, value in overrides.items():
        if key not in names:
            raise ElectraError(
                f"{where}: unknown key {key!r} (known: {', '.join(sorted(names))})")
        current = getattr(cfg, key)
        if dataclasses.is_dataclass(current):
            merge(current, value, where=f"{where}.{key}")
        else:
            setattr(cfg, key, _check_type(value, hints[key], f"{where}.{key}"))


def set_dotted(cfg: Any, dotted: str, raw: str) -> None:
    """Apply a `--set section.key=value` override; the value is parsed as JSON when it can be."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    *parents, last = dotted.split(".")
    nested: dict[str, Any] = {last: value}
    for parent in reversed(parents):
        nested = {parent: nested}
    merge(cfg, nested, where="--set")

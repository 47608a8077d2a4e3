"""Continued pre-training: `electra pretrain --init-from DIR` starts from existing weights.

The source is a finished run (its OUT or OUT/final: the objective's exports), one of a run's
checkpoints (OUT/checkpoints/step_N, exported as the run's end would), a Hugging Face
directory as users download them (an `ElectraForPreTraining` discriminator, with
`--init-generator` for its `ElectraForMaskedLM` generator, whose width may differ), or a single
encoder (`ElectraModel`, `BertModel`, `ElectraForMaskedLM`, `BertForMaskedLM`). Sizes,
positions and vocabulary come from the checkpoint; a preset or `--set` that contradicts them is
an error naming the field. Optimizer and schedule start fresh (domain-adaptive pre-training,
Gururangan et al. 2020, continues from step 0 with its own warm-up).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch

from electra.config import PretrainConfig
from electra.errors import ElectraError
from electra.hub import resolve_model_path, source_name, source_record
from electra.model.hf import (
    architecture_of,
    is_discriminator,
    load_encoder,
    load_pretrained,
    read_config_json,
)
from electra.model.networks import Discriminator, Generator
from electra.model_config import FIXED_BY_CHECKPOINT, ModelConfig, fields_marked
from electra.objectives import REGISTRY, objective_class
from electra.pretraining.checkpoint_export import model_dir
from electra.settings import Sources

# Model fields a checkpoint fixes (the others, dropout and the initialiser's range for fresh
# heads, are training settings a run may change): ModelConfig marks them.
ARCHITECTURE_FIELDS = fields_marked(FIXED_BY_CHECKPOINT)
WITH_HEAD = {"ElectraForPreTraining": "discriminator", "ElectraForMaskedLM": "generator",
             "BertForMaskedLM": "generator", "ModernBertForMaskedLM": "generator"}
BARE_ENCODERS = ("ElectraModel", "BertModel", "ModernBertModel")
TOKENIZER_MARKERS = ("tokenizer.json", "vocab.txt")


@dataclass
class InitSource:
    """The directories a run starts from and what they hold."""

    main: Path  # the network the objective trains and exports (discriminator or MLM)
    main_config: ModelConfig
    main_head: str | None  # "discriminator", "generator" or None (a bare encoder)
    generator: Path | None = None  # ELECTRA: the generator to continue, if any
    generator_config: ModelConfig | None = None
    train_flops: float | None = None  # the checkpoint's own training FLOPs, where recorded
    # What the user should know about how the run starts, printed once every check has passed
    # (an error stays the only line on stderr).
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """What the run's config.json records of its starting point."""
        return {**source_record(self.main, "from"),
                **(source_record(self.generator, "generator") if self.generator
                   else {"generator": None}),
                "train_flops": self.train_flops}


def continues(objective: str) -> str | None:
    """What `--init-from` continues for `objective`: its class's `continues`."""
    return objective_class(objective).continues


def find_source(init_dir: str | Path, generator_dir: str | Path | None,
                objective: str, revision: str | None = None) -> InitSource:
    """Resolve `--init-from` (and `--init-generator`) for `objective`. Either may be a Hub id
    (`electra.hub`); `revision` picks the version of `--init-from`'s, `--init-generator`'s is
    its main."""
    kind = continues(objective)
    if kind is None:
        supported = [name for name in REGISTRY if continues(name) is not None]
        raise ElectraError(f"--init-from: objective {objective!r} cannot start from a "
                           f"checkpoint (supported: {', '.join(supported)})")
    # a Hub id: its snapshot; a checkpoint (OUT/checkpoints/step_N): its export
    root = model_dir(init_dir, revision, "--init-from")
    if not root.is_dir():
        raise ElectraError(f"--init-from {root}: not a directory")
    if (root / "final").is_dir():
        root = root / "final"  # a run's OUT (its config.json is the run's, not a model's)
    if (root / "config.json").is_file():
        main, generator = root, None
    elif (root / "discriminator" / "config.json").is_file():
        main = root / "discriminator"
        generator = root / "generator" if (root / "generator" / "config.json").is_file() else None
    elif (root / "model" / "config.json").is_file():
        main, generator = root / "model", None
    else:
        raise ElectraError(f"--init-from {root}: not a model directory (no config.json, and no "
                           "discriminator/ or model/ inside)")
    if kind != "discriminator+generator":
        generator = None  # one network (MLM), or a generator that starts fresh
    if generator_dir is not None:
        if kind != "discriminator+generator":
            raise ElectraError(f"--init-generator: objective {objective!r} "
                               + ("trains no generator" if kind == "mlm"
                                  else "starts its generator fresh"))
        generator = resolve_model_path(generator_dir, what="--init-generator")
    main_cfg, head, flops = _read(main, "--init-from")
    source = InitSource(main, main_cfg, head, train_flops=flops)
    if source.main_head == "generator" and kind != "mlm":
        source.main_head = None  # an MLM's encoder becomes the discriminator's; fresh head
        source.notes.append(f"{main} is a masked language model: its encoder starts the "
                            "discriminator, whose head is new")
    if source.main_head == "discriminator" and kind == "mlm":
        source.main_head = None
        source.notes.append(f"{main} is a discriminator: its encoder starts the MLM, whose "
                            "head is new")
    if generator is not None:
        gen_cfg, head, _ = _read(generator, "--init-generator")
        if head != "generator":
            raise ElectraError(f"--init-generator {generator}: not a masked language model "
                               "(ElectraForMaskedLM or BertForMaskedLM)")
        _check_shares(source.main_config, gen_cfg, generator)
        source.generator, source.generator_config = generator, gen_cfg
    return source


def adopt_checkpoint(cfg: PretrainConfig, source: InitSource,
                     sources: Sources | None = None) -> None:
    """Take the model's architecture (and the generator's width) from the checkpoint, in place.
    `sources`: where each setting came from (`electra.settings.resolve`); a value the user
    asked for (a preset named on the command line or in --config, --config, a flag, --set)
    that contradicts the checkpoint is an error naming the field."""
    explicit = asked_for(sources or Sources())
    ckpt = source.main_config
    for name in ARCHITECTURE_FIELDS:
        _agree(f"model.{name}", getattr(cfg.model, name), getattr(ckpt, name), explicit,
               source.main)
        setattr(cfg.model, name, getattr(ckpt, name))
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range"):
        if f"model.{name}" not in explicit:
            setattr(cfg.model, name, getattr(ckpt, name))
    if source.generator_config is None:
        if ckpt.arch.wide_generator:  # as wide, half as deep (DeBERTa-V3's; the modern presets')
            if "objective.generator_layers" not in explicit:
                cfg.objective.generator_layers = max(1, ckpt.num_hidden_layers // 2)
            if "objective.generator_multiplier" not in explicit:
                cfg.objective.generator_multiplier = 1.0
        kind = continues(cfg.objective.name)
        if kind == "discriminator":
            source.notes.append(f"--init-from {source.main}: objective {cfg.objective.name!r} "
                                "starts from the discriminator; its generator (and any head "
                                "of its own) is new")
        elif kind == "discriminator+generator" and cfg.objective.generator == "mlm":
            source.notes.append(
                f"--init-from {source.main}: no generator given; a new one is trained at "
                f"{cfg.objective.generator_multiplier:g} of the discriminator's width, "
                f"{cfg.objective.generator_layers or ckpt.num_hidden_layers} layers deep "
                "(--init-generator DIR continues a released one)")
        return
    gen = source.generator_config
    multiplier = float(Fraction(gen.hidden_size, ckpt.hidden_size))
    layers = None if gen.num_hidden_layers == ckpt.num_hidden_layers else gen.num_hidden_layers
    for key, value in (("generator_multiplier", multiplier), ("generator_layers", layers)):
        _agree(f"objective.{key}", getattr(cfg.objective, key), value, explicit,
               source.generator)
        setattr(cfg.objective, key, value)
    if cfg.objective.generator != "mlm" or cfg.objective.sharing not in ("embeddings", "none"):
        raise ElectraError(f"--init-generator needs objective.generator=mlm and "
                           f"objective.sharing embeddings or none (got "
                           f"{cfg.objective.generator!r}, {cfg.objective.sharing!r})")
    ours = cfg.model.scaled(multiplier)
    for name in ("num_attention_heads", "intermediate_size"):
        if getattr(ours, name) != getattr(gen, name):
            raise ElectraError(f"--init-generator {source.generator}: its {name} is "
                               f"{getattr(gen, name)}, but a generator of {multiplier:g} of "
                               f"the discriminator's width has {getattr(ours, name)}")


def check_vocabulary(source: InitSource, data_dir: Path, data_checksum: str,
                     data_vocab_size: int) -> None:
    """The prepared data must use the checkpoint's vocabulary: same checksum where the
    checkpoint carries its tokenizer files, same size at least where it does not."""
    from electra.tokenizer import vocab_checksum

    if any((source.main / name).is_file() for name in TOKENIZER_MARKERS):
        ours = vocab_checksum(source.main)
        if ours != data_checksum:
            raise ElectraError(
                f"{data_dir}: prepared with another vocabulary (checksum {data_checksum[:12]}) "
                f"than the checkpoint {source.main} ({ours[:12]}); prepare the text with "
                f"`electra prepare --tokenizer {source_name(source.main)}`")
        return
    if data_vocab_size != source.main_config.vocab_size:
        raise ElectraError(f"{data_dir}: vocabulary of {data_vocab_size} tokens, the checkpoint "
                           f"{source.main} has {source.main_config.vocab_size}")
    source.notes.append(f"{source.main} carries no tokenizer files: only the vocabulary size "
                        "could be checked against the data")


@torch.no_grad()
def load_weights(objective: torch.nn.Module, source: InitSource) -> None:
    """Copy the checkpoint's weights into a freshly built objective (before its first step)."""
    main = getattr(objective, "discriminator", None)
    if main is None:
        main = objective.model  # the MLM objectives
    if source.main_head is not None:
        _copy(main, load_pretrained(source.main), source.main)
    else:
        _copy(main.electra, load_encoder(source.main), source.main)
    generator = getattr(objective, "generator", None)
    if source.generator is None or generator is None:
        return
    loaded = load_pretrained(source.generator)
    state = loaded.state_dict()
    shared = generator.electra.embeddings is main.electra.embeddings
    if shared:
        own = {k: v for k, v in state.items() if k.startswith("electra.embeddings.")}
        theirs = {f"electra.embeddings.{k}": v
                  for k, v in main.electra.embeddings.state_dict().items()}
        if any(not torch.equal(v, theirs[k]) for k, v in own.items()):
            print(f"note: --init-generator {source.generator}: its embeddings differ from the "
                  "discriminator's; it shares the discriminator's (objective.sharing="
                  "embeddings, section 5.3.1)", file=sys.stderr)
        state = {k: v for k, v in state.items() if k not in own}
    missing, unexpected = generator.load_state_dict(state, strict=False)
    if unexpected or any(not (shared and k.startswith("electra.embeddings.")) for k in missing):
        raise ElectraError(f"--init-generator {source.generator}: weights do not fit the "
                           f"generator (missing {missing[:3]}, unexpected {unexpected[:3]})")


# --- internals -------------------------------------------------------------------------------


def _read(directory: Path, flag: str) -> tuple[ModelConfig, str | None, float | None]:
    """(its ModelConfig, which head it carries, its recorded training FLOPs)."""
    from electra.model.hf import model_config_from_hf

    raw = read_config_json(directory)
    try:
        cfg = model_config_from_hf(raw, str(directory / "config.json"))
    except ElectraError as e:
        raise ElectraError(f"{flag} {directory}: {e}") from None
    arch = architecture_of(raw)
    flops = (raw.get("electra_toolkit") or {}).get("train_flops")
    flops = float(flops) if flops is not None else None
    if is_discriminator(raw):
        return cfg, "discriminator", flops
    if arch and arch not in (*WITH_HEAD, *BARE_ENCODERS):
        raise ElectraError(f"{flag} {directory}: architecture {arch!r} is not one pre-training "
                           f"can continue ({', '.join((*WITH_HEAD, *BARE_ENCODERS))}, or an "
                           "electra discriminator)")
    return cfg, WITH_HEAD.get(arch), flops


def _check_shares(disc: ModelConfig, gen: ModelConfig, where: Path) -> None:
    for name in ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size",
                 "position_bias"):
        if getattr(disc, name) != getattr(gen, name):
            raise ElectraError(f"--init-generator {where}: its {name} ({getattr(gen, name)}) "
                               f"differs from the discriminator's ({getattr(disc, name)}), so "
                               "the two cannot share embeddings")
    if Fraction(gen.hidden_size, disc.hidden_size) > 1:
        raise ElectraError(f"--init-generator {where}: wider ({gen.hidden_size}) than the "
                           f"discriminator ({disc.hidden_size})")


def _agree(field: str, asked: Any, ckpt: Any, explicit: dict[str, str], where: Path) -> None:
    if field in explicit and asked != ckpt:
        raise ElectraError(f"{field}: {explicit[field]} asks for {asked}, but the checkpoint "
                           f"{where} has {ckpt} (leave it unset to take the checkpoint's)")


def _copy(module: torch.nn.Module, loaded: Discriminator | Generator | torch.nn.Module,
          where: Path) -> None:
    missing, unexpected = module.load_state_dict(loaded.state_dict(), strict=False)
    if missing or unexpected:
        raise ElectraError(f"--init-from {where}: weights do not fit the model (missing "
                           f"{missing[:3]}, unexpected {unexpected[:3]})")


def asked_for(sources: Sources) -> dict[str, str]:
    """"model.FIELD" or "objective.FIELD" -> where the user asked for its value: --config, a
    flag, --set, and the architecture of a preset they named (its other values are defaults
    a checkpoint may override)."""
    asked = {key: where for key, where in sources.given().items()
             if key.startswith(("model.", "objective."))}
    for name in ARCHITECTURE_FIELDS:
        source = sources.of(f"model.{name}")
        if name != "vocab_size" and source.kind == "preset" and f"model.{name}" not in asked:
            asked[f"model.{name}"] = source.where
    return asked

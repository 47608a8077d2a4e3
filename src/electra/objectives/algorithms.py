"""How the ELECTRA objective trains its generator (dissertation sections 5.3.3-5.3.5): one class
per `electra.config.TRAINING_ALGORITHMS` line.

An algorithm is the set of hooks `ElectraObjective` calls: its checks, the sharing its generator
is built with, what it adds to the objective, its phases and its FLOPs. It holds no state: what
it adds lives on the objective itself, so checkpoints keep their names (`baseline.*`,
`stage_two`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from torch import nn

from electra import flops
from electra.config import GENERATORS, TRAINING_ALGORITHMS, ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.objectives import load_target
from electra.objectives.generators import (
    generator_config,
    generator_step_flops,
    mlm_generator_config,
    same_size,
)

if TYPE_CHECKING:
    from electra.objectives.electra import ElectraObjective


class Joint:
    """The default: the generator trains on its MLM loss together with the discriminator
    (ELECTRA paper, section 2)."""

    # Whether a step leaves a network idle, so that DDP must not wait for its gradients.
    find_unused_parameters = False

    def check(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> None:
        """Combinations that cannot work, as ElectraError naming the fields."""

    def generator_settings(self, obj_cfg: ObjectiveConfig) -> ObjectiveConfig:
        """The settings the generator is built with."""
        return obj_cfg

    def add_modules(self, objective: ElectraObjective, model_cfg: ModelConfig,
                    obj_cfg: ObjectiveConfig) -> None:
        """What it trains besides the two networks (before the weights are initialised)."""

    def add_state(self, objective: ElectraObjective) -> None:
        """Buffers and hooks it needs (after the weights are initialised)."""

    def phase(self, objective: ElectraObjective) -> str:
        return "joint"

    def on_step_start(self, objective: ElectraObjective, step: int, total_steps: int) -> None:
        pass

    def step_flops(self, disc: dict[str, float], model_cfg: ModelConfig,
                   obj_cfg: ObjectiveConfig, batch_size: int, seq_len: int
                   ) -> dict[str, float]:
        """One step's FLOPs, given the discriminator's (`disc`)."""
        return {**disc, **generator_step_flops(model_cfg, obj_cfg, batch_size, seq_len)}


def check_trains_generator(obj_cfg: ObjectiveConfig) -> None:
    if not GENERATORS[obj_cfg.generator].network:
        raise ElectraError(f"objective.algorithm={obj_cfg.algorithm!r} trains the generator, so "
                           f"it needs objective.generator='mlm' (got {obj_cfg.generator!r})")


class TwoStage(Joint):
    """Section 5.3.3: the generator trains alone for `two_stage_generator_steps` (None: half of
    the run), then the discriminator is initialised from its weights once and trains with the
    generator frozen."""

    find_unused_parameters = True

    def check(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> None:
        check_trains_generator(obj_cfg)
        if not same_size(model_cfg, obj_cfg):
            raise ElectraError(
                "objective.algorithm='two-stage' initialises the discriminator from the "
                "generator (section 5.3.3), so they must be the same size: set "
                "objective.generator_multiplier=1.0 and leave objective.generator_layers unset")
        if obj_cfg.sharing not in ("embeddings", "none"):
            raise ElectraError(f"objective.algorithm='two-stage' trains separate networks; "
                               f"objective.sharing={obj_cfg.sharing!r} is not supported")

    def generator_settings(self, obj_cfg: ObjectiveConfig) -> ObjectiveConfig:
        """Separate networks, so the frozen generator stays frozen while the discriminator
        (initialised from it, embeddings included) trains."""
        return dataclasses.replace(obj_cfg, sharing="none")

    def add_state(self, objective: ElectraObjective) -> None:
        # Set once the discriminator has been initialised from the generator; a checkpointed
        # buffer, so the phase after a resume follows from the saved state. `_in_stage_two`
        # mirrors it on the host, so that no step asks the device.
        objective.register_buffer("stage_two", torch.zeros(1))
        objective._in_stage_two = False
        objective.register_load_state_dict_post_hook(_read_stage_flag)

    def phase(self, objective: ElectraObjective) -> str:
        """"generator", then "discriminator"."""
        return "discriminator" if objective._in_stage_two else "generator"

    @staticmethod
    def switch_step(obj_cfg: ObjectiveConfig, total_steps: int) -> int:
        n = obj_cfg.two_stage_generator_steps
        return total_steps // 2 if n is None else n

    def on_step_start(self, objective: ElectraObjective, step: int, total_steps: int) -> None:
        """From the switch step on, the discriminator is initialised once from the generator's
        weights. Idempotent: after a resume the checkpointed `stage_two` flag says whether the
        copy was already made."""
        if self.phase(objective) == "discriminator":
            return
        if step >= self.switch_step(objective.cfg, total_steps):
            start_stage_two(objective)

    def step_flops(self, disc: dict[str, float], model_cfg: ModelConfig,
                   obj_cfg: ObjectiveConfig, batch_size: int, seq_len: int
                   ) -> dict[str, float]:
        """The mean step with two equal stages (the default two_stage_generator_steps = half):
        stage 1 trains the generator alone, stage 2 runs it forward only and trains the
        discriminator."""
        train = generator_step_flops(model_cfg, obj_cfg, batch_size, seq_len)
        frozen = generator_step_flops(model_cfg, obj_cfg, batch_size, seq_len, passes=1)
        out = {k: 0.5 * v for k, v in disc.items()}
        out.update({k: 0.5 * (train[k] + frozen[k]) for k in train})
        return out


class Adversarial(Joint):
    """Section 5.3.4: the generator trains by REINFORCE to fool the discriminator, with a learned
    baseline b(x_masked, t) = -log sigmoid(w^T h_q(x_masked)_t) (`ElectraObjective._reinforce`).
    """

    def check(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> None:
        check_trains_generator(obj_cfg)

    def add_modules(self, objective: ElectraObjective, model_cfg: ModelConfig,
                    obj_cfg: ObjectiveConfig) -> None:
        objective.baseline = nn.Linear(generator_config(model_cfg, obj_cfg).hidden_size, 1)

    def step_flops(self, disc: dict[str, float], model_cfg: ModelConfig,
                   obj_cfg: ObjectiveConfig, batch_size: int, seq_len: int
                   ) -> dict[str, float]:
        """Joint training's, plus the baseline's sigmoid layer at the masked positions."""
        out = super().step_flops(disc, model_cfg, obj_cfg, batch_size, seq_len)
        gen = mlm_generator_config(model_cfg, obj_cfg)
        frac = flops.output_frac_for(obj_cfg.mask_prob)
        out["generator.baseline"] = (flops.TRAIN_PASSES * batch_size * frac * seq_len
                                     * (2 * gen.hidden_size + 1 + 4))
        return out


def training_algorithm(obj_cfg: ObjectiveConfig) -> Joint:
    """`obj_cfg.algorithm`'s class (its `TRAINING_ALGORITHMS` line), ready to call."""
    return load_target(TRAINING_ALGORITHMS[obj_cfg.algorithm])()


@torch.no_grad()
def start_stage_two(objective: ElectraObjective) -> None:
    objective.discriminator.electra.load_state_dict(objective.generator.electra.state_dict())
    objective.stage_two.fill_(1.0)
    objective._in_stage_two = True


def _read_stage_flag(objective: ElectraObjective, _incompatible) -> None:
    """After a state dict is loaded: the host's copy of the two-stage flag (one read)."""
    objective._in_stage_two = bool(objective.stage_two.item())

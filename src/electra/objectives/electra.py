"""Replaced token detection (ELECTRA paper section 2; dissertation section 5.1), its variants.

A small generator MLM fills masked positions with samples; the discriminator labels every
token original or replaced. Details follow the official implementation (run_pretraining.py,
pretrain_helpers.py) and each is named in tests/test_electra_objective.py. Options:

- `electra-15` (section 5.4.3): the discriminator loss only over the masked positions;
- generator kind, size, depth, temperature, disallow_correct, sharing (generators.py);
- `algorithm`: "joint" (the default), "two-stage" (5.3.3) and "adversarial" (5.3.4).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.model.encoder import init_weights
from electra.model.networks import Discriminator
from electra.objectives.base import Objective, ObjectiveContext, ObjectiveOutput
from electra.objectives.core import (
    DISCRIMINATOR_METRICS,
    GENERATOR_METRICS,
    corrupt,
    discriminate,
    weighted_mean,
)
from electra.objectives.generators import (
    check_generator_options,
    exportable_main,
    generator_config,
    generator_or_sampler,
    generator_step_flops,
    masked_log_probs,
    mlm_generator_config,
    same_size,
)


def check_algorithm(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> None:
    if obj_cfg.algorithm == "joint":
        return
    if obj_cfg.generator != "mlm":
        raise ElectraError(f"objective.algorithm={obj_cfg.algorithm!r} trains the generator, so "
                           f"it needs objective.generator='mlm' (got {obj_cfg.generator!r})")
    if obj_cfg.algorithm == "two-stage":
        if not same_size(model_cfg, obj_cfg):
            raise ElectraError(
                "objective.algorithm='two-stage' initialises the discriminator from the "
                "generator (section 5.3.3), so they must be the same size: set "
                "objective.generator_multiplier=1.0 and leave objective.generator_layers unset")
        if obj_cfg.sharing not in ("embeddings", "none"):
            raise ElectraError(f"objective.algorithm='two-stage' trains separate networks; "
                               f"objective.sharing={obj_cfg.sharing!r} is not supported")


class ElectraObjective(Objective):
    metrics = {**GENERATOR_METRICS, **DISCRIMINATOR_METRICS}
    generator_model_config = staticmethod(mlm_generator_config)
    continues = "discriminator+generator"

    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__(obj_cfg, context)
        obj_cfg = self.cfg
        self.masked_only = obj_cfg.name == "electra-15"
        check_algorithm(model_cfg, obj_cfg)
        check_generator_options(model_cfg, obj_cfg)
        self.discriminator = Discriminator(model_cfg)
        # Two-stage: separate networks, so the frozen generator stays frozen while the
        # discriminator (initialised from it, embeddings included) trains.
        two_stage = obj_cfg.algorithm == "two-stage"
        self.generator, self.sampler = generator_or_sampler(
            self.discriminator, model_cfg, _with_sharing(obj_cfg, "none") if two_stage else obj_cfg,
            context)
        self.baseline = None
        if obj_cfg.algorithm == "adversarial":
            # b(x_masked, t) = -log sigmoid(w^T h_q(x_masked)_t) (section 5.3.4).
            self.baseline = nn.Linear(generator_config(model_cfg, obj_cfg).hidden_size, 1)
        init_weights(self, model_cfg.initializer_range)
        if obj_cfg.disc_bias_init == "base-rate":
            start_at_base_rate(self.discriminator, obj_cfg.mask_prob)
        # Each stage leaves one network idle: DDP must not wait for its gradients.
        self.find_unused_parameters = obj_cfg.algorithm == "two-stage"
        if obj_cfg.algorithm == "two-stage":
            # Set once the discriminator has been initialised from the generator; a
            # checkpointed buffer, so the phase after a resume follows from the saved state.
            # `_in_stage_two` mirrors it on the host, so that no step asks the device.
            self.register_buffer("stage_two", torch.zeros(1))
            self._in_stage_two = False
            self.register_load_state_dict_post_hook(_read_stage_flag)

    @staticmethod
    def step_flops_breakdown(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                             seq_len: int) -> dict[str, float]:
        """electra-15 computes what electra does (only the loss is restricted). Two-stage: the
        mean step with two equal stages (the default two_stage_generator_steps = half): stage 1
        trains the generator alone, stage 2 runs it forward only and trains the
        discriminator."""
        check_algorithm(model_cfg, obj_cfg)
        check_generator_options(model_cfg, obj_cfg)
        disc = flops.discriminator_breakdown("discriminator", model_cfg, batch_size, seq_len)
        if obj_cfg.algorithm != "two-stage":
            return {**disc, **generator_step_flops(model_cfg, obj_cfg, batch_size, seq_len)}
        train = generator_step_flops(model_cfg, obj_cfg, batch_size, seq_len)
        frozen = generator_step_flops(model_cfg, obj_cfg, batch_size, seq_len, passes=1)
        out = {k: 0.5 * v for k, v in disc.items()}
        out.update({k: 0.5 * (train[k] + frozen[k]) for k in train})
        return out

    # --- algorithms -----------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """"joint", or for two-stage "generator" then "discriminator"."""
        if self.cfg.algorithm != "two-stage":
            return "joint"
        return "discriminator" if self._in_stage_two else "generator"

    def two_stage_switch_step(self, total_steps: int) -> int:
        n = self.cfg.two_stage_generator_steps
        return total_steps // 2 if n is None else n

    def on_step_start(self, step: int, total_steps: int) -> None:
        """Two-stage (5.3.3): from step n on, the discriminator is initialised once from the
        generator's weights and trained with the generator frozen. Idempotent: after a resume
        the checkpointed `stage_two` flag says whether the copy was already made."""
        if self.cfg.algorithm != "two-stage" or self.phase == "discriminator":
            return
        if step >= self.two_stage_switch_step(total_steps):
            self.start_stage_two()

    @torch.no_grad()
    def start_stage_two(self) -> None:
        self.discriminator.electra.load_state_dict(self.generator.electra.state_dict())
        self.stage_two.fill_(1.0)
        self._in_stage_two = True

    def exportable(self):
        out = {"discriminator": exportable_main(self.discriminator)}
        if self.generator is not None:
            out["generator"] = self.generator
        return out

    # --- forward ----------------------------------------------------------------------------

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        cfg, phase = self.cfg, self.phase
        c = corrupt(batch, cfg, self.special, self.generator, self.sampler,
                    frozen=phase == "discriminator", with_hidden=self.baseline is not None)
        losses: dict[str, torch.Tensor] = {}
        counts = dict(c.counts)
        loss = None
        if c.gen_loss is not None:
            losses["gen_loss"] = c.gen_loss.detach()
            if phase != "discriminator" and self.baseline is None:
                loss = cfg.gen_weight * c.gen_loss
        details: dict[str, torch.Tensor] = {}
        if phase != "generator":
            # ELECTRA 15% (section 5.4.3): "the discriminator loss only comes from a random
            # 15% of the tokens"; we use the masked positions, themselves a random 15%.
            scored = c.masked if self.masked_only else batch["attention_mask"].bool()
            d = discriminate(self.discriminator(c.noised, batch["token_type_ids"],
                                                batch["attention_mask"]),
                             c.is_replaced, scored)
            losses["disc_loss"] = d.loss.detach()
            counts.update(d.counts)
            details = d.details
            disc_term = cfg.disc_weight * d.loss
            loss = disc_term if loss is None else loss + disc_term
            if self.baseline is not None:
                adv_loss, baseline_loss = self._reinforce(
                    c.gen_logits, c.gen_hidden, c.samples,
                    c.targets if cfg.disallow_correct else None,
                    d.per_token.reshape(-1).index_select(0, c.positions), c.weights)
                losses["adv_loss"] = adv_loss.detach()
                losses["baseline_loss"] = baseline_loss.detach()
                loss = loss + cfg.gen_weight * adv_loss + baseline_loss
        return ObjectiveOutput(loss=loss, losses=losses, counts=counts, details=details)

    def _reinforce(self, gen_logits, hidden, samples, disallow, disc_losses, weights):
        """Section 5.3.4. The reward of a sampled token is the discriminator's loss there:
        -log D(x_t) if the sample is the original, -log(1 - D(x_t)) if not, where D is the
        probability of "original", i.e. our per-token BCE. REINFORCE ascends
        log q(x_t) * (R - b); the baseline b = -log sigmoid(w^T h_q) is fit with cross-entropy
        to the reward, i.e. sigmoid(w^T h_q) to exp(-R), the probability the discriminator
        gave the right label. h_q is detached: the baseline trains w only. Both losses are
        means over the masked slots (`weights`)."""
        reward = disc_losses.detach()
        log_q = masked_log_probs(gen_logits, self.cfg.temperature, disallow)
        log_q_sample = log_q.gather(-1, samples.unsqueeze(-1)).squeeze(-1)
        baseline_logit = self.baseline(hidden.detach()).squeeze(-1).float()
        baseline = -F.logsigmoid(baseline_logit)
        adv_loss = -weighted_mean(log_q_sample * (reward - baseline.detach()), weights)
        baseline_loss = weighted_mean(F.binary_cross_entropy_with_logits(
            baseline_logit, torch.exp(-reward), reduction="none"), weights)
        return adv_loss, baseline_loss


def _read_stage_flag(objective: ElectraObjective, _incompatible) -> None:
    """After a state dict is loaded: the host's copy of the two-stage flag (one read)."""
    objective._in_stage_two = bool(objective.stage_two.item())


@torch.no_grad()
def start_at_base_rate(discriminator: Discriminator, replaced_share: float) -> None:
    """Output bias = log-odds of the share of replaced tokens, so the untrained discriminator
    already predicts the base rate (objective.disc_bias_init="base-rate"; ours, not the
    paper's)."""
    discriminator.discriminator_predictions.dense_prediction.bias.fill_(
        math.log(replaced_share / (1.0 - replaced_share)))


def _with_sharing(obj_cfg: ObjectiveConfig, sharing: str) -> ObjectiveConfig:
    return dataclasses.replace(obj_cfg, sharing=sharing)

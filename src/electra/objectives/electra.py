"""Replaced token detection (ELECTRA paper section 2; dissertation section 5.1), its variants.

A small generator MLM fills masked positions with samples; the discriminator labels every
token original or replaced. Details follow the official implementation (run_pretraining.py,
pretrain_helpers.py) and each is named in tests/test_electra_objective.py. Options:

- `electra-15` (section 5.4.3, `Electra15Objective`): the discriminator loss only over the
  masked positions;
- generator kind, size, depth, temperature, disallow_correct, sharing (generators.py);
- `algorithm`: "joint" (the default), "two-stage" (5.3.3) and "adversarial" (5.3.4)
  (algorithms.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.model.encoder import init_weights
from electra.model.networks import Discriminator
from electra.objectives.algorithms import training_algorithm
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
    generator_or_sampler,
    masked_log_probs,
    mlm_generator_config,
)


class ElectraObjective(Objective):
    metrics = {**GENERATOR_METRICS, **DISCRIMINATOR_METRICS}
    generator_model_config = staticmethod(mlm_generator_config)
    continues = "discriminator+generator"
    # The discriminator's loss over the masked positions only (Electra15Objective), not every
    # token.
    masked_only = False

    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__(obj_cfg, context)
        obj_cfg = self.cfg
        self.algorithm = training_algorithm(obj_cfg)
        self.algorithm.check(model_cfg, obj_cfg)
        check_generator_options(model_cfg, obj_cfg)
        self.discriminator = Discriminator(model_cfg)
        self.generator, self.sampler = generator_or_sampler(
            self.discriminator, model_cfg, self.algorithm.generator_settings(obj_cfg), context)
        self.baseline = None  # the adversarial algorithm's (section 5.3.4)
        self.algorithm.add_modules(self, model_cfg, obj_cfg)
        init_weights(self, model_cfg.initializer_range)
        if obj_cfg.disc_bias_init == "base-rate":
            start_at_base_rate(self.discriminator, obj_cfg.mask_prob)
        self.find_unused_parameters = self.algorithm.find_unused_parameters
        self.algorithm.add_state(self)

    @staticmethod
    def step_flops_breakdown(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                             seq_len: int) -> dict[str, float]:
        """The discriminator and what the algorithm adds (electra-15 computes what electra
        does: only the loss is restricted)."""
        algorithm = training_algorithm(obj_cfg)
        algorithm.check(model_cfg, obj_cfg)
        check_generator_options(model_cfg, obj_cfg)
        disc = flops.discriminator_breakdown("discriminator", model_cfg, batch_size, seq_len)
        return algorithm.step_flops(disc, model_cfg, obj_cfg, batch_size, seq_len)

    # --- algorithms -----------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """"joint", or for two-stage "generator" then "discriminator"."""
        return self.algorithm.phase(self)

    def on_step_start(self, step: int, total_steps: int) -> None:
        self.algorithm.on_step_start(self, step, total_steps)

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


@torch.no_grad()
def start_at_base_rate(discriminator: Discriminator, replaced_share: float) -> None:
    """Output bias = log-odds of the share of replaced tokens, so the untrained discriminator
    already predicts the base rate (objective.disc_bias_init="base-rate"; ours, not the
    paper's)."""
    discriminator.discriminator_predictions.dense_prediction.bias.fill_(
        math.log(replaced_share / (1.0 - replaced_share)))


class Electra15Objective(ElectraObjective):
    """ELECTRA 15% (section 5.4.3): the discriminator loss only over the masked positions."""

    masked_only = True

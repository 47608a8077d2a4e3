"""Replaced token detection (ELECTRA paper section 2; dissertation section 5.1), its variants.

A small generator MLM fills masked positions with samples; the discriminator labels every
token original or replaced. Details follow the official implementation (run_pretraining.py,
pretrain_helpers.py) and each is named in tests/test_electra_objective.py. Options:

- `electra-15` (section 5.4.3): the discriminator loss only over the masked positions;
- generator kind, size, depth, temperature, disallow_correct, sharing (generators.py);
- `algorithm`: "joint" (the default), "two-stage" (5.3.3) and "adversarial" (5.3.4).
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.model.encoder import Discriminator, init_weights
from electra.objectives import resolved
from electra.objectives.base import Objective, ObjectiveContext, ObjectiveOutput
from electra.objectives.generators import (
    attach_generator,
    build_sampler,
    check_generator_options,
    exportable_main,
    generator_config,
    generator_step_flops,
    masked_log_probs,
    mlm_hidden_and_logits,
    same_size,
    sample_from_logits,
)
from electra.objectives.masking import corrupt_with_mask_token, select_positions


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
    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__()
        context = context or ObjectiveContext()
        self.cfg = obj_cfg = resolved(obj_cfg)  # defaults filled, also when built directly
        self.special = context.special
        # ELECTRA 15% (section 5.4.3): "the discriminator loss only comes from a random 15% of
        # the tokens"; we use the masked positions, themselves a random 15%.
        self.masked_only = obj_cfg.name == "electra-15"
        check_algorithm(model_cfg, obj_cfg)
        check_generator_options(model_cfg, obj_cfg)
        self.discriminator = Discriminator(model_cfg)
        self.generator = None
        self.sampler = None
        self.baseline = None
        if obj_cfg.generator == "mlm":
            two_stage = obj_cfg.algorithm == "two-stage"
            # Two-stage: separate networks, so the frozen generator stays frozen while the
            # discriminator (initialised from it, embeddings included) trains.
            cfg = obj_cfg if not two_stage else _with_sharing(obj_cfg, "none")
            self.generator = attach_generator(self.discriminator, model_cfg, cfg)
            if obj_cfg.algorithm == "adversarial":
                # b(x_masked, t) = -log sigmoid(w^T h_q(x_masked)_t) (section 5.3.4).
                self.baseline = nn.Linear(generator_config(model_cfg, obj_cfg).hidden_size, 1)
        else:
            self.sampler = build_sampler(obj_cfg.generator, model_cfg.vocab_size, self.special,
                                         context)
        init_weights(self, model_cfg.initializer_range)
        # Each stage leaves one network idle: DDP must not wait for its gradients.
        self.find_unused_parameters = obj_cfg.algorithm == "two-stage"
        if obj_cfg.algorithm == "two-stage":
            # Set once the discriminator has been initialised from the generator; a
            # checkpointed buffer, so the phase after a resume follows from the saved state.
            self.register_buffer("stage_two", torch.zeros(1))

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
        return "discriminator" if bool(self.stage_two.item()) else "generator"

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

    def exportable(self):
        out = {"discriminator": exportable_main(self.discriminator)}
        if self.generator is not None:
            out["generator"] = self.generator
        return out

    # --- forward ----------------------------------------------------------------------------

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        input_ids = batch["input_ids"]
        token_type_ids = batch["token_type_ids"]
        attention_mask = batch["attention_mask"]
        cfg, phase = self.cfg, self.phase

        masked = select_positions(input_ids, attention_mask, cfg.mask_prob, self.special)
        flat_positions = masked.view(-1).nonzero().squeeze(1)
        targets = input_ids.view(-1).index_select(0, flat_positions)
        disallow = targets if cfg.disallow_correct else None

        losses: dict[str, torch.Tensor] = {}
        counts: dict[str, torch.Tensor] = {"masked": torch.tensor(float(targets.numel()))}
        loss = None
        gen_logits = hidden = None
        if self.generator is not None:
            gen_input = corrupt_with_mask_token(input_ids, masked, cfg.mask_token_prob,
                                                self.special.mask)
            frozen = phase == "discriminator"
            with torch.no_grad() if frozen else contextlib.nullcontext():
                if self.baseline is not None:
                    hidden, gen_logits = mlm_hidden_and_logits(
                        self.generator, gen_input, token_type_ids, attention_mask, flat_positions)
                else:
                    gen_logits = self.generator(gen_input, token_type_ids, attention_mask,
                                                flat_positions)
                gen_loss = F.cross_entropy(gen_logits.float(), targets)
            losses["gen_loss"] = gen_loss.detach()
            counts["gen_correct"] = (gen_logits.detach().argmax(-1) == targets).sum().float()
            if not frozen and self.baseline is None:
                loss = cfg.gen_weight * gen_loss
            samples = sample_from_logits(gen_logits, cfg.temperature, disallow)
        else:
            samples = sample_from_logits(self.sampler.logits(targets.numel()), cfg.temperature,
                                         disallow)

        disc_input = input_ids.view(-1).index_copy(0, flat_positions, samples)
        disc_input = disc_input.view_as(input_ids)
        # A sample equal to the original token is labelled original, not replaced.
        is_replaced = disc_input != input_ids
        counts["replaced"] = is_replaced.sum().float()
        details: dict[str, torch.Tensor] = {}
        if phase != "generator":
            disc_loss, per_token, disc_counts, details = self._discriminate(
                disc_input, token_type_ids, attention_mask, masked, is_replaced)
            losses["disc_loss"] = disc_loss.detach()
            counts.update(disc_counts)
            disc_term = cfg.disc_weight * disc_loss
            loss = disc_term if loss is None else loss + disc_term
            if self.baseline is not None:
                adv_loss, baseline_loss = self._reinforce(
                    gen_logits, hidden, samples, disallow,
                    per_token.reshape(-1).index_select(0, flat_positions))
                losses["adv_loss"] = adv_loss.detach()
                losses["baseline_loss"] = baseline_loss.detach()
                loss = loss + cfg.gen_weight * adv_loss + baseline_loss
        return ObjectiveOutput(loss=loss, losses=losses, counts=counts, details=details)

    def _discriminate(self, disc_input, token_type_ids, attention_mask, masked, is_replaced):
        disc_logits = self.discriminator(disc_input, token_type_ids, attention_mask).float()
        scored = masked if self.masked_only else attention_mask.bool()
        weights = scored.float()
        per_token = F.binary_cross_entropy_with_logits(
            disc_logits, is_replaced.float(), reduction="none")
        disc_loss = (per_token * weights).sum() / weights.sum().clamp(min=1.0)
        with torch.no_grad():
            predicted = (disc_logits > 0) & scored
            counts = {
                "tokens": scored.sum().float(),
                "disc_correct": ((predicted == is_replaced) & scored).sum().float(),
                "disc_pred_pos": predicted.sum().float(),
                "disc_true_pos": (predicted & is_replaced).sum().float(),
            }
        details = {"disc_logits": disc_logits.detach(), "is_replaced": is_replaced,
                   "real": scored}
        return disc_loss, per_token, counts, details

    def _reinforce(self, gen_logits, hidden, samples, disallow, disc_losses):
        """Section 5.3.4. The reward of a sampled token is the discriminator's loss there:
        -log D(x_t) if the sample is the original, -log(1 - D(x_t)) if not, where D is the
        probability of "original", i.e. our per-token BCE. REINFORCE ascends
        log q(x_t) * (R - b); the baseline b = -log sigmoid(w^T h_q) is fit with cross-entropy
        to the reward, i.e. sigmoid(w^T h_q) to exp(-R), the probability the discriminator
        gave the right label. h_q is detached: the baseline trains w only."""
        reward = disc_losses.detach()
        log_q = masked_log_probs(gen_logits, self.cfg.temperature, disallow)
        log_q_sample = log_q.gather(-1, samples.unsqueeze(-1)).squeeze(-1)
        baseline_logit = self.baseline(hidden.detach()).squeeze(-1).float()
        baseline = -F.logsigmoid(baseline_logit)
        adv_loss = -(log_q_sample * (reward - baseline.detach())).mean()
        baseline_loss = F.binary_cross_entropy_with_logits(baseline_logit, torch.exp(-reward))
        return adv_loss, baseline_loss


def _with_sharing(obj_cfg: ObjectiveConfig, sharing: str) -> ObjectiveConfig:
    return dataclasses.replace(obj_cfg, sharing=sharing)

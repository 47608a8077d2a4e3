"""Replaced token detection (ELECTRA paper section 2; dissertation section 5.1).

A small generator MLM fills masked positions with samples; the discriminator labels every
token original or replaced. Details follow the official implementation (run_pretraining.py,
pretrain_helpers.py) and each is named in tests/test_electra_objective.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.model.encoder import Discriminator, Generator, init_weights
from electra.objectives.base import Objective, ObjectiveContext, ObjectiveOutput
from electra.objectives.masking import (
    corrupt_with_mask_token,
    gumbel_sample,
    select_positions,
)


class ElectraObjective(Objective):
    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__()
        self.cfg = obj_cfg
        self.special = (context or ObjectiveContext()).special
        self.discriminator = Discriminator(model_cfg)
        # Token, position and type embeddings and the embedding LayerNorm are one module
        # shared by both networks (section 5.3.1, "tied embeddings").
        self.generator = Generator(model_cfg.scaled(obj_cfg.generator_multiplier),
                                   embeddings=self.discriminator.electra.embeddings)
        init_weights(self, model_cfg.initializer_range)

    @staticmethod
    def step_flops_breakdown(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                             seq_len: int) -> dict[str, float]:
        return flops.step_breakdown(model_cfg, "electra", batch_size, seq_len,
                                    generator=model_cfg.scaled(obj_cfg.generator_multiplier))

    def exportable(self):
        return {"discriminator": self.discriminator, "generator": self.generator}

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        input_ids = batch["input_ids"]
        token_type_ids = batch["token_type_ids"]
        attention_mask = batch["attention_mask"]

        masked = select_positions(input_ids, attention_mask, self.cfg.mask_prob, self.special)
        gen_input = corrupt_with_mask_token(input_ids, masked, self.cfg.mask_token_prob,
                                            self.special.mask)
        flat_positions = masked.view(-1).nonzero().squeeze(1)
        targets = input_ids.view(-1).index_select(0, flat_positions)

        gen_logits = self.generator(gen_input, token_type_ids, attention_mask, flat_positions)
        gen_loss = F.cross_entropy(gen_logits.float(), targets)

        samples = gumbel_sample(gen_logits)
        disc_input = input_ids.view(-1).index_copy(0, flat_positions, samples)
        disc_input = disc_input.view_as(input_ids)
        # A sample equal to the original token is labelled original, not replaced.
        is_replaced = disc_input != input_ids

        disc_logits = self.discriminator(disc_input, token_type_ids, attention_mask).float()
        weights = attention_mask.float()
        per_token = F.binary_cross_entropy_with_logits(
            disc_logits, is_replaced.float(), reduction="none")
        disc_loss = (per_token * weights).sum() / weights.sum().clamp(min=1.0)

        loss = self.cfg.gen_weight * gen_loss + self.cfg.disc_weight * disc_loss
        with torch.no_grad():
            real = attention_mask.bool()
            predicted = (disc_logits > 0) & real
            counts = {
                "masked": torch.tensor(float(targets.numel())),
                "gen_correct": (gen_logits.argmax(-1) == targets).sum().float(),
                "tokens": real.sum().float(),
                "disc_correct": ((predicted == is_replaced) & real).sum().float(),
                "replaced": is_replaced.sum().float(),
                "disc_pred_pos": predicted.sum().float(),
                "disc_true_pos": (predicted & is_replaced).sum().float(),
            }
        return ObjectiveOutput(
            loss=loss,
            losses={"gen_loss": gen_loss.detach(), "disc_loss": disc_loss.detach()},
            counts=counts,
            details={"disc_logits": disc_logits.detach(), "is_replaced": is_replaced,
                     "real": attention_mask.bool()},
        )

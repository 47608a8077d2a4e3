"""BERT's masked language model (Devlin et al. 2019; dissertation 5.1.1), the baseline of
section 5.4: mask 15% of the tokens, of those 80% [MASK], 10% a random token, 10% unchanged,
and predict the original token at the masked positions only."""

from __future__ import annotations

import torch

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.model.encoder import init_weights
from electra.model.networks import Generator
from electra.objectives.base import (
    Objective,
    ObjectiveContext,
    ObjectiveOutput,
    Ratio,
    argmax_hits,
)
from electra.objectives.core import mlm_loss
from electra.objectives.masking import corrupt_bert_style, non_special_ids, select_slots

# The accuracy of the MLM being pre-trained (mlm, replace-mlm, all-tokens-mlm).
MLM_METRICS: dict[str, Ratio] = {"mlm_acc": ("mlm_correct", "mlm_predicted")}


def mlm_counts(logits: torch.Tensor, targets: torch.Tensor,
               weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Summable accuracy counts of the model being pre-trained ("mlm_acc") over the rows of
    weight True."""
    return {"mlm_predicted": weights.sum().float(),
            "mlm_correct": argmax_hits(logits, targets, weights)}


class MlmObjective(Objective):
    # Its config defaults, BERT's 80% [MASK] / 10% random / 10% kept, are its registry line's
    # (electra.config.BERT_DEFAULTS).
    metrics = MLM_METRICS
    continues = "mlm"
    step_budget = "bert"  # Table 5.1's BERT step counts

    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__(obj_cfg, context)
        # A full-size MLM: the encoder to fine-tune; its output matrix is the input embeddings.
        self.model = Generator(model_cfg)
        init_weights(self, model_cfg.initializer_range)
        self.register_buffer("random_ids", non_special_ids(model_cfg.vocab_size, self.special),
                             persistent=False)

    @staticmethod
    def step_flops_breakdown(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                             seq_len: int) -> dict[str, float]:
        """Embeddings and layers everywhere, the MLM head at the masked positions only."""
        return flops.mlm_model_breakdown("model", model_cfg, batch_size, seq_len,
                                         flops.output_frac_for(obj_cfg.mask_prob),
                                         head="mlm_head")

    def exportable(self):
        return {"model": self.model}

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        input_ids = batch["input_ids"]
        # Fixed [B, P] slots with weights (official masked_lm_positions / _weights).
        slots = select_slots(input_ids, batch["attention_mask"], self.cfg.mask_prob,
                             self.special)
        masked, positions, weights = slots.mask(), slots.positions, slots.flat_weights
        corrupted = corrupt_bert_style(input_ids, masked, self.cfg.mask_token_prob,
                                       self.cfg.random_token_prob, self.special.mask,
                                       self.random_ids)
        targets = input_ids.reshape(-1).index_select(0, positions)
        logits = self.model(corrupted, batch["token_type_ids"], batch["attention_mask"],
                            positions).float()  # one fp32 copy for the loss and the counts
        loss = mlm_loss(logits, targets, weights)
        return ObjectiveOutput(loss=loss, losses={"mlm_loss": loss.detach()},
                               counts=mlm_counts(logits, targets, weights),
                               details={"corrupted": corrupted, "masked": masked})

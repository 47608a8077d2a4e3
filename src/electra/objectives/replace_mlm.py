"""Replace MLM and All-Tokens MLM: the stepping stones between BERT and ELECTRA of the
efficiency analysis (dissertation 5.4.3, Table 5.7; ELECTRA paper section 3.5).

Both corrupt the masked positions with samples from ELECTRA's generator (a small MLM trained
jointly by maximum likelihood, embeddings shared with the main model) instead of [MASK], and
train the main model, a full-size MLM, to predict the original tokens:

- Replace MLM predicts them at the masked positions only;
- All-Tokens MLM predicts every (non-padding) token, with a copy mechanism: a sigmoid layer
  gives a copy probability D_t, and p(x_t) = D_t * [input_t = x_t] + (1 - D_t) * softmax_t(x_t).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.model.encoder import init_weights
from electra.model.networks import Generator
from electra.objectives.base import Objective, ObjectiveContext, ObjectiveOutput
from electra.objectives.core import GENERATOR_METRICS, corrupt, mlm_loss, weighted_mean
from electra.objectives.generators import (
    check_generator_options,
    generator_or_sampler,
    generator_step_flops,
    mlm_generator_config,
)
from electra.objectives.mlm import MLM_METRICS, mlm_counts


def copy_mixture_log_likelihood(logits: torch.Tensor, copy_logit: torch.Tensor,
                                inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position under D * copy(input) + (1 - D) * softmax(logits), with
    D = sigmoid(copy_logit); computed in log space (log D = logsigmoid(z),
    log(1 - D) = logsigmoid(-z))."""
    logits, copy_logit = logits.float(), copy_logit.float()
    log_softmax_target = F.log_softmax(logits, dim=-1).gather(
        -1, targets.unsqueeze(-1)).squeeze(-1)
    generate = F.logsigmoid(-copy_logit) + log_softmax_target
    copy = torch.logaddexp(F.logsigmoid(copy_logit), generate)
    return torch.where(inputs == targets, copy, generate)


def copy_mixture_predictions(logits: torch.Tensor, copy_logit: torch.Tensor,
                             inputs: torch.Tensor) -> torch.Tensor:
    """The most probable token of the copy mixture at each position."""
    with torch.no_grad():
        d = torch.sigmoid(copy_logit.float()).unsqueeze(-1)
        probs = (1 - d) * F.softmax(logits.float(), dim=-1)
        probs = probs.scatter_add(-1, inputs.unsqueeze(-1), d)
        return probs.argmax(-1)


class ReplaceMlmObjective(Objective):
    metrics = {**GENERATOR_METRICS, **MLM_METRICS}
    continues = "mlm"
    generator_model_config = staticmethod(mlm_generator_config)
    predict_all_tokens = False
    # Its generator trains jointly (two-stage and adversarial training are ELECTRA's);
    # DeBERTa-V3's sharing is for a discriminator.
    sharings, algorithms = ("embeddings", "none", "all"), ("joint",)

    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__(obj_cfg, context)
        obj_cfg = self.cfg
        self.check_supported(obj_cfg)
        check_generator_options(model_cfg, obj_cfg)
        self.model = Generator(model_cfg)  # the encoder to fine-tune
        self.generator, self.sampler = generator_or_sampler(self.model, model_cfg, obj_cfg,
                                                            context)
        # All-Tokens MLM's copy mechanism: "a sigmoid layer" on the final hidden state.
        self.copy_head = nn.Linear(model_cfg.hidden_size, 1) if self.predict_all_tokens else None
        init_weights(self, model_cfg.initializer_range)

    @classmethod
    def step_flops_breakdown(cls, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                             batch_size: int, seq_len: int) -> dict[str, float]:
        """The generator, and the main MLM with its softmax at the masked positions (Replace
        MLM) or at every position plus the copy head (All-Tokens MLM)."""
        frac = 1.0 if cls.predict_all_tokens else flops.output_frac_for(obj_cfg.mask_prob)
        out = flops.mlm_model_breakdown("model", model_cfg, batch_size, seq_len, frac,
                                        head="mlm_head")
        if cls.predict_all_tokens:
            out["model.copy_head"] = (flops.TRAIN_PASSES * batch_size
                                      * flops.copy_head_flops(model_cfg, seq_len))
        out.update(generator_step_flops(model_cfg, obj_cfg, batch_size, seq_len))
        return out

    def exportable(self):
        out = {"model": self.model}
        if self.generator is not None:
            out["generator"] = self.generator
        return out

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        input_ids = batch["input_ids"]
        token_type_ids = batch["token_type_ids"]
        attention_mask = batch["attention_mask"]
        # Every masked position holds a generator sample: no [MASK] in the main model's input.
        c = corrupt(batch, self.cfg, self.special, self.generator, self.sampler)
        losses: dict[str, torch.Tensor] = {}
        counts = dict(c.counts)
        loss = None
        if c.gen_loss is not None:
            losses["gen_loss"] = c.gen_loss.detach()
            loss = self.cfg.gen_weight * c.gen_loss
        if self.predict_all_tokens:
            main_loss, mlm_count = self._all_tokens_loss(c.noised, input_ids, token_type_ids,
                                                        attention_mask)
        else:
            logits = self.model(c.noised, token_type_ids, attention_mask, c.positions).float()
            main_loss = mlm_loss(logits, c.targets, c.weights)
            mlm_count = mlm_counts(logits, c.targets, c.weights)
        losses["mlm_loss"] = main_loss.detach()
        counts.update(mlm_count)
        loss = main_loss if loss is None else loss + main_loss
        return ObjectiveOutput(loss=loss, losses=losses, counts=counts,
                               details={"noised": c.noised, "masked": c.masked})

    def _all_tokens_loss(self, noised, input_ids, token_type_ids, attention_mask):
        """Every position is computed (a fixed shape) and the padding weighted out."""
        real = attention_mask.reshape(-1).bool()
        hidden = self.model.electra(noised, token_type_ids, attention_mask)
        hidden = hidden.reshape(-1, hidden.shape[-1])
        logits = self.model.generator_predictions(
            hidden, self.model.electra.embeddings.word_embeddings.weight, self.model.output_bias)
        copy_logit = self.copy_head(hidden).squeeze(-1)
        inputs, targets = noised.reshape(-1), input_ids.reshape(-1)
        log_p = copy_mixture_log_likelihood(logits, copy_logit, inputs, targets)
        predictions = copy_mixture_predictions(logits, copy_logit, inputs)
        counts = {"mlm_predicted": real.sum().float(),
                  "mlm_correct": ((predictions == targets) & real).sum().float()}
        return -weighted_mean(log_p, real), counts


class AllTokensMlmObjective(ReplaceMlmObjective):
    predict_all_tokens = True

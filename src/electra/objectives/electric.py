"""Electric (NCE with a two-tower noise model) and ELECTRA-TT (dissertation 5.1.2-5.1.5, 5.4.5).

Both corrupt k positions per example with samples from a two-tower cloze generator q that reads
the clean input (no [MASK]) and is trained by maximum likelihood at every real, non-special
position (it predicts all of them in one pass). They differ in the binary classifier:

- `electric`: noise-contrastive estimation (Algorithm 2). The discriminator head output is the
  energy E(x)_t, and the probability that token t of the noised input is noise is
  sigma(E(x)_t + log(k q(x_t | x without t) / (n - k))), q detached. Every one of the k
  replaced positions is labelled noise, even where the sample equals the original (Algorithm 2
  step 4; official run_pretraining.py: `labels = masked` under `electric_objective`).
  After training, p(x_t | x without t) ~ exp(-E(x)_t), so PLL(x) = -sum_t E(x)_t (5.4.5).
- `electra-tt`: ELECTRA's negative sampling, sigma(E(x)_t), with a token labelled replaced only
  where the sample differs, but the two-tower generator as q (5.4.4, 5.4.5).
"""

from __future__ import annotations

import dataclasses

import torch

from electra import flops
from electra.config import WEIGHT_SHARING, ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.model.encoder import init_weights
from electra.model.networks import Discriminator
from electra.model.two_tower import TwoTowerGenerator, two_tower_step_breakdown
from electra.objectives.base import Objective, ObjectiveContext, ObjectiveOutput, argmax_hits
from electra.objectives.core import (
    DISCRIMINATOR_METRICS,
    GENERATOR_METRICS,
    discriminate,
    replace_tokens,
    weighted_mean,
)
from electra.objectives.generators import (
    check_embedding_sharing,
    generator_config,
    sample_from_logits,
)
from electra.objectives.masking import SpecialIds, select_slots


def nce_logits(energy: torch.Tensor, log_q: torch.Tensor, num_replaced: torch.Tensor,
               num_tokens: torch.Tensor) -> torch.Tensor:
    """Logit of "noise" for each token (Algorithm 2's D, written as in 5.1.5):
    E(x)_t + log q(x_t | x without t) + log k - log(n - k), with k and n per example.

    The official code adds the constant log(mask_prob / (1 - mask_prob)) instead of
    log(k / (n - k)); with k = round(mask_prob * n) the two agree up to rounding."""
    k = num_replaced.float().clamp(min=1.0)
    n_minus_k = (num_tokens.float() - num_replaced.float()).clamp(min=1.0)
    return energy.float() + log_q.float() + (torch.log(k) - torch.log(n_minus_k))[:, None]


def cloze_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  special: SpecialIds) -> torch.Tensor:
    """Positions the generator learns to predict: real tokens other than [CLS]/[SEP]/[PAD]."""
    return (attention_mask.bool() & (input_ids != special.cls) & (input_ids != special.sep)
            & (input_ids != special.pad))


class _TwoTowerObjective(Objective):
    """What Electric and ELECTRA-TT share: networks, masking, the generator pass, FLOPs."""

    nce = False
    continues = "discriminator"  # the two towers start new
    # Its generator is the two-tower cloze model ("mlm" names it), trained jointly.
    generators, sharings, algorithms = ("mlm",), ("embeddings", "none"), ("joint",)
    # sample_differs_frac: masked positions whose noise sample differs from the original (for
    # Electric every one of them is labelled noise, so replaced_frac is 1).
    metrics = {**GENERATOR_METRICS, **DISCRIMINATOR_METRICS,
               "sample_differs_frac": ("sample_differs", "masked")}
    generator_model_config = staticmethod(generator_config)

    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__(obj_cfg, context)
        obj_cfg = self.cfg
        self.check_supported(obj_cfg)
        if obj_cfg.disallow_correct and self.nce:
            raise ElectraError(f"objective.disallow_correct is not supported by "
                               f"{obj_cfg.name!r}: NCE needs samples from q itself")
        check_embedding_sharing(model_cfg, obj_cfg)
        self.discriminator = Discriminator(model_cfg)
        # Tied embeddings (5.3.1) unless sharing = "none".
        ties = WEIGHT_SHARING[obj_cfg.sharing].ties_embeddings
        shared = self.discriminator.electra.embeddings if ties else None
        # Each tower has the MLM generator's size (generator_multiplier, generator_layers).
        self.generator = TwoTowerGenerator(generator_config(model_cfg, obj_cfg), shared)
        init_weights(self, model_cfg.initializer_range)

    @staticmethod
    def step_flops_breakdown(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                             seq_len: int) -> dict[str, float]:
        """Discriminator as ELECTRA's; generator: two towers and a softmax at every position."""
        out = flops.discriminator_breakdown("discriminator", model_cfg, batch_size, seq_len)
        out.update(two_tower_step_breakdown(generator_config(model_cfg, obj_cfg),
                                            batch_size, seq_len))
        return out

    @classmethod
    def generator_params(cls, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> int:
        """Both towers (2 x L layers) over one embedding module."""
        tower = generator_config(model_cfg, obj_cfg)
        return flops.encoder_params(
            dataclasses.replace(tower, num_hidden_layers=2 * tower.num_hidden_layers))

    def exportable(self):
        # The generator exports itself (TwoTowerGenerator.save_pretrained -> load_two_tower).
        return {"discriminator": self.discriminator, "generator": self.generator}

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        """Static shapes: the generator's softmax is computed at every position and weighted
        (Electric needs q at every real token, ELECTRA-TT at every prediction target: in
        packed data nearly all of them either way); the noise at the `max_predictions`
        masked slots of every row."""
        input_ids = batch["input_ids"]
        token_type_ids = batch["token_type_ids"]
        attention_mask = batch["attention_mask"]
        real = attention_mask.bool()
        flat_ids = input_ids.reshape(-1)

        slots = select_slots(input_ids, attention_mask, self.cfg.mask_prob, self.special)
        masked, slot_positions, weights = slots.mask(), slots.positions, slots.flat_weights
        targets = cloze_targets(input_ids, attention_mask, self.special)
        gen_logits = self.generator(input_ids, token_type_ids, attention_mask).float()
        gen_logits = gen_logits.reshape(-1, gen_logits.shape[-1])  # [B * S, V]
        log_p = gen_logits.log_softmax(-1)
        target_log_p = log_p.gather(1, flat_ids[:, None]).squeeze(1)
        gen_loss = -weighted_mean(target_log_p, targets.reshape(-1))

        # Noise: samples from q (with temperature) at the masked positions, fp32, no gradient.
        with torch.no_grad():
            log_q = log_p.detach() if self.cfg.temperature == 1.0 else (
                gen_logits.detach() / self.cfg.temperature).log_softmax(-1)
            originals = flat_ids.index_select(0, slot_positions)
            # log q already holds the temperature.
            samples = sample_from_logits(log_q.index_select(0, slot_positions), 1.0,
                                         originals if self.cfg.disallow_correct else None)
            disc_input, sample_differs = replace_tokens(input_ids, slot_positions, samples,
                                                        weights)

        energy = self.discriminator(disc_input, token_type_ids, attention_mask).float()
        if self.nce:
            # q of the token actually at t in the noised input, read from the clean-input pass
            # (official: log_softmax(cloze logits) gathered at the fake input ids); 0 at padding.
            with torch.no_grad():
                log_q_tok = log_q.gather(1, disc_input.reshape(-1)[:, None]).squeeze(1)
                log_q_tok = torch.where(real, log_q_tok.view_as(energy), 0.0)
            disc_logits = nce_logits(energy, log_q_tok, masked.sum(1), attention_mask.sum(1))
            labels = masked  # Algorithm 2: every replaced position is a negative sample
        else:
            disc_logits = energy
            labels = sample_differs  # negative sampling: ELECTRA's labels

        d = discriminate(disc_logits, labels, real)
        loss = self.cfg.gen_weight * gen_loss + self.cfg.disc_weight * d.loss

        masked_rows = gen_logits.detach().index_select(0, slot_positions)
        counts = {
            "masked": weights.sum().float(),
            "gen_correct": argmax_hits(masked_rows, originals, weights),
            **d.counts,
            "sample_differs": sample_differs.sum().float(),
        }
        return ObjectiveOutput(
            loss=loss,
            losses={"gen_loss": gen_loss.detach(), "disc_loss": d.loss.detach()},
            counts=counts,
            details={**d.details, "energy": energy.detach()},
        )


class ElectricObjective(_TwoTowerObjective):
    """Electric: an energy-based cloze model trained with NCE (dissertation 5.1.2-5.1.5)."""

    nce = True
    discriminator_scorer = "electric"  # PLL = -sum_t E(x)_t in one pass (5.4.5)


class ElectraTwoTowerObjective(_TwoTowerObjective):
    """ELECTRA-TT: ELECTRA's negative sampling with the two-tower noise model (5.4.4, 5.4.5)."""

    nce = False
    discriminator_scorer = "electra-tt"  # p = k q(x_t) D / (n (1 - D)) with the generator


# PLL scoring (5.4.5) lives in electra.scoring (ElectricScorer: sum of -E(x)_t over the
# sentence's tokens, [CLS]/[SEP] excluded as in MLM scoring).
__all__ = ["ElectraTwoTowerObjective", "ElectricObjective", "nce_logits"]

"""The corrupt -> discriminate path, written once (ELECTRA paper section 2; dissertation 5.1).

- `corrupt`: ELECTRA's corruption with an MLM generator or a network-free sampler: choose
  masked positions, run the generator on the [MASK]ed input, sample replacements and write them
  in (electra, electra-15, two-stage, adversarial, replace-mlm, all-tokens-mlm, teams);
- `replace_tokens`: samples in, labels out (also Electric's and ELECTRA-TT's noise);
- `discriminate`: the per-token binary loss and its summable counts (electra, teams, electric,
  electra-tt).

The counts they produce are what `GENERATOR_METRICS` and `DISCRIMINATOR_METRICS` turn into
logged ratios.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ObjectiveConfig
from electra.objectives.base import Ratio, argmax_hits
from electra.objectives.generators import TokenSampler, mlm_hidden_and_logits, sample_from_logits
from electra.objectives.masking import SpecialIds, corrupt_with_mask_token, select_slots

GENERATOR_METRICS: dict[str, Ratio] = {
    "gen_acc": ("gen_correct", "masked"),  # the generator's argmax is the original token
    "replaced_frac": ("replaced", "masked"),  # masked positions whose sample differs
}
DISCRIMINATOR_METRICS: dict[str, Ratio] = {
    "disc_acc": ("disc_correct", "tokens"),
    "replaced_token_frac": ("replaced", "tokens"),  # the label base rate
    "disc_precision": ("disc_true_pos", "disc_pred_pos"),
    "disc_recall": ("disc_true_pos", "replaced"),
}


def replace_tokens(input_ids: torch.Tensor, positions: torch.Tensor, samples: torch.Tensor,
                   weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(`input_ids` with `samples` at flat `positions`, where it now differs). A sample equal to
    the original token counts as original, not replaced (ELECTRA paper section 2: "that token
    is considered 'real' instead of 'fake'"). `weights` [M] (masked slots): only slots of
    weight True are written; the others keep their token (their positions are distinct from
    the masked ones, so writing the original back changes nothing)."""
    flat = input_ids.reshape(-1)
    if weights is not None:
        samples = torch.where(weights, samples, flat.index_select(0, positions))
    noised = flat.index_copy(0, positions, samples).view_as(input_ids)
    return noised, noised != input_ids


def weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `weights` is True; 0 (still connected to the graph) where none
    is. `torch.where`, not a product, so that an infinite value in a weight-0 slot does not
    make the result NaN."""
    weights = weights.float()
    return torch.where(weights > 0, values, 0.0).sum() / weights.sum().clamp(min=1.0)


def mlm_loss(logits: torch.Tensor, targets: torch.Tensor,
             weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy in fp32 over the rows of weight True (all rows without `weights`);
    0 (still connected to the graph) when there are none."""
    per_row = F.cross_entropy(logits.float(), targets, reduction="none")
    if weights is None:
        weights = torch.ones_like(targets, dtype=torch.bool)
    return weighted_mean(per_row, weights)


@dataclass
class Corruption:
    """One batch corrupted by `corrupt`. Per-slot tensors ([M] = [B * P], P masked slots per
    row, see `MaskedSlots`) follow the flat order of `positions`; slots of weight False are
    padding of the fixed shape and count nowhere."""

    masked: torch.Tensor  # [B, S] chosen positions
    positions: torch.Tensor  # [M] the slots' flat indices into B*S
    weights: torch.Tensor  # [M] bool, True where a slot is a masked position
    targets: torch.Tensor  # [M] the original tokens there
    samples: torch.Tensor  # [M] their replacements
    noised: torch.Tensor  # [B, S] the input with the samples written in
    is_replaced: torch.Tensor  # [B, S] where a sample differs from the original
    counts: dict[str, torch.Tensor]  # masked, replaced, and gen_correct with an MLM generator
    gen_logits: torch.Tensor | None = None  # [M, V] the MLM generator's (None: a sampler)
    gen_loss: torch.Tensor | None = None  # its mean cross-entropy at the masked positions
    gen_hidden: torch.Tensor | None = None  # [M, H_gen] its encoder output, if asked for


def corrupt(batch: dict[str, torch.Tensor], cfg: ObjectiveConfig, special: SpecialIds,
            generator: nn.Module | None = None, sampler: TokenSampler | None = None,
            frozen: bool = False, with_hidden: bool = False) -> Corruption:
    """ELECTRA's corruption (official pretrain_helpers.mask, run_pretraining._get_fake_data):
    `cfg.mask_prob` of the tokens are chosen; the MLM `generator` reads them as [MASK]
    (`cfg.mask_token_prob`, the rest kept) and predicts them, or `sampler` stands in for it;
    replacements are drawn from softmax(logits / temperature) in fp32 without gradient.

    Static shapes: the generator's softmax, its loss and the samples are computed at the
    `max_predictions` slots of every row (`select_slots`), weighted, as the official
    implementation does; nothing here asks the host.

    `frozen` runs the generator without gradient (two-stage's second stage); `with_hidden`
    keeps its encoder output at the masked positions (the adversarial baseline, 5.3.4).
    Random numbers are drawn in this order: positions, [MASK] choice, generator dropout,
    samples."""
    input_ids = batch["input_ids"]
    attention_mask = batch["attention_mask"]
    slots = select_slots(input_ids, attention_mask, cfg.mask_prob, special)
    masked, positions, weights = slots.mask(), slots.positions, slots.flat_weights
    targets = input_ids.reshape(-1).index_select(0, positions)
    counts = {"masked": weights.sum().float()}
    gen_logits = gen_loss = hidden = None
    if generator is not None:
        gen_input = corrupt_with_mask_token(input_ids, masked, cfg.mask_token_prob, special.mask)
        with torch.no_grad() if frozen else contextlib.nullcontext():
            if with_hidden:
                hidden, gen_logits = mlm_hidden_and_logits(
                    generator, gen_input, batch["token_type_ids"], attention_mask, positions)
            else:
                gen_logits = generator(gen_input, batch["token_type_ids"], attention_mask,
                                       positions)
            # One fp32 copy of the [M, V] logits serves the loss, the accuracy and the sampler.
            logits = gen_logits.float()
            gen_loss = mlm_loss(logits, targets, weights)
        counts["gen_correct"] = argmax_hits(logits, targets, weights)
    else:
        logits = sampler.logits(targets.numel())
    samples = sample_from_logits(logits, cfg.temperature,
                                 targets if cfg.disallow_correct else None)
    noised, is_replaced = replace_tokens(input_ids, positions, samples, weights)
    counts["replaced"] = is_replaced.sum().float()
    return Corruption(masked, positions, weights, targets, samples, noised, is_replaced, counts,
                      gen_logits, gen_loss, hidden)


@dataclass
class Discrimination:
    loss: torch.Tensor  # mean binary cross-entropy over the scored tokens
    per_token: torch.Tensor  # [B, S] the cross-entropy at every token (adversarial reward)
    counts: dict[str, torch.Tensor]  # tokens, replaced, disc_correct/_pred_pos/_true_pos
    details: dict[str, torch.Tensor]  # disc_logits, is_replaced (the labels), real (scored)


def discriminate(logits: torch.Tensor, labels: torch.Tensor, scored: torch.Tensor
                 ) -> Discrimination:
    """The discriminator's loss: binary cross-entropy of "replaced" (`labels`) against
    sigmoid(`logits`), in fp32, averaged over the `scored` tokens (ELECTRA: every non-padding
    token, L_Disc of section 2; ELECTRA 15%: the masked ones, 5.4.3; Electric: NCE logits,
    5.1.3)."""
    logits = logits.float()
    weights = scored.float()
    per_token = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="none")
    loss = (per_token * weights).sum() / weights.sum().clamp(min=1.0)
    with torch.no_grad():
        predicted = (logits > 0) & scored
        counts = {
            "tokens": scored.sum().float(),
            "replaced": labels.sum().float(),  # labels lie only at scored positions
            "disc_correct": ((predicted == labels) & scored).sum().float(),
            "disc_pred_pos": predicted.sum().float(),
            "disc_true_pos": (predicted & labels).sum().float(),
        }
    details = {"disc_logits": logits.detach(), "is_replaced": labels, "real": scored}
    return Discrimination(loss, per_token, counts, details)

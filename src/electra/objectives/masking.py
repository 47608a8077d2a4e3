"""Choosing and corrupting masked positions (official implementation: pretrain_helpers.mask)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SpecialIds:
    """The special tokens' ids by role. The defaults are the layout `electra vocab --kind
    wordpiece` writes, for objectives built directly in tests and benchmarks; every command
    passes the ids its tokenizer names (`electra.tokenizer.special_token_ids`)."""

    pad: int = 0
    unk: int = 1
    cls: int = 2
    sep: int = 3
    mask: int = 4


def max_predictions(seq_len: int, mask_prob: float) -> int:
    """Cap on masked positions per example, as the official configure_pretraining.py sets
    max_predictions_per_seq = int((mask_prob + 0.005) * max_seq_length)."""
    return max(1, int((mask_prob + 0.005) * seq_len))


@dataclass
class MaskedSlots:
    """The masked positions of a batch as fixed-size slots (official implementation:
    `masked_lm_positions` [B, P] with `masked_lm_weights`, P = max_predictions_per_seq).

    Every row has P slots whatever its length, so the shapes never depend on the data: no
    `nonzero`, no host sync, and the step can be compiled and captured whole. A row with
    fewer masked positions than P fills its other slots with distinct unmasked positions of
    weight 0; whatever is computed there is weighted out of every loss and count."""

    index: torch.Tensor  # [B, P] positions within the row, distinct per row
    weights: torch.Tensor  # [B, P] bool: True where the slot is a masked position
    seq_len: int  # S, the rows' length

    @property
    def positions(self) -> torch.Tensor:
        """[B * P] flat indices into B * S, row after row."""
        rows, seq_len = self.index.shape[0], self.seq_len
        offsets = torch.arange(rows, device=self.index.device)[:, None] * seq_len
        return (self.index + offsets).reshape(-1)

    @property
    def flat_weights(self) -> torch.Tensor:
        """[B * P] bool, in the order of `positions`."""
        return self.weights.reshape(-1)

    def mask(self) -> torch.Tensor:
        """Boolean [B, S]: the masked positions."""
        out = torch.zeros((self.index.shape[0], self.seq_len), dtype=torch.bool,
                          device=self.index.device)
        return out.scatter(1, self.index, self.weights)


def select_slots(input_ids: torch.Tensor, attention_mask: torch.Tensor, mask_prob: float,
                 special: SpecialIds, generator: torch.Generator | None = None) -> MaskedSlots:
    """round(mask_prob * real tokens) positions per example (at least 1, at most
    `max_predictions`), chosen uniformly without replacement among tokens that are not
    [CLS], [SEP] or padding, as P = `max_predictions` weighted slots (official
    pretrain_helpers.mask: the same count and cap, uniform among the candidates)."""
    candidates = attention_mask.bool() & (input_ids != special.cls) & (input_ids != special.sep)
    candidates &= input_ids != special.pad
    seq_len = input_ids.shape[1]
    num_tokens = attention_mask.sum(dim=1).float()
    cap = max_predictions(seq_len, mask_prob)
    count = torch.round(num_tokens * mask_prob).long().clamp(min=1, max=cap)
    count = torch.minimum(count, candidates.sum(dim=1))
    # Random scores; non-candidates sort last. The `count` best scores of a row are a uniform
    # sample without replacement among its candidates; the P best are distinct positions.
    scores = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    scores = scores.masked_fill(~candidates, -1.0)
    index = scores.topk(cap, dim=1).indices
    weights = torch.arange(cap, device=input_ids.device)[None, :] < count[:, None]
    return MaskedSlots(index, weights, seq_len)


def select_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor, mask_prob: float,
                     special: SpecialIds, generator: torch.Generator | None = None
                     ) -> torch.Tensor:
    """Boolean [B, S]: the positions `select_slots` chooses."""
    return select_slots(input_ids, attention_mask, mask_prob, special, generator).mask()


def corrupt_with_mask_token(input_ids: torch.Tensor, masked: torch.Tensor, mask_token_prob: float,
                            mask_id: int, generator: torch.Generator | None = None
                            ) -> torch.Tensor:
    """Each masked position becomes [MASK] with probability `mask_token_prob` (0.85 in ELECTRA)
    and otherwise keeps its original token: ELECTRA uses no random-token replacement."""
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    to_mask = masked & (draw < mask_token_prob)
    return input_ids.masked_fill(to_mask, mask_id)


def gumbel_sample(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample token ids from softmax(logits) with the Gumbel-max trick, in fp32, no gradient
    (official: pretrain_helpers.sample_from_softmax). Training samples with `categorical_sample`
    (the same distribution, cheaper); the held-out probes keep this one, so that their fixed
    corruptions, and the AUCs recorded on them, stay the same."""
    with torch.no_grad():
        logits = logits.detach().float()
        uniform = torch.rand(logits.shape, generator=generator, device=logits.device)
        gumbel = -torch.log(-torch.log(uniform + 1e-9) + 1e-9)
        return (logits + gumbel).argmax(dim=-1)


def categorical_sample(logits: torch.Tensor,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample token ids from softmax(logits), no gradient, by inverse CDF: one uniform per row.

    The official code (pretrain_helpers.sample_from_softmax) adds Gumbel noise to every logit
    and takes the argmax: the same distribution, but a uniform draw and two logarithms per
    vocabulary entry, about 9% of an ELECTRA-Small fp32 step on a CPU (docs/speed.md). The
    softmax and its running sum are in float64: in fp32 the sum over 30k entries can be off by
    ~1e-5, a third of an average token's probability."""
    with torch.no_grad():
        # Cast, then softmax: the same float64 values as softmax(dtype=float64), which takes a
        # slower mixed-dtype path on CPU (38 against 31 ms with the cumsum, 586 x 30,522).
        cdf = logits.detach().double().softmax(dim=-1).cumsum_(-1)
        u = torch.rand((*cdf.shape[:-1], 1), generator=generator, dtype=torch.float64,
                       device=cdf.device) * cdf[..., -1:]
        # right=True: the first entry whose cumulative sum exceeds u, never a zero-probability one
        return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_max_(cdf.shape[-1] - 1)


def non_special_ids(vocab_size: int, special: SpecialIds,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """Vocabulary ids other than [PAD], [UNK], [CLS], [SEP] and [MASK], ascending."""
    keep = torch.ones(vocab_size, dtype=torch.bool, device=device)
    for i in (special.pad, special.unk, special.cls, special.sep, special.mask):
        if 0 <= i < vocab_size:
            keep[i] = False
    return keep.nonzero().squeeze(1)


def corrupt_bert_style(input_ids: torch.Tensor, masked: torch.Tensor, mask_token_prob: float,
                       random_token_prob: float, mask_id: int, random_ids: torch.Tensor,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """BERT's corruption (Devlin et al. 2019, section 3.1): each masked position becomes [MASK]
    with probability `mask_token_prob` (0.8), a random token from `random_ids` with probability
    `random_token_prob` (0.1), and otherwise keeps its original token (0.1).

    `random_ids` is normally `non_special_ids(...)`: BERT draws from the whole vocabulary; we
    leave out [PAD]/[CLS]/[SEP]/[MASK]/[UNK] so no structural token appears mid-sentence."""
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    to_mask = masked & (draw < mask_token_prob)
    to_random = masked & (draw >= mask_token_prob) & (draw < mask_token_prob + random_token_prob)
    picks = torch.randint(0, random_ids.numel(), input_ids.shape, generator=generator,
                          device=input_ids.device)
    out = input_ids.masked_fill(to_mask, mask_id)
    return torch.where(to_random, random_ids.to(input_ids.device)[picks], out)

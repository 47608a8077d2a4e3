"""Pseudo-log-likelihood (PLL) scorers: PLL(x) = sum_t log p(x_t | x without t).

Ways to estimate log p(x_t | x without t) (dissertation section 5.4.5, Table 5.9):

- `MlmScorer`: a masked LM (our/ELECTRA generator, or BERT) run once per token with that token
  masked (Wang & Cho 2019; Salazar et al. 2020): n Transformer passes for n tokens.
- `ElectricScorer`: Electric's energy, log p = -E(x)_t, for all tokens in one pass.
- `ElectraTTScorer`: ELECTRA's discriminator D and a two-tower generator q, in one pass each:
  p = k q D / (n (1 - D)).
- `TwoTowerScorer`: the two-tower cloze model's q alone, one pass.

Every scorer takes raw texts, adds [CLS] ... [SEP], scores the tokens in between, batches
sequences of similar length together (longest first) and returns results in input order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from electra.errors import ElectraError
from electra.progress import LINE_INTERVAL_S, Progress, StepProgress
from electra.tokenizer import special_token_ids


@dataclass
class ScoredText:
    """One text's PLL and, per scored token (all but [CLS]/[SEP]), its log-probability."""

    text: str
    pll: float
    tokens: list[str] = field(default_factory=list)
    token_scores: list[float] = field(default_factory=list)
    truncated: bool = False


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (so running out of memory
    happens at once, not at the end); ties keep input order."""
    if batch_size < 1:
        raise ElectraError(f"batch size must be positive, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both [B, max length], right-padded."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, :len(seq)] = 1
    return ids, mask


class PllScorer:
    """Tokenization, batching and bookkeeping shared by the scorers; subclasses give per-token
    log-probabilities for a padded batch (`_score_batches`)."""

    name = ""

    def __init__(self, tokenizer: Tokenizer, max_len: int, device: str | torch.device = "cpu",
                 bf16: bool = False):
        self.tokenizer = tokenizer
        self.special = special_token_ids(tokenizer)
        self.max_len = max_len
        self.device = torch.device(device)
        self.bf16 = bf16

    # --- public API ----------------------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """[CLS] tokens [SEP] per text, cut to the model's maximum length (and whether it was)."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        room = self.max_len - 2
        ids = [[self.special["cls"], *e.ids[:room], self.special["sep"]] for e in encodings]
        return ids, [len(e.ids) > room for e in encodings]

    def score(self, texts: Sequence[str], batch_size: int = 32, per_token: bool = False,
              progress: bool | Progress = False) -> list[ScoredText]:
        """PLL of each text, in input order. `batch_size` counts sequences per forward pass
        (for `MlmScorer`, masked copies)."""
        texts = list(texts)
        ids, truncated = self.encode(texts)
        scores = self.score_ids(ids, batch_size, progress)
        out = []
        for text, seq, cut, s in zip(texts, ids, truncated, scores, strict=True):
            values = s.tolist()
            item = ScoredText(text, math.fsum(values), truncated=cut)
            if per_token:
                item.tokens = [self.tokenizer.id_to_token(t) for t in seq[1:-1]]
                item.token_scores = values
            out.append(item)
        return out

    def pll(self, texts: Sequence[str], batch_size: int = 32, progress: bool | Progress = False
            ) -> list[float]:
        return [s.pll for s in self.score(texts, batch_size, progress=progress)]

    @torch.no_grad()
    def score_ids(self, ids: Sequence[Sequence[int]], batch_size: int = 32,
                  progress: bool | Progress = False) -> list[torch.Tensor]:
        """Per-token log-probabilities (float64, CPU) of each sequence's tokens between [CLS]
        and [SEP]."""
        results: list[torch.Tensor | None] = [None] * len(ids)
        for index, values in self._score_batches(ids, batch_size, progress):
            results[index] = values
        return [r if r is not None else torch.zeros(0, dtype=torch.float64) for r in results]

    # --- helpers for subclasses ------------------------------------------------------------

    def _autocast(self):
        if not self.bf16:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def _bar(self, total: int, progress: bool | Progress, unit: str) -> StepProgress:
        """A bar on a terminal, a line every LINE_INTERVAL_S seconds in a log (`Progress`)."""
        return StepProgress(progress, total, desc=f"score ({self.name})", unit=unit,
                            line_every_s=LINE_INTERVAL_S)

    def _score_batches(self, ids: Sequence[Sequence[int]], batch_size: int,
                       progress: bool | Progress) -> Iterator[tuple[int, torch.Tensor]]:
        """One forward pass per batch of whole sequences (the one-pass scorers)."""
        with self._bar(len(ids), progress, "text") as bar:
            for batch in length_sorted_batches([len(s) for s in ids], batch_size):
                input_ids, mask = pad_batch([ids[i] for i in batch], self.special["pad"])
                input_ids, mask = input_ids.to(self.device), mask.to(self.device)
                with self._autocast():
                    scores = self._token_scores(input_ids, mask).double().cpu()
                for row, i in enumerate(batch):
                    yield i, scores[row, 1:len(ids[i]) - 1].clone()
                bar.advance(n=len(batch))

    def _token_scores(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, S] log p(x_t | x without t) estimates (values at [CLS], [SEP] and padding are
        ignored)."""
        raise NotImplementedError


class MlmScorer(PllScorer):
    """n-pass PLL from a masked LM: copy i has token i replaced by [MASK] and contributes
    log softmax(logits_i)[x_i] (Salazar et al. 2020, "Masked Language Model Scoring"). The
    copies of many texts are batched together; the vocabulary projection runs only at the
    masked position of each copy."""

    name = "mlm"

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, max_len: int,
                 device: str | torch.device = "cpu", bf16: bool = False):
        super().__init__(tokenizer, max_len, device, bf16)
        self.model = model.to(self.device).eval()

    def _score_batches(self, ids, batch_size, progress):
        # One job per (text, position): positions 1..len-2 (not [CLS]/[SEP]), grouped by text.
        jobs = [(i, p) for i, seq in enumerate(ids) for p in range(1, len(seq) - 1)]
        values = torch.zeros(len(jobs), dtype=torch.float64)
        with self._bar(len(jobs), progress, "pass") as bar:
            for batch in length_sorted_batches([len(ids[i]) for i, _ in jobs], batch_size):
                chosen = [jobs[j] for j in batch]
                input_ids, mask = pad_batch([ids[i] for i, _ in chosen], self.special["pad"])
                rows = torch.arange(len(chosen))
                pos = torch.tensor([p for _, p in chosen])
                targets = input_ids[rows, pos].clone()
                input_ids[rows, pos] = self.special["mask"]
                flat = (rows * input_ids.shape[1] + pos).to(self.device)
                with self._autocast():
                    logits = self.model(input_ids.to(self.device), None, mask.to(self.device),
                                        positions=flat)
                logp = F.log_softmax(logits.float(), dim=-1)
                picked = logp.gather(1, targets.to(self.device)[:, None]).squeeze(1)
                values[torch.tensor(batch)] = picked.double().cpu()
                bar.advance(n=len(chosen))
        counts = [max(len(seq) - 2, 0) for seq in ids]
        yield from enumerate(torch.split(values, counts))


class ElectricScorer(PllScorer):
    """Electric (section 5.4.5): PLL(x) = sum_t -E(x)_t, one pass. The discriminator's
    per-token output is the energy E(x)_t: Electric's NCE classifier adds log(k q / n) to it
    only during training (section 5.1.5)."""

    name = "electric"

    def __init__(self, discriminator: nn.Module, tokenizer: Tokenizer, max_len: int,
                 device: str | torch.device = "cpu", bf16: bool = False):
        super().__init__(tokenizer, max_len, device, bf16)
        self.discriminator = discriminator.to(self.device).eval()

    def _token_scores(self, input_ids, mask):
        return -self.discriminator(input_ids, None, mask).float()


def tt_noise_ratio(num_tokens: torch.Tensor, num_candidates: torch.Tensor, mask_prob: float,
                   positives: str = "n") -> torch.Tensor:
    """k / n of section 5.4.5 per sequence, with k and n counted as training counts them
    (`electra.objectives.masking.select_positions`): n = non-padding tokens ([CLS]/[SEP]
    included), k = round(mask_prob * n), at least 1 and at most the maskable tokens.
    positives="n-k" gives k / (n - k) instead: Algorithm 2 trains on n - k data tokens per k
    noise tokens, which is the ratio Electric's NCE classifier uses (objectives.electric)."""
    n = num_tokens.double()
    k = torch.minimum(torch.round(n * mask_prob).clamp(min=1), num_candidates.double())
    k = k.clamp(min=1)
    if positives == "n-k":
        return k / (n - k).clamp(min=1)
    return k / n


class ElectraTTScorer(PllScorer):
    """ELECTRA-TT (section 5.4.5): p(x_t | x without t) ~= k q(x_t | ...) D(x)_t / (n (1 - D(x)_t)),
    with D the probability that x_t is original data. Our discriminator's logit l_t scores
    "replaced", so D = sigmoid(-l_t), D / (1 - D) = exp(-l_t), and
    log p = log(k / n) + log q(x_t | x without t) - l_t (exact, no sigmoid saturation).
    q comes from the two-tower generator, which sees every token's context in one pass.
    k and n: see `tt_noise_ratio` (default: n as 5.4.5 writes it)."""

    name = "electra-tt"

    def __init__(self, discriminator: nn.Module, generator: nn.Module, tokenizer: Tokenizer,
                 max_len: int, mask_prob: float = 0.15, device: str | torch.device = "cpu",
                 bf16: bool = False, positives: str = "n"):
        super().__init__(tokenizer, max_len, device, bf16)
        if not 0.0 < mask_prob < 1.0:
            raise ElectraError(f"mask_prob must be in (0, 1), got {mask_prob}")
        if positives not in ("n", "n-k"):
            raise ElectraError(f"positives must be 'n' or 'n-k', got {positives!r}")
        self.discriminator = discriminator.to(self.device).eval()
        self.generator = generator.to(self.device).eval()
        self.mask_prob = mask_prob
        self.positives = positives

    def _token_scores(self, input_ids, mask):
        replaced_logit = self.discriminator(input_ids, None, mask).float()
        log_q = _two_tower_log_q(self.generator, input_ids, mask)
        special = (input_ids == self.special["cls"]) | (input_ids == self.special["sep"])
        candidates = (mask.bool() & ~special).sum(dim=1)
        ratio = tt_noise_ratio(mask.sum(dim=1), candidates, self.mask_prob, self.positives)
        return torch.log(ratio).float()[:, None] + log_q - replaced_logit


class TwoTowerScorer(PllScorer):
    """The two-tower cloze model alone (Table 5.9's "TwoTower"): log q(x_t | x without t), in
    one pass."""

    name = "two-tower"

    def __init__(self, generator: nn.Module, tokenizer: Tokenizer, max_len: int,
                 device: str | torch.device = "cpu", bf16: bool = False):
        super().__init__(tokenizer, max_len, device, bf16)
        self.generator = generator.to(self.device).eval()

    def _token_scores(self, input_ids, mask):
        return _two_tower_log_q(self.generator, input_ids, mask)


def _two_tower_log_q(generator: nn.Module, input_ids: torch.Tensor, mask: torch.Tensor
                     ) -> torch.Tensor:
    logits = generator(input_ids, torch.zeros_like(input_ids), mask).float()
    return F.log_softmax(logits, dim=-1).gather(-1, input_ids[..., None]).squeeze(-1)

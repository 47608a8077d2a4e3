"""Held-out probes that do not depend on the run's own generator.

An ELECTRA discriminator scored against its own generator mostly measures how weak that
generator still is. These probes score every run on the same *fixed* corruptions of the
held-out split, drawn once with a fixed seed:

- ``uniform``: replacements drawn uniformly from the non-special vocabulary. Many are rare or
  odd tokens, so a model can spot them from the token id alone.
- ``unigram``: replacements drawn from the training corpus' token frequencies. A replaced token
  is then exactly as frequent as the tokens it stands among, so its identity carries no signal
  and only context (does it fit its neighbours?) separates replaced from original. The AUC here
  is the measure of whether the discriminator uses context; 0.5 means it does not at all.

The same fixed masks give MLM-style objectives a comparable probe: the accuracy of their
MLM at fixed masked positions (``heldout_mlm_acc``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from electra.data.dataset import PretrainingDataset
from electra.model.networks import Discriminator
from electra.objectives.base import ObjectiveContext
from electra.objectives.generators import build_sampler
from electra.objectives.masking import SpecialIds, gumbel_sample, select_positions
from electra.pretraining.budget import at_fractions

CORRUPTIONS = ("unigram", "uniform")
DEFAULT_EXAMPLES = 256
PROBE_SEED = 20201  # the probe's corruptions never depend on the run's seed
PROBES_PER_RUN = 4  # with train.eval_every unset


@dataclass
class FixedCorruption:
    """One corrupted copy of the probe examples: model inputs, labels, positions scored."""

    input_ids: torch.Tensor  # [N, S] with replacements
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    is_replaced: torch.Tensor  # [N, S] bool: differs from the original
    scored: torch.Tensor  # [N, S] bool: real tokens other than [CLS]/[SEP]


def build_fixed_corruptions(heldout: PretrainingDataset, token_counts: torch.Tensor,
                            special: SpecialIds, mask_prob: float = 0.15,
                            max_examples: int = DEFAULT_EXAMPLES, seed: int = PROBE_SEED
                            ) -> dict[str, FixedCorruption]:
    """The probe set: the first `max_examples` held-out examples, the same masked positions
    for every corruption kind, replacements from a seeded generator (independent of torch's
    global RNG, so building the probe never changes a run's random stream)."""
    n = min(len(heldout), max_examples)
    if n == 0:
        raise ValueError(f"{heldout.data_dir}: the {heldout.split!r} split is empty")
    batch = heldout.get_batch(range(n))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    gen = torch.Generator().manual_seed(seed)
    masked = select_positions(ids, mask, mask_prob, special, generator=gen)
    flat = masked.view(-1).nonzero().squeeze(1)
    scored = mask.bool() & (ids != special.cls) & (ids != special.sep)
    vocab_size = token_counts.numel()
    out = {}
    for kind in CORRUPTIONS:
        sampler = build_sampler(kind, vocab_size, special,
                                ObjectiveContext(special, lambda: token_counts))
        samples = gumbel_sample(sampler.logits(flat.numel()), generator=gen)
        corrupted = ids.view(-1).index_copy(0, flat, samples).view_as(ids)
        out[kind] = FixedCorruption(corrupted, batch["token_type_ids"], mask,
                                    corrupted != ids, scored)
    return out


def replaced_logits(objective: torch.nn.Module, input_ids: torch.Tensor,
                    token_type_ids: torch.Tensor, attention_mask: torch.Tensor
                    ) -> torch.Tensor | None:
    """Per-token "replaced" scores of an objective's discriminator (higher = more likely
    replaced), or None for objectives without one (the MLM family)."""
    own = getattr(objective, "replaced_logits", None)
    if callable(own):
        return own(input_ids, token_type_ids, attention_mask)
    disc = getattr(objective, "discriminator", None)
    if isinstance(disc, Discriminator):
        return disc(input_ids, token_type_ids, attention_mask)
    return None


@torch.no_grad()
def token_cosine(objective: torch.nn.Module, probe: FixedCorruption,
                 device: torch.device | str = "cpu", max_examples: int = 32) -> float | None:
    """Mean cosine similarity between the discriminator's final token vectors within a
    sequence (real tokens, [CLS]/[SEP] excluded), averaged over probe examples: ~0.1 for a
    healthy encoder, near 1 when every token has collapsed onto the same vector, which is the
    state a tiny discriminator sits in while its loss stays at the base-rate entropy. None
    without a discriminator."""
    disc = getattr(objective, "discriminator", None)
    if not isinstance(disc, Discriminator):
        return None
    was_training = objective.training
    objective.eval()
    try:
        rows = slice(0, max_examples)
        hidden = disc.electra(probe.input_ids[rows].to(device),
                              probe.token_type_ids[rows].to(device),
                              probe.attention_mask[rows].to(device)).float()
    finally:
        objective.train(was_training)
    return mean_token_cosine(hidden.cpu(), probe.scored[rows])


def mean_token_cosine(hidden: torch.Tensor, keep: torch.Tensor) -> float | None:
    """Mean pairwise cosine of the vectors hidden[b, keep[b]] within each row b, averaged
    over rows with at least two kept tokens; None when there are none."""
    values = []
    for h, k in zip(hidden, keep, strict=True):
        v = torch.nn.functional.normalize(h[k], dim=-1)
        n = v.shape[0]
        if n > 1:
            values.append(((v @ v.T).sum() - n) / (n * (n - 1)))
    return float(torch.stack(values).mean()) if values else None


@torch.no_grad()
def probe_discriminator(objective: torch.nn.Module, probes: dict[str, FixedCorruption],
                        device: torch.device | str = "cpu", batch_size: int = 64
                        ) -> dict[str, float]:
    """`heldout_auc_<kind>` for each fixed corruption; {} if the objective has no
    discriminator. Runs in eval mode (no dropout) and restores the training mode."""
    was_training = objective.training
    objective.eval()
    result: dict[str, float] = {}
    try:
        for kind, probe in probes.items():
            scores, labels = [], []
            for start in range(0, probe.input_ids.shape[0], batch_size):
                rows = slice(start, start + batch_size)
                logits = replaced_logits(objective, probe.input_ids[rows].to(device),
                                         probe.token_type_ids[rows].to(device),
                                         probe.attention_mask[rows].to(device))
                if logits is None:
                    return {}
                keep = probe.scored[rows]
                scores.append(logits.float().cpu()[keep].numpy())
                labels.append(probe.is_replaced[rows][keep].numpy())
            y, s = np.concatenate(labels), np.concatenate(scores)
            auc = float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else float("nan")
            result[f"heldout_auc_{kind}"] = auc
    finally:
        objective.train(was_training)
    return result


class HeldoutProbe:
    """What the pre-training loop records on held-out text every `train.eval_every` steps:
    the fixed-corruption AUCs and the objective's own held-out metrics (fixed masking seed),
    under `heldout_*` keys. Built on the main process only; never touches the run's RNG."""

    OWN_METRICS = ("gen_acc", "mlm_acc", "disc_acc", "disc_auc", "gen_loss", "disc_loss")

    def __init__(self, heldout: PretrainingDataset, probes: dict[str, FixedCorruption],
                 every: int | None, examples: int, device: torch.device | str):
        self.heldout = heldout
        self.probes = probes
        self.every = every
        self.examples = examples
        self.device = device

    @classmethod
    def for_run(cls, data_dir, train_data: PretrainingDataset, context: ObjectiveContext,
                train_cfg, info) -> HeldoutProbe | None:
        """None when probing is off, on non-main processes, or without a held-out split."""
        every = train_cfg.eval_every
        if not info.is_main or every == 0 or "heldout" not in train_data.manifest["splits"]:
            return None
        heldout = PretrainingDataset(data_dir, "heldout")
        if len(heldout) == 0:
            return None
        probes = build_fixed_corruptions(heldout, train_data.token_counts(), context.special,
                                         max_examples=train_cfg.eval_examples)
        return cls(heldout, probes, every, train_cfg.eval_examples, info.device)

    def due(self, step: int, total_steps: int) -> bool:
        """Every `every` steps, or (None) at 4 evenly spaced points; and at the last step."""
        if self.every is None:
            return at_fractions(step, total_steps, PROBES_PER_RUN)
        return step % self.every == 0 or step == total_steps

    def left(self, step: int, total_steps: int) -> int:
        """How many probes are still due after `step` (for a time budget's plan)."""
        if self.every is None:
            return PROBES_PER_RUN - step * PROBES_PER_RUN // max(1, total_steps)
        return (total_steps - step) // self.every + 1

    def record(self, objective: torch.nn.Module, step: int, flops: float) -> dict[str, float]:
        from electra.pretraining.evaluate import evaluate_objective

        own = evaluate_objective(objective, self.heldout, batch_size=64,
                                 max_examples=self.examples, seed=PROBE_SEED,
                                 device=self.device, show_progress=False)
        record = {"step": step, "flops": flops}
        record.update({f"heldout_{k}": own[k] for k in self.OWN_METRICS if k in own})
        record.update(probe_discriminator(objective, self.probes, self.device))
        cosine = token_cosine(objective, self.probes["unigram"], self.device)
        if cosine is not None:
            record["heldout_token_cosine"] = cosine
        return record

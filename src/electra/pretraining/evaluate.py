"""Held-out evaluation of a pre-training objective: its metrics plus the discriminator's AUC."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from tqdm import tqdm

from electra.data.dataset import PretrainingDataset
from electra.device import backend_of
from electra.objectives import Objective, metrics_from_counts


@torch.no_grad()
def evaluate_objective(objective: Objective, data: PretrainingDataset, batch_size: int = 32,
                       max_examples: int = 2048, seed: int = 0, device: str = "cpu",
                       show_progress: bool = True) -> dict[str, float]:
    """Run the objective in eval mode (no dropout) over up to `max_examples` held-out examples
    with a fixed masking seed, so that two models are scored on the same corruption process."""
    objective.eval()
    n = min(len(data), max_examples)
    totals: dict[str, float] = {}
    scores, labels = [], []
    # The device's generator too (a CUDA or Apple GPU), so that a probe leaves the training
    # run's random streams where they were.
    accelerator = torch.device(device)
    own_rng = backend_of(accelerator).get_rng is not None
    with torch.random.fork_rng(devices=[accelerator] if own_rng else [],
                               device_type=accelerator.type if own_rng else "cuda"):
        torch.manual_seed(seed)
        for start in tqdm(range(0, n, batch_size), desc="evaluate", unit="batch",
                          disable=not show_progress):
            batch = data.get_batch(range(start, min(n, start + batch_size)))
            out = objective({k: v.to(device) for k, v in batch.items()})
            for k, v in {**out.counts, **out.losses}.items():
                totals[k] = totals.get(k, 0.0) + float(v) * (
                    1 if k in out.counts else len(batch["input_ids"]))
            if "disc_logits" in out.details:
                real = out.details["real"]
                scores.append(out.details["disc_logits"][real].float().cpu().numpy())
                labels.append(out.details["is_replaced"][real].cpu().numpy())
    objective.train()
    result = {"examples": n, **metrics_from_counts(totals)}
    for k in ("gen_loss", "disc_loss"):
        if k in totals:
            result[k] = totals[k] / n
    if scores:
        y, s = np.concatenate(labels), np.concatenate(scores)
        result["disc_auc"] = float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else float("nan")
    return result

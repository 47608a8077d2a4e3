"""Pieces every CVT task head shares: the one-hidden-layer prediction module and the two
per-token losses (section 4.1.1). Both tasks produce one distribution per word (over tags, or
over incoming edges), so one supervised loss and one CVT loss serve tagging and parsing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PredictionModule(nn.Module):
    """NN(x) = U · ReLU(W · x) + b, the logits of section 4.2.2's softmax. `activate=False`
    drops the ReLU: the reference's extra full-view auxiliary module is built that way
    (`activate=False` in its tagging module)."""

    def __init__(self, in_dim: int, hidden: int, n_out: int, activate: bool = True):
        super().__init__()
        self.hidden = nn.Linear(in_dim, hidden)
        self.out = nn.Linear(hidden, n_out)
        self.activate = activate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hidden(x)
        return self.out(F.relu(h) if self.activate else h)


def supervised_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                    smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy over real words; `smoothing` is label smoothing (0.1 for tagging, 4.3.1).
    Classes a mask rules out (padding heads in parsing) carry -1e9 logits, so the smoothing
    mass they would get is left out of the loss rather than pushing toward impossible edges."""
    logp = F.log_softmax(logits[mask].float(), dim=-1)
    gold = targets[mask]
    nll = -logp.gather(1, gold[:, None]).squeeze(1)
    if smoothing:
        allowed = logits[mask] > -1e8
        uniform = -(logp * allowed).sum(-1) / allowed.sum(-1)
        nll = (1 - smoothing) * nll + smoothing * uniform
    return nll.mean()


def cvt_loss(teacher_logits: torch.Tensor, student_logits: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
    """KL(p_teacher || p_student) per word, averaged over real words (L_CVT, 4.1.1). The
    teacher is detached here as well as computed under no_grad: it is a fixed target."""
    if not mask.any():  # e.g. the future view of a batch of one-word sentences
        return student_logits.sum() * 0.0
    t_logp = F.log_softmax(teacher_logits[mask].detach().float(), dim=-1)
    s_logp = F.log_softmax(student_logits[mask].float(), dim=-1)
    return (t_logp.exp() * (t_logp - s_logp)).sum(-1).mean()

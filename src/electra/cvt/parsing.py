"""Graph-based dependency parsing with CVT (section 4.2.3).

Each word t gets one distribution over its incoming edges (u, t, r), u in {ROOT, 1..T}:
    s(z_u, z_t, r) = ReLU(W_head z_u + b_head)ᵀ (W_r + W) ReLU(W_dep z_t + b_dep)
with a relation-specific W_r plus a shared W, softmax over all (u, r) jointly. With
`parser_hidden_layer` (the reference's layout, see `BilinearScorer`) a ReLU hidden layer with
dropout comes first on each side and the projections are scaled. ROOT is a learned vector in
place of an encoder output (4.3.1: "a fixed vector", i.e. not computed from the sentence).
Edges from padding and self-loops are masked out. Decoding takes each word's best edge (no
tree constraint), like the reference implementation.

Auxiliary modules score edges from the first layer's directions only:
fwd-fwd, fwd-bwd, bwd-fwd, bwd-bwd (head view, dependent view); `full` as for tagging.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.cvt.encoder import Encoded, drop

PARSING_VIEWS = ("fwd-fwd", "fwd-bwd", "bwd-fwd", "bwd-bwd")
NEG = -1e9  # logit of an impossible edge; finite, so KL and softmax stay NaN-free


class BilinearScorer(nn.Module):
    """With `hidden` (the reference's depparse_module.PredictionModule): ReLU layers of
    `hidden` units on both sides, dropout on them, the dependent side projected to `proj`
    units, the head side multiplied by (W_r + W) of shape [hidden, proj], and both divided by
    a learned scale that starts at proj ** 0.25 (its "transformer scaling trick"). Without:
    ReLU layers of `proj` units and a [proj, proj] bilinear form, as section 4.2.3 reads."""

    def __init__(self, in_dim: int, proj: int, n_rels: int, hidden: int = 0):
        super().__init__()
        self.root = nn.Parameter(torch.randn(in_dim) * 0.1)
        self.n_rels, self.hidden = n_rels, hidden
        if hidden:
            self.head_hidden = nn.Linear(in_dim, hidden)
            self.dep_hidden = nn.Linear(in_dim, hidden)
            self.dep = nn.Linear(hidden, proj)
            # Glorot-uniform with TensorFlow's fans for the reference's [hidden, R, proj] and
            # [hidden, proj] variables
            lim_rel = (6.0 / (hidden * (n_rels + proj))) ** 0.5
            lim_shared = (6.0 / (hidden + proj)) ** 0.5
            self.w_rel = nn.Parameter(torch.empty(n_rels, hidden, proj).uniform_(-lim_rel,
                                                                                 lim_rel))
            self.w_shared = nn.Parameter(torch.empty(hidden, proj).uniform_(-lim_shared,
                                                                            lim_shared))
            self.scale = nn.Parameter(torch.tensor(float(proj) ** 0.25))
        else:
            self.head = nn.Linear(in_dim, proj)
            self.dep = nn.Linear(in_dim, proj)
            self.w_rel = nn.Parameter(torch.randn(n_rels, proj, proj) * proj ** -1.0)
            self.w_shared = nn.Parameter(torch.randn(proj, proj) * proj ** -1.0)

    def forward(self, head_in: torch.Tensor, dep_in: torch.Tensor,
                mask: torch.Tensor, keep: float = 1.0) -> torch.Tensor:
        """Logits [B, T, (T+1) * R]: for dependent t, index u * R + r is the edge (u, t, r),
        u = 0 being ROOT."""
        b, t, _ = dep_in.shape
        root = self.root.expand(b, 1, -1)
        head_in = torch.cat([root, head_in], 1)
        if self.hidden:
            heads = drop(F.relu(self.head_hidden(head_in)), keep)  # [B, U, hidden]
            deps = self.dep(drop(F.relu(self.dep_hidden(dep_in)), keep)) / self.scale
            heads = heads / self.scale
        else:
            heads = F.relu(self.head(head_in))  # [B, U, p]
            deps = F.relu(self.dep(dep_in))  # [B, T, p]
        w = self.w_rel + self.w_shared  # [R, hidden or p, p]
        left = torch.einsum("buh,rhq->burq", heads, w)
        scores = torch.einsum("burq,btq->btur", left, deps)  # [B, T, U, R]
        allowed = torch.cat([torch.ones_like(mask[:, :1]), mask], 1)[:, None, :]  # heads
        pos = torch.arange(t + 1, device=mask.device)
        allowed = allowed & (pos[None, :] != pos[1:, None])[None]  # no self-loops
        scores = scores.masked_fill(~allowed[..., None], NEG)
        return scores.reshape(b, t, -1)


def parsing_views(enc: Encoded) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(head input, dependent input) of each auxiliary module."""
    side = {"fwd": enc.fwd1, "bwd": enc.bwd1}
    return {v: (side[v.split("-")[0]], side[v.split("-")[1]]) for v in PARSING_VIEWS}


class ParsingHead(nn.Module):
    kind = "dep"

    def __init__(self, n_rels: int, d1: int, full_dim: int, proj: int, full_view: bool,
                 hidden: int = 0):
        super().__init__()
        self.n_rels = n_rels
        self.primary = BilinearScorer(full_dim, proj, n_rels, hidden)
        self.aux = nn.ModuleDict({v: BilinearScorer(d1, proj, n_rels, hidden)
                                  for v in PARSING_VIEWS})
        if full_view:
            self.aux["full"] = BilinearScorer(full_dim, proj, n_rels, hidden)

    def forward(self, enc: Encoded) -> torch.Tensor:
        return self.primary(enc.full, enc.full, enc.mask, enc.keep)

    def auxiliary(self, enc: Encoded) -> dict[str, torch.Tensor]:
        views = parsing_views(enc)
        views["full"] = (enc.full, enc.full)
        return {name: module(*views[name], enc.mask, enc.keep)
                for name, module in self.aux.items()}

    @staticmethod
    def view_mask(view: str, enc: Encoded) -> torch.Tensor:
        return enc.mask

    def targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["heads"] * self.n_rels + batch["rels"]).clamp(min=0)

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, T, 2]: (head, relation id) of each word's best edge."""
        best = logits.argmax(-1)
        return torch.stack([best // self.n_rels, best % self.n_rels], -1)

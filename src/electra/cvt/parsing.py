"""Graph-based dependency parsing with CVT (section 4.2.3).

Each word t gets one distribution over its incoming edges (u, t, r), u in {ROOT, 1..T}:
    s(z_u, z_t, r) = ReLU(W_head z_u + b_head)ᵀ (W_r + W) ReLU(W_dep z_t + b_dep)
with a relation-specific W_r plus a shared W, softmax over all (u, r) jointly. ROOT is a
learned vector in place of an encoder output (4.3.1: "a fixed vector", i.e. not computed from
the sentence). Edges from padding and self-loops are masked out. Decoding takes each word's
best edge (no tree constraint), like the reference implementation.

Auxiliary modules score edges from the first layer's directions only:
fwd-fwd, fwd-bwd, bwd-fwd, bwd-bwd (head view, dependent view); `full` as for tagging.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.cvt.encoder import Encoded

PARSING_VIEWS = ("fwd-fwd", "fwd-bwd", "bwd-fwd", "bwd-bwd")
NEG = -1e9  # logit of an impossible edge; finite, so KL and softmax stay NaN-free


class BilinearScorer(nn.Module):
    def __init__(self, in_dim: int, proj: int, n_rels: int):
        super().__init__()
        self.root = nn.Parameter(torch.randn(in_dim) * 0.1)
        self.head = nn.Linear(in_dim, proj)
        self.dep = nn.Linear(in_dim, proj)
        self.w_rel = nn.Parameter(torch.randn(n_rels, proj, proj) * proj ** -1.0)
        self.w_shared = nn.Parameter(torch.randn(proj, proj) * proj ** -1.0)
        self.n_rels = n_rels

    def forward(self, head_in: torch.Tensor, dep_in: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, (T+1) * R]: for dependent t, index u * R + r is the edge (u, t, r),
        u = 0 being ROOT."""
        b, t, _ = dep_in.shape
        root = self.root.expand(b, 1, -1)
        heads = F.relu(self.head(torch.cat([root, head_in], 1)))  # [B, U, p]
        deps = F.relu(self.dep(dep_in))  # [B, T, p]
        w = self.w_rel + self.w_shared  # [R, p, p]
        left = torch.einsum("bup,rpq->burq", heads, w)
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

    def __init__(self, n_rels: int, d1: int, full_dim: int, proj: int, full_view: bool):
        super().__init__()
        self.n_rels = n_rels
        self.primary = BilinearScorer(full_dim, proj, n_rels)
        self.aux = nn.ModuleDict({v: BilinearScorer(d1, proj, n_rels) for v in PARSING_VIEWS})
        if full_view:
            self.aux["full"] = BilinearScorer(full_dim, proj, n_rels)

    def forward(self, enc: Encoded) -> torch.Tensor:
        return self.primary(enc.full, enc.full, enc.mask)

    def auxiliary(self, enc: Encoded) -> dict[str, torch.Tensor]:
        views = parsing_views(enc)
        views["full"] = (enc.full, enc.full)
        return {name: module(*views[name], enc.mask) for name, module in self.aux.items()}

    @staticmethod
    def view_mask(view: str, enc: Encoded) -> torch.Tensor:
        return enc.mask

    def targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["heads"] * self.n_rels + batch["rels"]).clamp(min=0)

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, T, 2]: (head, relation id) of each word's best edge."""
        best = logits.argmax(-1)
        return torch.stack([best // self.n_rels, best % self.n_rels], -1)

"""ModernBERT's encoder (Warner et al. 2024, "Smarter, Better, Faster, Longer", section 2.1),
computing what `transformers`' ModernBertModel computes, so that its weights load there as they
are (`electra.model.modern_hf`):

- token embeddings, then LayerNorm (no positions, no token types);
- pre-LayerNorm layers; the first has no attention norm (its input is already normalised);
- LayerNorms and linear layers without biases;
- a fused QKV projection, rotary positions (theta 160,000 in global layers, 10,000 in local ones);
- attention over the whole sequence in every `global_attn_every_n_layers`-th layer (the first
  included), elsewhere within a sliding window: keys at most `local_attention // 2` away;
- GeGLU feed-forward: Wi projects to 2 x intermediate, GELU(first half) x second half, Wo;
- a final LayerNorm.

Dropout sits where ModernBERT's does: after the embedding norm (`hidden_dropout_prob` as
`embedding_dropout`), on the attention probabilities and after Wo (`attention_probs_dropout_prob`
as `attention_dropout`), and inside the MLP before Wo (`hidden_dropout_prob` as `mlp_dropout`).

Windowed attention runs blockwise on sequences longer than 1.5 windows (queries in blocks of half a
window, each against the keys its block can reach), so its memory grows linearly with length.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .encoder import (
    EncoderConfig,
    SelfAttention,
    dropout,
    has_padding,
    set_attention_impl,
)


def rotary_tables(seq_len: int, head_dim: int, theta: float, dtype: torch.dtype,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [S, head size] of RoPE (Su et al. 2021) at positions 0..S-1: frequency
    theta**(-2i/d) for i < d/2, repeated for the two halves, as transformers computes them (in
    float32, then cast to the hidden states' dtype)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float, device=device) / head_dim
    inv_freq = 1.0 / (theta**exponents)
    positions = torch.arange(seq_len, device=device).float()
    freqs = positions[:, None] * inv_freq[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k [B, heads, S, d] rotated by position, in float32 (as transformers does)."""
    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)

    return rotate(q), rotate(k)


class LocalWindow(NamedTuple):
    """What a windowed layer's attention needs, built once per forward: the half width, and
    either a dense [B|1, 1, S, S] boolean mask or the blockwise [B|1, 1, blocks, block,
    span] one (`blocked`)."""

    half: int
    mask: torch.Tensor
    blocked: bool


class ModernAttentionInputs(NamedTuple):
    """Everything a layer's attention reads, by layer kind (what `ModernEncoder.attention_bias`
    returns and each layer picks from)."""

    global_mask: torch.Tensor | None  # boolean [B, 1, 1, S] key mask, None without padding
    global_rotary: tuple[torch.Tensor, torch.Tensor]
    local: LocalWindow | None  # None when no layer is windowed
    local_rotary: tuple[torch.Tensor, torch.Tensor] | None


def _without_empty_rows(mask: torch.Tensor) -> torch.Tensor:
    """A query that may see no key (padding far from any token, or a blockwise pad row) sees
    every key instead, so that softmax never divides by zero. Only padded positions are such
    rows, and their outputs are never read."""
    return mask | ~mask.any(dim=-1, keepdim=True)


def window_mask(seq_len: int, half: int, keep: torch.Tensor | None, device: torch.device
                ) -> torch.Tensor:
    """Dense boolean [B|1, 1, S, S]: key j visible to query i when |i - j| <= half and j is not
    padding (`keep` [B, S], True at real tokens)."""
    pos = torch.arange(seq_len, device=device)
    mask = ((pos[:, None] - pos[None, :]).abs() <= half)[None, None]
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return _without_empty_rows(mask)


def blocked_window_mask(seq_len: int, half: int, keep: torch.Tensor | None,
                        device: torch.device) -> torch.Tensor:
    """Boolean [B|1, 1, blocks, half, 3 * half]: queries in blocks of `half` positions; block n
    sees keys n * half - half .. n * half + 2 * half - 1 (what its queries can reach), and of
    those the ones within `half` of each query, inside the sequence and not padding."""
    blocks = math.ceil(seq_len / half)
    a = torch.arange(half, device=device)[:, None]  # query offset in its block
    c = torch.arange(3 * half, device=device)[None, :]  # key offset in the block's span
    within = (a - c + half).abs() <= half  # |i - j| with i = n*half + a, j = n*half - half + c
    keys = torch.arange(blocks, device=device)[:, None] * half - half + c  # [blocks, span]
    inside = (keys >= 0) & (keys < seq_len)
    mask = (within[None] & inside[:, None, :])[None, None]  # [1, 1, blocks, half, span]
    if keep is not None:
        padded = F.pad(keep, (half, blocks * half - seq_len + half), value=False)
        mask = mask & padded.unfold(1, 3 * half, half)[:, None, :, None, :]
    return _without_empty_rows(mask)


def blocked_attention(attention: SelfAttention, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, window: LocalWindow) -> torch.Tensor:
    """`attention.attend` within the window, blockwise: memory O(S x window), not O(S^2)."""
    b, heads, s, d = q.shape
    half = window.half
    blocks = math.ceil(s / half)
    pad = blocks * half - s

    # Blocks fold into the batch dimension, [B * blocks, heads, rows, d]: the fused kernels
    # (flash, memory-efficient) take 4-D inputs only.
    def folded(x: torch.Tensor) -> torch.Tensor:  # [B, heads, blocks, rows, d] -> 4-D
        return x.transpose(1, 2).reshape(b * blocks, heads, x.shape[-2], d)

    def spans(x: torch.Tensor) -> torch.Tensor:  # [B, heads, blocks, 3 * half, d]
        return F.pad(x, (0, 0, half, pad + half)).unfold(2, 3 * half, half).transpose(-1, -2)

    q_blocks = F.pad(q, (0, 0, 0, pad)).view(b, heads, blocks, half, d)
    mask = window.mask.expand(b, -1, -1, -1, -1).transpose(1, 2).reshape(
        b * blocks, 1, half, 3 * half)
    out = attention.attend(folded(q_blocks), folded(spans(k)), folded(spans(v)), mask)
    return out.view(b, blocks, heads, half, d).transpose(1, 2).reshape(
        b, heads, blocks * half, d)[:, :, :s]


class RotarySelfAttention(SelfAttention):
    """ModernBERT's attention: fused QKV without bias, RoPE on queries and keys, global or
    windowed."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__(cfg, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | LocalWindow | None,
                rotary: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.project(x)
        q, k = apply_rotary(q, k, *rotary)
        if isinstance(mask, LocalWindow):
            ctx = (blocked_attention(self, q, k, v, mask) if mask.blocked
                   else self.attend(q, k, v, mask.mask))
        else:
            ctx = self.attend(q, k, v, mask)
        return ctx.transpose(1, 2).reshape(b, s, h)


class ModernEmbeddings(nn.Module):
    """Token embeddings, LayerNorm without bias, dropout. Token types are accepted and ignored
    (ModernBERT has none), so every caller of the BERT architecture's embeddings works."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
                ) -> torch.Tensor:
        return dropout(self.LayerNorm(self.word_embeddings(input_ids)), self.dropout.p,
                       self.training)


class ModernLayer(nn.Module):
    """Pre-LN block: x += Wo(Attn(LN(x))); x += Wo(GELU(a) * g), [a, g] = Wi(LN(x))."""

    is_transformer_layer = True  # what `encoder.compile_layers` compiles

    def __init__(self, cfg: EncoderConfig, index: int):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.layer_norm_eps
        self.is_global = index % cfg.global_attn_every_n_layers == 0
        self.depth = cfg.num_hidden_layers
        self.attention_norm = nn.Identity() if index == 0 else nn.LayerNorm(h, eps=eps, bias=False)
        self.attention = RotarySelfAttention(cfg)
        self.attention_out = nn.Linear(h, h, bias=False)
        self.ffn_norm = nn.LayerNorm(h, eps=eps, bias=False)
        self.ffn_in = nn.Linear(h, 2 * cfg.intermediate_size, bias=False)
        self.ffn_out = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.attention_dropout_p = cfg.attention_probs_dropout_prob
        self.ffn_dropout_p = cfg.hidden_dropout_prob

    def forward(self, x: torch.Tensor, inputs: ModernAttentionInputs) -> torch.Tensor:
        if self.is_global:
            mask, rotary = inputs.global_mask, inputs.global_rotary
        else:
            mask, rotary = inputs.local, inputs.local_rotary
        attended = self.attention_out(self.attention(self.attention_norm(x), mask, rotary))
        x = x + dropout(attended, self.attention_dropout_p, self.training)
        gelu_in, gate = self.ffn_in(self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.ffn_out(dropout(F.gelu(gelu_in) * gate, self.ffn_dropout_p,
                                        self.training))

    @torch.no_grad()
    def scale_init(self, std: float) -> None:
        """ModernBERT's initialisation (its `_init_weights`): the projections back into the
        residual stream (attention Wo, MLP Wo) at std / sqrt(2 x layers)."""
        out_std = std / math.sqrt(2.0 * self.depth)
        for linear in (self.attention_out, self.ffn_out):
            nn.init.trunc_normal_(linear.weight, std=out_std, a=-2 * out_std, b=2 * out_std)


class ModernEncoder(nn.Module):
    """Embeddings (optionally shared with another encoder) -> N layers -> final LayerNorm."""

    def __init__(self, cfg: EncoderConfig, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.embeddings = embeddings if embeddings is not None else ModernEmbeddings(cfg)
        self.embeddings_project = None  # E = H: nothing to project
        self.layers = nn.ModuleList(ModernLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False)
        # Windowed attention blockwise (True), dense (False), or by length (None: blockwise
        # above 1.5 windows). A traced graph (ONNX) takes dense: one graph for every length.
        self.blockwise: bool | None = None

    def set_attention_impl(self, impl: str) -> None:
        set_attention_impl(self.layers, impl)

    def prepare_for_export(self) -> None:
        """The plain attention kernel, and windowed attention dense: a graph with no branch on
        the sequence length."""
        self.set_attention_impl("eager")
        self.blockwise = False

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
              ) -> torch.Tensor:
        return self.embeddings(input_ids, token_type_ids)

    def attention_bias(self, attention_mask: torch.Tensor | None, x: torch.Tensor
                       ) -> ModernAttentionInputs:
        return attention_inputs(self.config, attention_mask, x, blockwise=self.blockwise,
                                has_windowed=not all(layer.is_global for layer in self.layers))

    def after_layers(self, x: torch.Tensor) -> torch.Tensor:
        """What follows the last layer: the final LayerNorm (pre-LN layers end unnormalised)."""
        return self.final_norm(x)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed(input_ids, token_type_ids)
        inputs = self.attention_bias(attention_mask, x)
        for layer in self.layers:
            x = layer(x, inputs)
        return self.after_layers(x)


def attention_inputs(cfg: EncoderConfig, attention_mask: torch.Tensor | None, x: torch.Tensor,
                     blockwise: bool | None = None, has_windowed: bool = True,
                     causal: str | None = None) -> ModernAttentionInputs:
    """What every layer's attention reads for input `x` [B, S, H]: key masks and rotary tables
    by layer kind. `causal` ("left-to-right" or "right-to-left", the two-tower generator's
    towers): query i also sees only keys j <= i (or j >= i), always itself, and windowed
    attention is dense. `blockwise`: as `ModernEncoder.blockwise`."""
    s, head_dim = x.shape[1], cfg.hidden_size // cfg.num_attention_heads
    keep = attention_mask.bool() if has_padding(attention_mask) else None
    if causal is None:
        global_mask = None if keep is None else keep[:, None, None, :]
    else:
        global_mask = causal_mask(s, causal, keep, x.device)
    local = local_rotary = None
    if has_windowed:
        half = cfg.local_attention // 2
        blocked = blockwise if causal is None else False
        if blocked is None:
            blocked = 2 * s > 3 * cfg.local_attention  # the blocks' spans are shorter than S
        if causal is not None:
            mask = global_mask & window_mask(s, half, None, x.device)
        else:
            mask = (blocked_window_mask if blocked else window_mask)(s, half, keep, x.device)
        local = LocalWindow(half, mask, blocked)
        local_rotary = rotary_tables(s, head_dim, cfg.local_rope_theta, x.dtype, x.device)
    return ModernAttentionInputs(
        global_mask=global_mask,
        global_rotary=rotary_tables(s, head_dim, cfg.global_rope_theta, x.dtype, x.device),
        local=local, local_rotary=local_rotary)


def causal_attention_inputs(cfg: EncoderConfig, attention_mask: torch.Tensor | None,
                            x: torch.Tensor, direction: str) -> ModernAttentionInputs:
    """`attention_inputs` of a causal tower (the architecture record's `causal_attention`)."""
    return attention_inputs(cfg, attention_mask, x, causal=direction)


def causal_mask(seq_len: int, direction: str, keep: torch.Tensor | None, device: torch.device
                ) -> torch.Tensor:
    """Boolean [B|1, 1, S, S]: keys j <= i ("left-to-right") or j >= i ("right-to-left"),
    not padding, and always the query itself (so no row is empty)."""
    pos = torch.arange(seq_len, device=device)
    later = pos[None, :] >= pos[:, None]
    allowed = (later if direction == "right-to-left" else pos[None, :] <= pos[:, None])[None]
    if keep is not None:
        allowed = allowed & (keep[:, None, :] | torch.eye(seq_len, dtype=torch.bool,
                                                          device=device)[None])
    return allowed[:, None]

"""The BERT-architecture encoder shared by every objective, and ELECTRA's two heads.

Post-LayerNorm Transformer, GELU, learned positions, token types, and factorised embeddings
(embedding size E projected to hidden size H when they differ). Module names follow Hugging
Face's ELECTRA where that costs nothing (embeddings, embeddings_project, the heads), so export
is a rename of the attention/FFN weights only (see `electra.model.hf`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig

# Attention kernels: "sdpa" is torch's fused scaled_dot_product_attention; "eager" is the plain
# matmul-softmax-matmul. On CPU with bf16 autocast, SDPA's backward is several times slower than
# the plain version (measured, see README), so "auto" picks eager there.
ATTENTION_IMPLS = ("auto", "sdpa", "eager")


def _pick_attention(impl: str, x: torch.Tensor) -> str:
    if impl != "auto":
        return impl
    if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return "eager"
    return "sdpa"


class Embeddings(nn.Module):
    """Token + position + token-type embeddings, LayerNorm, dropout (size E)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.embedding_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        x = (self.word_embeddings(input_ids)
             + self.position_embeddings.weight[:seq_len].unsqueeze(0)
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        # One fused projection for Q, K and V: one matmul instead of three.
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.dropout_p = cfg.attention_probs_dropout_prob
        self.impl = "auto"

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        p = self.dropout_p if self.training else 0.0
        if _pick_attention(self.impl, x) == "sdpa":
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            if bias is not None:
                scores = scores + bias
            probs = F.dropout(scores.softmax(dim=-1), p=p, training=self.training)
            ctx = torch.matmul(probs, v)
        return ctx.transpose(1, 2).reshape(b, s, h)


class TransformerLayer(nn.Module):
    """Post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.ffn_out = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention_out(self.attention(x, bias))))
        return self.ffn_norm(x + self.dropout(self.ffn_out(F.gelu(self.ffn_in(x)))))


class Encoder(nn.Module):
    """Embeddings (optionally shared with another encoder) -> projection -> N layers."""

    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = cfg
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg)
        self.embeddings_project = (nn.Linear(cfg.embedding_size, cfg.hidden_size)
                                   if cfg.embedding_size != cfg.hidden_size else None)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def set_attention_impl(self, impl: str) -> None:
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
        for layer in self.layers:
            layer.attention.impl = impl

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        bias = attention_bias(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        return x


def attention_bias(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Additive [B, 1, 1, S] bias hiding padding keys; None when nothing is padded (faster)."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
    bias.masked_fill_(attention_mask == 0, torch.finfo(dtype).min)
    return bias[:, None, None, :]


class DiscriminatorHead(nn.Module):
    """dense H->H, GELU, dense H->1: one logit per token (replaced or original)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dense_prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(F.gelu(self.dense(hidden))).squeeze(-1)


class GeneratorHead(nn.Module):
    """dense H->E, GELU, LayerNorm, then the (tied) input embedding matrix plus a bias."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, embedding_weight: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
        h = self.LayerNorm(F.gelu(self.dense(hidden)))
        return F.linear(h, embedding_weight, bias)


class Discriminator(nn.Module):
    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = cfg
        self.electra = Encoder(cfg, embeddings)
        self.discriminator_predictions = DiscriminatorHead(cfg)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        return self.discriminator_predictions(
            self.electra(input_ids, token_type_ids, attention_mask))


class Generator(nn.Module):
    """A masked language model whose output matrix is its input word embeddings."""

    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = cfg
        self.electra = Encoder(cfg, embeddings)
        self.generator_predictions = GeneratorHead(cfg)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, S, V]; or [M, V] at flat indices `positions` into B*S (computing the
        vocabulary softmax only where it is needed, as the official implementation does)."""
        hidden = self.electra(input_ids, token_type_ids, attention_mask)
        if positions is not None:
            hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)
        return self.generator_predictions(
            hidden, self.electra.embeddings.word_embeddings.weight, self.output_bias)


@torch.no_grad()
def init_weights(module: nn.Module, std: float) -> None:
    """BERT/ELECTRA initialisation: truncated normal(0, std) clipped at 2 std, zero biases,
    LayerNorm weight 1."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            m.bias.zero_()

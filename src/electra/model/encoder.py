"""The BERT-architecture encoder shared by every objective, and ELECTRA's two heads.

Post-LayerNorm Transformer, GELU, learned positions, token types, and factorised embeddings
(embedding size E projected to hidden size H when they differ). Module names follow Hugging
Face's ELECTRA where that costs nothing (embeddings, embeddings_project, the heads), so export
is a rename of the attention/FFN weights only (see `electra.model.hf`).

Portable: this file imports only torch and the standard library, because it is copied verbatim
beside the weights of models that `transformers`' own classes cannot express (ALiBi, our task
heads) and loaded there as remote code (`modeling_electra_toolkit.py`; `electra.model.hf`
writes it). Never import `electra` here.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class EncoderConfig(Protocol):
    """What the modules here read of a config: `electra.model_config.ModelConfig` in the
    package, the remote-code config class beside exported weights."""

    vocab_size: int
    embedding_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    hidden_dropout_prob: float
    attention_probs_dropout_prob: float
    layer_norm_eps: float
    initializer_range: float
    position_bias: str
    alibi_max_slope: float | None


# Attention kernels: "sdpa" is torch's fused scaled_dot_product_attention; "eager" is the plain
# matmul-softmax-matmul. "auto" picks per call what measured faster (see
# `resolve_attention_impl`).
ATTENTION_IMPLS = ("auto", "sdpa", "eager")
# Device kinds where electra's own dropout and attention choices beat torch's kernels: those
# whose `electra.device.Backend` has fused_kernels=False (spelled out here because this module
# travels with exported models as their remote code, without electra; a test keeps the two
# equal).
_OWN_KERNELS = frozenset({"cpu"})


def resolve_attention_impl(impl: str, x: torch.Tensor, dropout_p: float) -> str:
    """The kernel `impl` means for input `x`. On CPU, "auto" is eager in bf16 (autocast or bf16
    tensors: SDPA's bf16 forward is ~1.4x and forward+backward ~2.4x slower than eager on an
    ELECTRA-Small layer) and whenever attention dropout is on (SDPA then falls back to its
    unfused math path with torch's slow dropout; eager with `dropout` makes an fp32 training
    step ~7% faster); SDPA otherwise (fp32 without dropout: on par or faster), and always off
    the CPU."""
    if impl != "auto":
        return impl
    if x.device.type in _OWN_KERNELS and (dropout_p > 0.0 or x.dtype != torch.float32
                                          or torch.is_autocast_enabled("cpu")):
        return "eager"
    return "sdpa"


# Dropout masks from 16-bit random integers. torch's CPU `bernoulli_` (behind F.dropout) costs
# ~5 ns per element, 13% of an fp32 and 28% of a bf16 ELECTRA-Small training step (2 cores);
# four masks per 64-bit draw, and arithmetic instead of comparisons (bool kernels are slow on
# CPU), cost ~1 ns. The drop rate is p rounded to a multiple of 2**-16 (0.1 -> 0.1000061), and
# kept values are scaled by exactly 1 / (1 - that rate), so the expectation is unchanged.
_MASK_BITS = 16


def dropout_mask(shape: torch.Size, p: float, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """0 (dropped) or 1 / (1 - p) (kept) per element, from torch's default generator (so
    `torch.manual_seed` and saved RNG states govern it like any other dropout)."""
    n = math.prod(shape)
    draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)
    r = draws.view(torch.int16)[:n].view(shape).float()  # uniform integers in [-2**15, 2**15)
    drop_count = round(p * 2**_MASK_BITS)
    threshold = drop_count - 2**15  # r < threshold is dropped: drop_count of 2**16 values
    scale = 1.0 / (1.0 - drop_count / 2**_MASK_BITS)
    # r - (threshold - 1) is >= 1 exactly when kept and <= 0 when dropped (exact integers).
    return r.sub_(threshold - 1).clamp_(0.0, 1.0).mul_(scale).to(dtype)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout with the fast CPU mask; other devices keep torch's fused kernel, and so does
    code being compiled (the compiler generates its own dropout kernels, and cannot trace the
    mask's in-place integer draw into one graph)."""
    if not training or p == 0.0:
        return x
    if x.device.type not in _OWN_KERNELS or torch.compiler.is_compiling():
        return F.dropout(x, p, True)
    return x * dropout_mask(x.shape, p, x.dtype, x.device)


def set_attention_impl(layers: nn.ModuleList, impl: str) -> None:
    """Every layer's attention kernel (`ATTENTION_IMPLS`), for either architecture's encoder."""
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
    for layer in layers:
        layer.attention.impl = impl


class Embeddings(nn.Module):
    """Token + position + token-type embeddings, LayerNorm, dropout (size E)."""

    def __init__(self, cfg: EncoderConfig):
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
        return dropout(self.LayerNorm(x), self.dropout.p, self.training)


class SelfAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig, bias: bool = True):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        # One fused projection for Q, K and V: one matmul instead of three.
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=bias)
        self.dropout_p = cfg.attention_probs_dropout_prob
        self.impl = "auto"

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K and V, each [B, heads, S, head size]."""
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               bias: torch.Tensor | None) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + bias) v over the last two dimensions (any leading ones)."""
        p = self.dropout_p if self.training else 0.0
        if resolve_attention_impl(self.impl, q, p) == "sdpa":
            # None, a boolean key mask or an additive bias: SDPA takes each as it is, and with
            # None it may run flash attention (on CUDA).
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        # Scaling q (S x D) is cheaper than scaling the scores (S x S), and exact for the
        # usual power-of-4 head sizes.
        scores = torch.matmul(q * self.head_dim**-0.5, k.transpose(-1, -2))
        if bias is not None:
            scores = scores + additive_bias(bias, q.dtype)
        return torch.matmul(dropout(scores.softmax(dim=-1), p, self.training), v)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape
        ctx = self.attend(*self.project(x), bias)
        return ctx.transpose(1, 2).reshape(b, s, h)


class TransformerLayer(nn.Module):
    """Post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x)). `index`, the layer's place in
    the stack, is taken for the layer interface's sake (every post-LN layer is alike)."""

    def __init__(self, cfg: EncoderConfig, index: int = 0):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.ffn_out = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        p, train = self.dropout.p, self.training
        x = self.attention_norm(x + dropout(self.attention_out(self.attention(x, bias)), p, train))
        return self.ffn_norm(x + dropout(self.ffn_out(F.gelu(self.ffn_in(x))), p, train))


class Encoder(nn.Module):
    """Embeddings (optionally shared with another encoder) -> projection -> N layers -> what
    follows the last layer (`after_layers`). A subclass may change the layers (`layer_class`,
    built as layer_class(cfg, index)) and what follows them."""

    layer_class: type[nn.Module] = TransformerLayer

    def __init__(self, cfg: EncoderConfig, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = cfg
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg)
        self.embeddings_project = (nn.Linear(cfg.embedding_size, cfg.hidden_size)
                                   if cfg.embedding_size != cfg.hidden_size else None)
        self.layers = nn.ModuleList(self.layer_class(cfg, i)
                                    for i in range(cfg.num_hidden_layers))

    def set_attention_impl(self, impl: str) -> None:
        set_attention_impl(self.layers, impl)

    def prepare_for_export(self) -> None:
        """A graph every runtime computes (`torch.onnx.export`): the plain
        matmul-softmax-matmul attention kernel. Every architecture's encoder has this hook."""
        self.set_attention_impl("eager")

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
              ) -> torch.Tensor:
        """The first layer's input: embeddings, projected to the hidden size if E != H."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        return x

    def attention_bias(self, attention_mask: torch.Tensor | None, x: torch.Tensor
                       ) -> torch.Tensor | None:
        """What every layer's attention gets: None when nothing is padded and there is no
        ALiBi (so SDPA may pick flash attention), a boolean [B, 1, 1, S] key mask for padding
        alone, and an additive float bias (padding + ALiBi) with ALiBi."""
        if self.config.position_bias != "alibi":
            return padding_mask(attention_mask)
        bias = attention_bias(attention_mask, x.dtype)
        alibi = alibi_bias(self.config.num_attention_heads, x.shape[1], x.dtype, x.device,
                           self.config.alibi_max_slope)
        return alibi if bias is None else bias + alibi

    def after_layers(self, x: torch.Tensor) -> torch.Tensor:
        """What follows the last layer: nothing here (post-LN layers end normalised)."""
        return x

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed(input_ids, token_type_ids)
        bias = self.attention_bias(attention_mask, x)
        for layer in self.layers:
            x = layer(x, bias)
        return self.after_layers(x)


# Whether the batch now running has padding, when the caller knows it without asking the device
# (see `known_padding`); None: ask the attention mask.
_KNOWN_PADDING: bool | None = None


@contextlib.contextmanager
def known_padding(padded: bool | None) -> Iterator[None]:
    """Within this block, every encoder takes `padded` as the answer to "is any position of
    the batch padded?" instead of computing `attention_mask.all()`. On CUDA that reduction is
    a host sync per encoder call (a stall that empties the GPU's queue, and a graph break under
    torch.compile); the training loop decides on the host batch before copying it to the
    device, where the answer is free. None: no hint (ask the mask)."""
    global _KNOWN_PADDING
    previous, _KNOWN_PADDING = _KNOWN_PADDING, padded
    try:
        yield
    finally:
        _KNOWN_PADDING = previous


def has_padding(attention_mask: torch.Tensor | None) -> bool:
    """Whether any position is padded: the `known_padding` hint, else the mask itself."""
    if attention_mask is None:
        return False
    if _KNOWN_PADDING is not None:
        return _KNOWN_PADDING
    return mask_has_padding(attention_mask)


def mask_has_padding(attention_mask: torch.Tensor | None) -> bool:
    """Whether any position is padded, asked of the mask itself (never the hint): what the
    caller computes on the host batch to give `known_padding`."""
    return attention_mask is not None and not bool(attention_mask.all())


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Boolean [B, 1, 1, S] mask of the keys to attend to (True: a real token); None when
    nothing is padded. SDPA takes it directly (a memory-efficient kernel can run with it; an
    additive float bias of the same meaning would be read as a general bias)."""
    if not has_padding(attention_mask):
        return None
    return attention_mask.bool()[:, None, None, :]


def additive_bias(bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean key mask as the additive bias of the same meaning (0 or finfo(dtype).min); an
    additive bias as it is. The eager kernel converts with its input's dtype, which on CPU is
    the residual stream's, the dtype the encoder built this bias with before masks were
    boolean, so eager results (and their bf16 type promotion) are unchanged."""
    if bias.dtype != torch.bool:
        return bias
    return torch.zeros(bias.shape, dtype=dtype, device=bias.device).masked_fill_(
        ~bias, torch.finfo(dtype).min)


def attention_bias(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Additive [B, 1, 1, S] bias hiding padding keys; None when nothing is padded (faster)."""
    mask = padding_mask(attention_mask)
    return None if mask is None else additive_bias(mask, dtype)


def alibi_slopes(num_heads: int, max_slope: float | None = None) -> torch.Tensor:
    """ALiBi's head slopes (Press et al. 2022, section 3): the geometric sequence starting at
    2**(-8/n) with that ratio, for n heads (a power of two; others interpolate as the paper's
    code does, taking the closest power of two's slopes and every other of the next one's).
    `max_slope` (ours) rescales them so that the steepest is `max_slope`."""
    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = torch.tensor(power_of_two(num_heads))
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        extra = power_of_two(2 * closest)[0::2][: num_heads - closest]
        slopes = torch.tensor(power_of_two(closest) + extra)
    return slopes if max_slope is None else slopes * (max_slope / slopes.max())


def alibi_bias(num_heads: int, seq_len: int, dtype: torch.dtype, device: torch.device,
               max_slope: float | None = None) -> torch.Tensor:
    """[1, H, S, S]: -slope_h * |i - j|, symmetric because the encoder sees both sides."""
    pos = torch.arange(seq_len, device=device)
    distance = (pos[None, :] - pos[:, None]).abs().float()
    slopes = alibi_slopes(num_heads, max_slope).to(device)
    return (-slopes[:, None, None] * distance).unsqueeze(0).to(dtype)


def modern_head_init(dense: nn.Linear, classifier: nn.Linear | None, std: float,
                     num_layers: int) -> None:
    """ModernBERT's initialisation of its heads (ModernBertPreTrainedModel._init_weights): the
    prediction head's dense layer at std / sqrt(2 x layers), a classifier at hidden**-0.5,
    truncated at 2 standard deviations."""
    with torch.no_grad():
        for linear, s in ((dense, std / math.sqrt(2.0 * num_layers)),
                          (classifier, None if classifier is None else dense.in_features**-0.5)):
            if linear is not None:
                nn.init.trunc_normal_(linear.weight, std=s, a=-2 * s, b=2 * s)


class DiscriminatorHead(nn.Module):
    """dense H->H, GELU, dense H->1: one logit per token (replaced or original). Without
    `biases` (an architecture without them, the modern one: `electra.architectures`) it is
    ModernBertForTokenClassification's head with one label: dense H->H without bias, GELU,
    LayerNorm without bias, dense H->1, initialised as ModernBERT does."""

    def __init__(self, cfg: EncoderConfig, biases: bool = True):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=biases)
        self.LayerNorm = (None if biases
                          else nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False))
        self.dense_prediction = nn.Linear(cfg.hidden_size, 1)
        self.num_layers = cfg.num_hidden_layers

    def scale_init(self, std: float) -> None:
        if self.LayerNorm is not None:  # ModernBERT's head
            modern_head_init(self.dense, self.dense_prediction, std, self.num_layers)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.dense(hidden))
        if self.LayerNorm is not None:
            h = self.LayerNorm(h)
        return self.dense_prediction(h).squeeze(-1)


class GeneratorHead(nn.Module):
    """dense H->E, GELU, LayerNorm, then the (tied) input embedding matrix plus a bias. Without
    `biases` (the modern architecture's: ModernBertForMaskedLM's head and decoder) the dense
    layer and the LayerNorm have none, and it is initialised as ModernBERT does."""

    def __init__(self, cfg: EncoderConfig, biases: bool = True):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.embedding_size, bias=biases)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps, bias=biases)
        self.num_layers = cfg.num_hidden_layers

    def scale_init(self, std: float) -> None:
        if self.dense.bias is None:  # ModernBERT's head
            modern_head_init(self.dense, None, std, self.num_layers)

    def forward(self, hidden: torch.Tensor, embedding_weight: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
        h = self.LayerNorm(F.gelu(self.dense(hidden)))
        return F.linear(h, embedding_weight, bias)


MIN_RECOMPILE_LIMIT = 64


def raise_recompile_limit() -> None:
    """Let dynamo keep at least `MIN_RECOMPILE_LIMIT` graphs per code object (torch's default
    is 8) before it runs further shapes eagerly."""
    import torch._dynamo  # only when compiling: importing dynamo takes a while

    dynamo_config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # the newer name, then the older
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), MIN_RECOMPILE_LIMIT))
            break


def compile_layers(module: nn.Module) -> int:
    """torch.compile every Transformer layer under `module`, in place; returns how many.

    Layers rather than the whole objective: a layer has static shapes ([B, S, H] in and out),
    while the objectives gather a data-dependent number of masked positions, which would
    break the graph or recompile. Every objective's encoders (TEAMS' extra layer and the
    two-tower generator included) are built from these layers, and `Module.compile` keeps the
    parameter names, so checkpoints and exports are unchanged.

    All layers share one code object, and each generator/discriminator width, train/eval mode
    and padded/unpadded batch is a graph of its own: torch's default limit of 8 per code object
    was reached in one benchmark process (ELECTRA-Small then -Base), after which dynamo runs
    further shapes eagerly. The limit is raised to at least 64."""
    raise_recompile_limit()
    layers = [m for m in module.modules() if isinstance(m, TransformerLayer)
              or getattr(m, "is_transformer_layer", False)]
    for layer in layers:
        layer.compile()
    return len(layers)


@torch.no_grad()
def init_weights(module: nn.Module, std: float) -> None:
    """BERT/ELECTRA initialisation: truncated normal(0, std) clipped at 2 std, zero biases,
    LayerNorm weight 1. Modules with a `scale_init(std)` method (the modern architecture's
    layers) then apply their own rule on top."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            if m.bias is not None:
                m.bias.zero_()
    for m in module.modules():
        if hasattr(m, "scale_init"):
            m.scale_init(std)

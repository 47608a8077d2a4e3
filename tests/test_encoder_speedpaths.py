"""Every fast path of the encoder computes what the plain path computes.

SDPA vs eager attention (with and without padding, train mode with dropout 0 and eval mode),
the fast CPU dropout against the definition of dropout, the "auto" kernel choice, and the
process settings of `electra.runtime.speed`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from electra.config import ModelConfig, ObjectiveConfig
from electra.model.encoder import (
    SelfAttention,
    attention_bias,
    dropout,
    dropout_mask,
    init_weights,
    resolve_attention_impl,
)
from electra.model.networks import Discriminator, Generator
from electra.objectives.electra import ElectraObjective

CFG = ModelConfig(vocab_size=200, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)
NO_DROPOUT = dataclasses.replace(CFG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
TOL = {"atol": 1e-5, "rtol": 1e-4}


def _batch(padded: bool, batch: int = 3, seq: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, CFG.vocab_size, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    if padded:
        attention_mask[0, 10:] = 0
        attention_mask[2, 5:] = 0
        input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, seq // 2:] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids,
            "attention_mask": attention_mask}


def _run(model: torch.nn.Module, impl: str, batch: dict[str, torch.Tensor], train: bool):
    model.electra.set_attention_impl(impl)
    model.train(train)
    model.zero_grad(set_to_none=True)
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    if not train:
        return out.detach(), {}
    (out.float() ** 2).mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                          if p.grad is not None}


@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "padding"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train-dropout0"])
@pytest.mark.parametrize("cls", [Discriminator, Generator])
def test_sdpa_and_eager_attention_agree(cls, train: bool, padded: bool) -> None:
    torch.manual_seed(0)
    model = cls(NO_DROPOUT)
    init_weights(model, 0.2)  # larger than 0.02 so attention is far from uniform
    batch = _batch(padded)
    out_sdpa, grads_sdpa = _run(model, "sdpa", batch, train)
    out_eager, grads_eager = _run(model, "eager", batch, train)
    real = batch["attention_mask"].bool()
    # Padded positions attend to real keys in both kernels too, but only real ones matter.
    torch.testing.assert_close(out_eager[real], out_sdpa[real], **TOL)
    assert grads_sdpa.keys() == grads_eager.keys()
    for name, grad in grads_sdpa.items():
        torch.testing.assert_close(grads_eager[name], grad, **TOL, msg=name)


def test_eager_attention_matches_textbook_formula() -> None:
    """softmax(Q K^T / sqrt(d) + bias) V, with q pre-scaling instead of scaling the scores."""
    torch.manual_seed(0)
    attn = SelfAttention(NO_DROPOUT).eval()
    attn.impl = "eager"
    x = torch.randn(2, 7, NO_DROPOUT.hidden_size)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    bias = attention_bias(mask, x.dtype)
    q, k, v = attn.qkv(x).view(2, 7, 3, 4, 16).permute(2, 0, 3, 1, 4)
    probs = (q @ k.transpose(-1, -2) / math.sqrt(16) + bias).softmax(-1)
    expected = (probs @ v).transpose(1, 2).reshape(2, 7, -1)
    torch.testing.assert_close(attn(x, bias), expected, **TOL)


def test_attention_bias_is_none_without_padding() -> None:
    assert attention_bias(torch.ones(2, 5, dtype=torch.long), torch.float32) is None
    assert attention_bias(None, torch.float32) is None
    bias = attention_bias(torch.tensor([[1, 1, 0]]), torch.float32)
    assert bias.shape == (1, 1, 1, 3)
    assert bias[0, 0, 0, 2] == torch.finfo(torch.float32).min and bias[0, 0, 0, :2].eq(0).all()


def test_auto_attention_choice() -> None:
    x = torch.zeros(1)
    assert resolve_attention_impl("auto", x, 0.0) == "sdpa"
    assert resolve_attention_impl("auto", x, 0.1) == "eager"  # SDPA would use its math path
    assert resolve_attention_impl("auto", x.bfloat16(), 0.0) == "eager"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert resolve_attention_impl("auto", x, 0.0) == "eager"
    assert resolve_attention_impl("sdpa", x, 0.1) == "sdpa"
    assert resolve_attention_impl("eager", x, 0.0) == "eager"


@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "padding"])
def test_objective_loss_same_with_either_attention(padded: bool) -> None:
    """The whole ELECTRA objective (dropout 0, same seed) gives the same loss either way."""
    torch.manual_seed(0)
    obj = ElectraObjective(NO_DROPOUT, ObjectiveConfig(generator_multiplier=0.5))
    batch = _batch(padded)
    losses = {}
    for impl in ("sdpa", "eager"):
        obj.discriminator.electra.set_attention_impl(impl)
        obj.generator.electra.set_attention_impl(impl)
        torch.manual_seed(1)
        losses[impl] = obj(batch).loss.detach()
    torch.testing.assert_close(losses["eager"], losses["sdpa"], **TOL)


# ----------------------------------------------------------------------------- dropout
@pytest.mark.parametrize("p", [0.1, 0.5, 0.03])
def test_dropout_mask_rate_values_and_mean(p: float) -> None:
    torch.manual_seed(0)
    n = 1 << 20
    mask = dropout_mask(torch.Size([n]), p, torch.float32, torch.device("cpu"))
    dropped = (mask == 0).float().mean().item()
    p_eff = round(p * 2**16) / 2**16
    assert abs(p_eff - p) <= 2**-17
    assert abs(dropped - p_eff) < 5 * math.sqrt(p * (1 - p) / n)  # 5 sigma
    kept = mask[mask != 0]
    assert torch.all(kept == kept[0]) and kept[0].item() == pytest.approx(1 / (1 - p_eff))
    assert abs(mask.mean().item() - 1.0) < 5 * math.sqrt(p / (1 - p) / n)


def test_dropout_mask_is_seeded_and_odd_sizes_work() -> None:
    shape = torch.Size([3, 5, 7])  # 105 elements: not a multiple of four
    torch.manual_seed(3)
    a = dropout_mask(shape, 0.1, torch.float32, torch.device("cpu"))
    torch.manual_seed(3)
    b = dropout_mask(shape, 0.1, torch.float32, torch.device("cpu"))
    assert a.shape == shape and torch.equal(a, b)
    half = dropout_mask(shape, 0.1, torch.bfloat16, torch.device("cpu"))
    assert half.dtype == torch.bfloat16


def test_dropout_bits_are_uniform() -> None:
    """Each of the four 16-bit slices of a draw drops at the same rate (no biased slice)."""
    torch.manual_seed(0)
    n = 1 << 20
    mask = dropout_mask(torch.Size([n]), 0.5, torch.float32, torch.device("cpu"))
    per_slice = (mask.view(-1, 4) == 0).float().mean(0)
    assert torch.all((per_slice - 0.5).abs() < 5 * math.sqrt(0.25 / (n / 4)))


def test_dropout_forward_backward_is_masking() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)
    torch.manual_seed(7)
    y = dropout(x, 0.1, True)
    torch.manual_seed(7)
    mask = dropout_mask(x.shape, 0.1, x.dtype, x.device)
    torch.testing.assert_close(y, x * mask, rtol=0, atol=0)
    y.sum().backward()
    torch.testing.assert_close(x.grad, mask, rtol=0, atol=0)


def test_dropout_is_identity_when_off() -> None:
    x = torch.randn(4, 4)
    assert dropout(x, 0.1, False) is x
    assert dropout(x, 0.0, True) is x


def test_dropout_matches_torch_dropout_in_distribution() -> None:
    """Same mean and variance as F.dropout over many draws (values differ: other RNG use)."""
    torch.manual_seed(0)
    x = torch.full((1 << 20,), 2.0)
    ours, ref = dropout(x, 0.1, True), F.dropout(x, 0.1, True)
    assert ours.mean().item() == pytest.approx(ref.mean().item(), abs=0.01)
    assert ours.std().item() == pytest.approx(ref.std().item(), abs=0.01)


def test_eval_mode_ignores_dropout() -> None:
    torch.manual_seed(0)
    model = Discriminator(CFG).eval()
    batch = _batch(True)
    a = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    b = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    assert torch.equal(a, b)


def test_state_dict_names_unchanged() -> None:
    """The speed work must not rename parameters: HF export and checkpoints rely on them."""
    keys = set(Discriminator(CFG).state_dict())
    layer = {f"electra.layers.0.{n}" for n in (
        "attention.qkv.weight", "attention.qkv.bias", "attention_out.weight",
        "attention_out.bias", "attention_norm.weight", "attention_norm.bias", "ffn_in.weight",
        "ffn_in.bias", "ffn_out.weight", "ffn_out.bias", "ffn_norm.weight", "ffn_norm.bias")}
    emb = {f"electra.embeddings.{n}" for n in (
        "word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
        "LayerNorm.weight", "LayerNorm.bias")}
    assert layer | emb | {"electra.embeddings_project.weight", "electra.embeddings_project.bias",
                          "discriminator_predictions.dense.weight",
                          "discriminator_predictions.dense.bias",
                          "discriminator_predictions.dense_prediction.weight",
                          "discriminator_predictions.dense_prediction.bias"} <= keys
    assert len(keys) == len(emb) + 2 + 4 + CFG.num_hidden_layers * len(layer)


# ---------------------------------------------------------------------- process settings
def test_configure_process_for_speed_is_idempotent() -> None:
    """Run in a child process: the settings are process-wide and would outlive the test."""
    code = (
        "import json, torch\n"
        "from electra.runtime.speed import configure_process_for_speed\n"
        "first = configure_process_for_speed()\n"
        "second = configure_process_for_speed()\n"
        "x = torch.randn(1 << 22)  # 16 MiB, above glibc's default mmap threshold\n"
        "y = torch.randn(1 << 22)\n"
        "assert torch.isfinite(x.sum() + y.sum())\n"
        "print(json.dumps([first, second]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    first, second = json.loads(out)
    assert "malloc" in first and first["torch_threads"] >= 1
    assert second.pop("already_applied") is True and second == first
    if first["malloc"].startswith("glibc"):
        assert first["mallopt"] == {"M_MMAP_MAX": 0, "M_TRIM_THRESHOLD": -1,
                                    "M_TOP_PAD": 64 << 20}

"""Layer-wise learning-rate decay, parameter by parameter, in both depth conventions."""

from __future__ import annotations

import pytest
import torch

from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.optim import build_optimizer, layerwise_groups, parameter_depth
from electra.model.encoder import Encoder

LR, D, L = 1e-3, 0.8, 3


def _model(embedding_size: int = 16) -> FinetuneModel:
    cfg = ModelConfig(vocab_size=50, embedding_size=embedding_size, hidden_size=32,
                      num_hidden_layers=L, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=16)
    return FinetuneModel(Encoder(cfg), "sequence", 3)


def _lrs(model, style: str) -> dict[str, float]:
    return {name: g["lr"] for g in layerwise_groups(model, LR, D, L, style)
            for name in g["names"]}


def test_dissertation_rule_head_is_layer_zero() -> None:
    lrs = _lrs(_model(), "dissertation")
    assert len(lrs) == len(list(_model().named_parameters()))
    for name, lr in lrs.items():
        if name.startswith("task_head."):
            expected = LR
        elif name.startswith("encoder.layers."):
            i = int(name.split(".")[2])
            expected = LR * D ** (L - i)  # top layer (i = L-1): LR * D
        else:  # embeddings and their projection: layer L + 1
            assert name.startswith(("encoder.embeddings.", "encoder.embeddings_project."))
            expected = LR * D ** (L + 1)
        assert lr == pytest.approx(expected), name
    assert lrs["encoder.layers.2.ffn_out.weight"] == pytest.approx(LR * 0.8)
    assert lrs["encoder.embeddings.word_embeddings.weight"] == pytest.approx(LR * 0.8**4)


def test_official_rule_skips_depth_l_plus_1() -> None:
    lrs = _lrs(_model(), "official")
    for name, lr in lrs.items():
        if name.startswith("task_head."):
            depth = L + 2
        elif name.startswith("encoder.layers."):
            depth = int(name.split(".")[2]) + 1
        else:
            depth = 0
        assert lr == pytest.approx(LR * D ** (L + 2 - depth)), name
    assert lrs["encoder.layers.2.attention.qkv.weight"] == pytest.approx(LR * 0.8**2)
    assert lrs["encoder.embeddings_project.weight"] == pytest.approx(LR * 0.8**5)


def test_unknown_parameter_and_style_are_errors() -> None:
    with pytest.raises(ElectraError, match="no layer-wise"):
        parameter_depth("pooler.weight", L)
    with pytest.raises(ElectraError, match="style"):
        parameter_depth("task_head.out.weight", L, "other")


def test_schedule_warmup_then_linear_decay_and_adamw_eps() -> None:
    model = _model()
    opt, sched = build_optimizer(model, LR, D, L, total_steps=20, warmup_fraction=0.1)
    head = next(g for g in opt.param_groups if g["lr"] == pytest.approx(LR / 2))  # step 0: 1/2
    assert opt.defaults["eps"] == 1e-6 and head["weight_decay"] == 0.0
    seen = []
    for _ in range(20):
        seen.append(sched.get_last_lr()[opt.param_groups.index(head)])
        opt.step()
        sched.step()
    # min(1, (step + 1) / warmup) * (1 - step / total), warm-up = 2 of 20 steps
    assert seen[1] == pytest.approx(LR * 19 / 20)
    assert seen[5] == pytest.approx(LR * 15 / 20)
    assert seen[-1] == pytest.approx(LR / 20)
    assert all(a >= b for a, b in zip(seen[1:], seen[2:], strict=False))
    assert torch.is_tensor(next(model.parameters()))

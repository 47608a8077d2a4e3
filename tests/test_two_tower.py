"""The two-tower cloze model (dissertation 5.1.5): shifted causal towers, no position sees its
own token, padding, save/load, FLOPs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from electra import flops
from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.model.encoder import init_weights
from electra.model.two_tower import (
    TwoTowerGenerator,
    load_two_tower,
    save_two_tower,
    two_tower_step_breakdown,
)

VOCAB = 60
H = 16


def tiny_cfg(**kw) -> ModelConfig:
    base = dict(vocab_size=VOCAB, embedding_size=24, hidden_size=H, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return ModelConfig(**{**base, **kw})


# The modern architecture's towers: ModernBERT layers under causal masks, with a window of 4
# (keys at most 2 away) so that the window is in play at these lengths.
ARCHITECTURES = {"bert": {}, "modern": {"architecture": "modern", "embedding_size": H,
                                        "local_attention": 4, "num_hidden_layers": 3}}


def model(seed: int = 0, arch: str = "bert", **kw) -> TwoTowerGenerator:
    torch.manual_seed(seed)
    m = TwoTowerGenerator(tiny_cfg(**ARCHITECTURES[arch], **kw))
    init_weights(m, 0.2)  # larger than 0.02 so every dependency is numerically visible
    return m.eval()


def ids(batch: int = 2, seq: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randint(5, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_no_position_sees_its_own_token_dissertation_5_1_5(arch):
    """q(x_t | x without t): replacing x_t leaves position t's distribution unchanged and
    changes its neighbours' (the previous/next states, not the current ones, are used)."""
    m, x = model(arch=arch), ids(batch=1)
    base = m(x)
    for t in range(x.shape[1]):
        changed = x.clone()
        changed[0, t] = 5 + (x[0, t] - 5 + 7) % (VOCAB - 5)
        out = m(changed)
        assert torch.equal(out[0, t], base[0, t]), t
        for nb in (t - 1, t + 1):
            if 0 <= nb < x.shape[1]:
                assert (out[0, nb] - base[0, nb]).abs().max() > 1e-4, (t, nb)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_gradient_of_position_t_wrt_its_own_input_is_zero(arch):
    m, x = model(arch=arch), ids(batch=1, seq=8)
    captured = {}

    def keep(_module, _inputs, output):
        output.retain_grad()
        captured["emb"] = output

    m.embeddings.register_forward_hook(keep)
    t = 4
    m(x)[0, t].logsumexp(-1).backward()
    grad = captured["emb"].grad[0].abs().sum(-1)
    assert grad[t].item() == 0.0
    assert grad[t - 1].item() > 0 and grad[t + 1].item() > 0
    assert all(grad[j].item() > 0 for j in range(8) if j != t)  # both sides are context


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_two_tower_shift_left_half_is_ltr_t_minus_1_right_half_is_rtl_t_plus_1(arch):
    m, x = model(arch=arch), ids(batch=1, seq=9)
    h = m.hidden(x)
    assert h.shape == (1, 9, 2 * H)
    assert torch.equal(h[0, 0, :H], torch.zeros(H))  # no left context at the start: zeros
    assert torch.equal(h[0, -1, H:], torch.zeros(H))  # no right context at the end: zeros
    t = 4
    right_changed = x.clone()
    right_changed[0, t:] = 5 + (x[0, t:] - 5 + 3) % (VOCAB - 5)  # x_t and everything after
    left_changed = x.clone()
    left_changed[0, :t + 1] = 5 + (x[0, :t + 1] - 5 + 3) % (VOCAB - 5)  # x_t and before
    assert torch.equal(m.hidden(right_changed)[0, t, :H], h[0, t, :H])  # h_ltr[t-1]: x_<t only
    assert torch.equal(m.hidden(left_changed)[0, t, H:], h[0, t, H:])  # h_rtl[t+1]: x_>t only
    assert (m.hidden(right_changed)[0, t, H:] - h[0, t, H:]).abs().max() > 1e-4


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_padding_does_not_change_real_positions(arch):
    m, x = model(arch=arch), ids(batch=1, seq=7)
    padded = torch.cat([x, torch.zeros(1, 5, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 7, dtype=torch.long), torch.zeros(1, 5, dtype=torch.long)], 1)
    a = m(x, attention_mask=torch.ones_like(x))
    b = m(padded, attention_mask=mask)
    assert torch.allclose(a[0], b[0, :7], atol=1e-5)
    # the last real token has no right context, as at the end of an unpadded sequence
    assert torch.equal(m.hidden(padded, attention_mask=mask)[0, 6, H:], torch.zeros(H))


def test_positions_gather_rows_of_the_full_output():
    m, x = model(), ids(batch=2, seq=6)
    full = m(x)
    positions = torch.tensor([0, 3, 7, 11])
    assert torch.allclose(m(x, positions=positions), full.reshape(-1, VOCAB)[positions],
                          atol=1e-6)


def test_token_log_probs_are_log_q_of_present_tokens_zero_at_padding():
    m = model()
    x = ids(batch=2, seq=6)
    mask = torch.ones_like(x)
    mask[1, 4:] = 0
    lp = m.token_log_probs(x, attention_mask=mask)
    ref = m(x, attention_mask=mask).log_softmax(-1).gather(-1, x[..., None]).squeeze(-1)
    assert torch.allclose(lp[0], ref[0], atol=1e-6)
    assert torch.equal(lp[1, 4:], torch.zeros(2))
    assert bool((lp[mask.bool()] < 0).all())


def test_save_load_round_trip_atomic_with_tokenizer(tmp_path: Path, vocab_dir: Path):
    m, x = model(), ids()
    out = m.save_pretrained(tmp_path / "gen", vocab_dir, {"steps": 3})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen"]  # no temporary left behind
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["ElectraTwoTowerCloze"]
    assert cfg["hidden_size"] == H and cfg["electra_toolkit"] == {"steps": 3}
    assert (out / "vocab.txt").is_file() and (out / "tokenizer.json").is_file()
    loaded = load_two_tower(out)
    assert not loaded.training
    assert torch.equal(loaded(x), m(x))
    # saving again replaces the directory
    save_two_tower(model(seed=5), out)
    assert not torch.equal(load_two_tower(out)(x), m(x))


def test_load_errors_name_the_file(tmp_path: Path):
    with pytest.raises(ElectraError, match="no config.json"):
        load_two_tower(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "electra"}))
    with pytest.raises(ElectraError, match="config.json: model_type 'electra'"):
        load_two_tower(tmp_path)
    out = save_two_tower(model(), tmp_path / "m")
    (out / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ElectraError, match="model.safetensors: unreadable"):
        load_two_tower(out)


def test_shared_embeddings_are_one_module():
    from electra.model.encoder import Embeddings

    emb = Embeddings(tiny_cfg())
    m = TwoTowerGenerator(tiny_cfg(), emb)
    assert m.embeddings is emb
    assert m.cloze_head.dense.in_features == 2 * H  # softmax over [h_ltr, h_rtl]


def test_two_tower_flops_two_towers_and_softmax_at_every_position():
    cfg = tiny_cfg()
    b, s = 3, 16
    out = two_tower_step_breakdown(cfg, b, s)
    assert out["generator.layers"] == 2 * b * 2 * 2 * flops.layer_flops(cfg, s)
    assert out["generator.embeddings"] == 2 * b * flops.embedding_flops(cfg, s)
    wide = ModelConfig(**{**cfg.__dict__, "hidden_size": 2 * H})
    assert out["generator.head"] == 2 * b * flops.mlm_head_flops(wide, s, 1.0)

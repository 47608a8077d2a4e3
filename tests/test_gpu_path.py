"""The GPU path, checked on CPU: attention masks in the forms fast kernels take, the padding
decided on the host, fused AdamW only on CUDA, pinned copies only on CUDA, metrics that stay
on the device between log lines, and the opt-in torch.compile. None of it may change CPU
results."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from electra.config import ModelConfig, PretrainConfig, merge
from electra.device import to_device
from electra.model.encoder import (
    Encoder,
    SelfAttention,
    additive_bias,
    attention_bias,
    has_padding,
    init_weights,
    known_padding,
    padding_mask,
)
from electra.objectives import build_objective
from electra.pretraining.loop import _window_values, pretrain
from electra.runtime import checkpoint
from electra.runtime import optim as optim_mod
from electra.runtime.optim import adamw_impl, build_optimizer
from electra.runtime.skeleton import LogWindow

CFG = ModelConfig(vocab_size=200, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
MASK = torch.tensor([[1] * 12, [1] * 7 + [0] * 5, [1] * 3 + [0] * 9])


def _attention(impl: str) -> SelfAttention:
    torch.manual_seed(0)
    attn = SelfAttention(CFG).eval()
    init_weights(attn, 0.2)  # far from uniform attention
    attn.impl = impl
    return attn


# ----------------------------------------------------------------------------- attention
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_boolean_mask_gives_the_additive_mask_result_exactly(impl: str) -> None:
    attn = _attention(impl)
    x = torch.randn(3, 12, CFG.hidden_size)
    boolean = padding_mask(MASK)
    assert boolean.dtype == torch.bool and boolean.shape == (3, 1, 1, 12)
    additive = attention_bias(MASK, x.dtype)
    assert torch.equal(additive, additive_bias(boolean, x.dtype))
    with torch.no_grad():
        assert torch.equal(attn(x, boolean), attn(x, additive))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_no_mask_equals_an_all_zero_additive_mask(impl: str) -> None:
    attn = _attention(impl)
    x = torch.randn(3, 12, CFG.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, None), attn(x, torch.zeros(3, 1, 1, 12)),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_padded_keys_get_no_attention(impl: str) -> None:
    """Whatever stands at padded positions, real positions' outputs do not move."""
    attn = _attention(impl)
    x = torch.randn(3, 12, CFG.hidden_size)
    noisy = x.clone()
    noisy[MASK == 0] = 100 * torch.randn(int((MASK == 0).sum()), CFG.hidden_size)
    with torch.no_grad():
        a, b = attn(x, padding_mask(MASK)), attn(noisy, padding_mask(MASK))
    real = MASK.bool()
    assert torch.equal(a[real], b[real])
    assert not torch.equal(a[~real], b[~real])  # the noise did reach the padded rows


def test_encoder_passes_none_boolean_or_additive() -> None:
    x = torch.zeros(3, 12, CFG.hidden_size)
    plain = Encoder(CFG)
    assert plain.attention_bias(torch.ones(3, 12, dtype=torch.long), x) is None
    assert plain.attention_bias(None, x) is None
    assert plain.attention_bias(MASK, x).dtype == torch.bool
    alibi = Encoder(dataclasses.replace(CFG, position_bias="alibi"))
    assert alibi.attention_bias(None, x).dtype == torch.float32  # ALiBi stays additive
    assert alibi.attention_bias(MASK, x).shape == (3, CFG.num_attention_heads, 12, 12)


def test_known_padding_answers_without_asking_the_mask() -> None:
    assert has_padding(MASK) and not has_padding(torch.ones(2, 3)) and not has_padding(None)
    with known_padding(False):
        assert not has_padding(MASK) and padding_mask(MASK) is None  # the hint wins
        with known_padding(True):
            assert has_padding(torch.ones(2, 3))
        assert not has_padding(MASK)
    assert has_padding(MASK)  # restored


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_encoder_output_is_the_same_with_a_correct_hint(impl: str) -> None:
    torch.manual_seed(0)
    enc = Encoder(CFG).eval()
    init_weights(enc, 0.2)
    enc.set_attention_impl(impl)
    ids = torch.randint(5, CFG.vocab_size, MASK.shape)
    for mask in (MASK, torch.ones_like(MASK)):
        with torch.no_grad():
            plain = enc(ids, None, mask)
            with known_padding(bool((mask == 0).any())):
                hinted = enc(ids, None, mask)
        assert torch.equal(plain, hinted)


# ----------------------------------------------------------------------------- optimizer
def _param(cuda: bool, floating: bool = True) -> SimpleNamespace:
    """What `adamw_impl` reads of a parameter (no CUDA here to make a real one): its device,
    whose backend record says whether AdamW fuses there."""
    return SimpleNamespace(device=torch.device("cuda" if cuda else "cpu"), is_cuda=cuda,
                           is_floating_point=lambda: floating)


def test_fused_adamw_only_when_every_parameter_is_on_cuda() -> None:
    assert adamw_impl([_param(True), _param(True)]) == {"fused": True}
    assert adamw_impl([_param(True), _param(False)]) == {}
    assert adamw_impl([_param(True, floating=False)]) == {}
    assert adamw_impl([]) == {}
    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg.model, {"vocab_size": 100})
    optimizer = build_optimizer(build_objective(cfg.model, cfg.objective), cfg.train)
    assert not optimizer.defaults["fused"] and optimizer.defaults["foreach"] is None  # as before


def test_resume_keeps_this_devices_adamw_kernel() -> None:
    """A checkpoint from a fused (CUDA) optimizer loads into a CPU one as unfused, with the
    same moments."""
    params = [torch.nn.Parameter(torch.randn(4, 3))]
    fused = torch.optim.AdamW(params, lr=0.1, fused=True)
    params[0].grad = torch.randn(4, 3)
    fused.step()
    plain = torch.optim.AdamW(params, lr=0.1)
    plain.load_state_dict(checkpoint.with_kernel_of(plain, fused.state_dict()))
    assert not plain.param_groups[0]["fused"]
    assert torch.equal(plain.state[params[0]]["exp_avg"], fused.state[params[0]]["exp_avg"])


# ----------------------------------------------------------------------------- copies
def test_to_device_on_cpu_copies_nothing() -> None:
    batch = {"a": torch.ones(2), "task": {"b": torch.zeros(3)}}
    moved = to_device(batch, torch.device("cpu"))
    assert moved["a"] is batch["a"] and moved["task"]["b"] is batch["task"]["b"]


# ----------------------------------------------------------------------------- training
TINY = {"model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "intermediate_size": 64,
                  "max_position_embeddings": 64},
        "objective": {"generator_multiplier": 0.5},
        "train": {"batch_size": 8, "learning_rate": 1e-3, "warmup_steps": 1, "seed": 3,
                  "eval_every": 0}}


def _tiny(steps: int, log_every: int, **train) -> PretrainConfig:
    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg, TINY)
    merge(cfg.train, {"steps": steps, "log_every": log_every, "save_every": steps, **train})
    return cfg


HOST_READS = ("__bool__", "__float__", "__int__", "item", "tolist")


def host_reads_of_a_run(data_dir: Path, out: Path, monkeypatch: pytest.MonkeyPatch,
                        packages: tuple[str, ...]) -> Counter[tuple[str, str, str]]:
    """Every tensor -> Python value conversion made from `packages` of electra in a 6-step
    run with 2 micro-batches per step, logged every 3 steps: (file, function, its caller)."""
    calls: Counter[tuple[str, str, str]] = Counter()

    def counting(name: str):
        real = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            frame = sys._getframe(1)
            file = Path(frame.f_code.co_filename)
            if file.parent.name in packages:
                calls[(file.name, frame.f_code.co_name, frame.f_back.f_code.co_name)] += 1
            return real(self, *args, **kwargs)
        return wrapper

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    pretrain(_tiny(6, 3, grad_accum=2), data_dir, out, device="cpu", show_progress=False)
    monkeypatch.undo()
    return calls


def test_metrics_reach_the_host_only_at_log_steps(data_dir: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts every tensor -> Python value conversion made by the loop and the encoder in a
    6-step run logged every 3 steps: one per step (`StepLoop._flags`, finite/stop), one per log
    line (`LogWindow.flush`), one per micro-batch on the *host* batch (padding), none in the
    encoders (they take the host's answer)."""
    calls = host_reads_of_a_run(data_dir, tmp_path / "out", monkeypatch,
                                ("runtime", "pretrain", "model"))
    assert calls == {("skeleton.py", "_flags", "update"): 6,
                     ("skeleton.py", "flush", "_log_record"): 2,
                     ("encoder.py", "mask_has_padding", "_eager_step"): 12}, calls


def test_no_step_waits_for_the_device_where_the_update_is_skipped_there(
        data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fused AdamW (CUDA's; CPU has one too) the non-finite guard runs on the device: in
    a 6-step run logged every 3 steps the loop reads the device only at its log lines (the
    unsettled non-finite count, the window's sums and its kept count), never per step."""
    monkeypatch.setattr(optim_mod, "adamw_impl", lambda params: {"fused": True})
    calls = host_reads_of_a_run(data_dir, tmp_path / "out", monkeypatch,
                                ("runtime", "pretrain", "model", "objectives"))
    assert calls == {("skeleton.py", "settle", "_train_steps"): 2,
                     ("skeleton.py", "flush", "_log_record"): 2 * 2,
                     ("encoder.py", "mask_has_padding", "_eager_step"): 12}, calls


def test_window_accumulates_tensors() -> None:
    window = LogWindow()
    output = SimpleNamespace(loss=torch.tensor(2.0), losses={"gen_loss": torch.tensor(1.0)},
                             counts={"masked": torch.tensor(3.0)})
    for _ in range(2):
        window.add(_window_values(output, torch.ones(2, 4)))
        window.end_step()
    assert set(window.sums) == {"loss", "gen_loss", "masked", "_tokens"}
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 for v in window.sums.values())
    assert window.sums["_tokens"].item() == 16.0


def _compile_reason() -> str | None:
    """Why torch.compile cannot run here (no C++ compiler for inductor, ...), or None."""
    try:
        fn = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2)
        fn(torch.randn(4))
    except Exception as err:  # inductor raises a variety of types
        return f"torch.compile does not work on this machine: {type(err).__name__}: {err}"[:300]
    return None


@pytest.mark.slow
def test_compiled_training_matches_eager(data_dir: Path, tmp_path: Path) -> None:
    """`train.compile` (torch.compile per Transformer layer): finite losses close to eager,
    and the same parameter names in the export."""
    reason = _compile_reason()
    if reason:
        pytest.skip(reason)
    losses, seconds = {}, {}
    for compiled in (False, True):
        out = tmp_path / f"compile-{compiled}"
        start = time.perf_counter()
        pretrain(_tiny(2, 1, compile=compiled), data_dir, out, device="cpu",
                 show_progress=False)
        seconds[compiled] = time.perf_counter() - start
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        losses[compiled] = [r["loss"] for r in rows if "loss" in r]
    assert len(losses[True]) == 2 and all(map(torch.isfinite, torch.tensor(losses[True])))
    # Not bit-identical: inductor fuses and reorders float operations (and draws its own
    # dropout numbers), so only close.
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]),
                               rtol=0.05, atol=0.0)
    exported = {c: load_file(tmp_path / f"compile-{c}" / "final" / "discriminator" /
                             "model.safetensors").keys() for c in (False, True)}
    assert exported[True] == exported[False]
    print(f"eager {seconds[False]:.1f} s, compiled {seconds[True]:.1f} s")

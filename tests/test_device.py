"""`--device` and the bf16 check shared by every command: `--bf16` on a CPU without native bf16
(where bf16 matmuls run ~85x slower than fp32) is a one-line error, wherever the tests run:
the detection is patched, so the tests hold on AVX2 and AMX machines alike."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from electra import device as device_mod
from electra.cli import main
from electra.device import ALLOW_SLOW_BF16, cpu_has_fast_bf16, resolve_device
from electra.errors import ElectraError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def slow_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.delenv(ALLOW_SLOW_BF16, raising=False)


@pytest.fixture
def fast_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: True)


def test_bf16_on_a_slow_cpu_is_refused_with_the_reason(slow_cpu):
    with pytest.raises(ElectraError) as info:
        resolve_device("cpu", bf16=True)
    message = str(info.value)
    assert message.startswith("--precision bf16: this CPU has no native bf16")
    assert "85x slower than fp32" in message and ALLOW_SLOW_BF16 in message
    assert "\n" not in message
    assert resolve_device("cpu") == torch.device("cpu")  # fp32 is always fine


def test_bf16_is_allowed_on_a_fast_cpu_or_with_the_override(fast_cpu, monkeypatch):
    assert resolve_device("cpu", bf16=True) == torch.device("cpu")
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.setenv(ALLOW_SLOW_BF16, "1")
    assert resolve_device("cpu", bf16=True) == torch.device("cpu")


def test_cuda_is_never_refused_for_bf16(slow_cpu):
    assert device_mod.slow_bf16_reason(torch.device("cuda", 0)) is None


def test_cuda_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ElectraError, match="CUDA is not available"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("caps, onednn, flags, fast", [
    ({"avx2": True, "avx512_bf16": False, "amx_bf16": False}, False, set(), False),
    ({"avx512_bf16": True}, False, set(), True),
    ({"amx_bf16": True}, False, set(), True),
    ({}, True, set(), True),  # oneDNN does bf16 here (e.g. AVX512 cores, Arm BF16)
    ({}, False, {"avx2", "amx_bf16"}, True),  # /proc/cpuinfo as the last word
])
def test_detection(monkeypatch, caps, onednn, flags, fast):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: caps)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn)
    monkeypatch.setattr(device_mod, "_cpuinfo_flags", lambda: flags)
    assert cpu_has_fast_bf16() is fast


def test_detection_on_this_machine_agrees_with_its_flags():
    flags = device_mod._cpuinfo_flags()
    if flags & {"avx512_bf16", "amx_bf16"}:
        assert cpu_has_fast_bf16()
    elif flags and not flags & {"avx512f", "asimd"}:  # AVX2 only: no oneDNN bf16 either
        assert not cpu_has_fast_bf16()


def one_error_line(err: str, command: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"electra {command}: error: --precision bf16: this CPU has no "
                               "native bf16")
    return lines[0]


def test_pretrain_finetune_multitask_and_score_refuse(slow_cpu, data_dir, tiny_model, tmp_path,
                                                      capsys):
    """Each command refuses before it writes anything."""
    commands = {
        "pretrain": ["--data", str(data_dir), "--steps", "1"],
        "finetune": ["--model", str(tiny_model), "--task", "SST-2", "--data", str(tmp_path)],
        "multitask": ["--model", str(tiny_model), "--tasks", "RTE,SST-2", "--data",
                      str(tmp_path)],
    }
    for command, argv in commands.items():
        out = tmp_path / command
        capsys.readouterr()
        assert main([command, *argv, "--out", str(out), "--bf16", "--device", "cpu"]) == 1
        one_error_line(capsys.readouterr().err, command)
        assert not out.exists()
    texts = tmp_path / "texts.txt"
    texts.write_text("a line\n")
    assert main(["score", "--model", str(tiny_model), "--input", str(texts), "--out",
                 str(tmp_path / "scores.jsonl"), "--bf16", "--device", "cpu"]) == 1
    one_error_line(capsys.readouterr().err, "score")


def test_auto_precision_trains_bf16_where_it_is_native_and_records_it(fast_cpu, data_dir,
                                                                       tmp_path):
    """`--precision auto` (the default) takes bf16 on a CPU with native bf16, fp32 where
    asked; settings.json records the precision used, never `auto`."""
    base = ["pretrain", "--preset", "tiny", "--data", str(data_dir), "--steps", "1",
            "--device", "cpu", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "auto")]) == 0
    assert main([*base, "--out", str(tmp_path / "fp32"), "--fp32"]) == 0
    for name, expected in (("auto", "bf16"), ("fp32", "fp32")):
        saved = json.loads((tmp_path / name / "settings.json").read_text())
        assert saved["train"]["precision"] == expected


def test_auto_precision_is_fp32_where_bf16_is_not_native(slow_cpu):
    from electra.precision import resolve_precision

    assert resolve_precision("auto", torch.device("cpu")) == "fp32"


def test_help_mentions_the_refusal(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    assert ALLOW_SLOW_BF16 in " ".join(capsys.readouterr().out.split())


# --- benchmarks/pretrain_throughput.py ----------------------------------------------------


def _throughput_module():
    return importlib.import_module("benchmarks.pretrain_throughput")


def test_throughput_benchmark_skips_bf16_on_a_slow_cpu(slow_cpu):
    bench = _throughput_module()
    modes, skipped = bench.runnable_modes(["fp32", "bf16"])
    assert modes == ["fp32"]
    assert set(skipped) == {"bf16", "accuracy_check"}
    assert "no native bf16" in skipped["bf16"] and ALLOW_SLOW_BF16 in skipped["bf16"]
    assert bench.runnable_modes(["fp32"]) == (["fp32"], {"accuracy_check": skipped[
        "accuracy_check"]})


def test_throughput_benchmark_runs_bf16_on_a_fast_cpu(fast_cpu):
    assert _throughput_module().runnable_modes(["fp32", "bf16"]) == (["fp32", "bf16"], {})


@pytest.mark.parametrize("flag", ["--settings-repeats", "--settings-rounds", "--rounds"])
def test_throughput_benchmark_rejects_zero_repeats(flag):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.pretrain_throughput", flag, "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"{flag} must be at least 1, got 0" in proc.stderr
    assert not proc.stdout.strip() or json.loads(proc.stdout) is None


def test_throughput_benchmark_device_report_runs_on_cpu():
    """The --device cuda report's code, run on CPU at the smallest sizes (no GPU here): every
    side (the whole step eagerly, the peers at their tiny shape), the step FLOPs of
    electra.flops, the matmul ceiling at the step's shapes, and no memory or profile figure off
    CUDA. Nothing is timed."""
    import argparse

    from electra.config import PretrainConfig
    from electra.objectives import objective_step_flops

    bench = _throughput_module()
    args = argparse.Namespace(batch_size=2, vocab_size=300, rounds=1, warmup=0, compile=False,
                              compile_step=True, peers=True, no_padding=False,
                              peak_tflops=bench.H100_BF16_DENSE_TFLOPS)
    report = bench.device_report(args, ["tiny"], [16], ["fp32"], torch.device("cpu"))
    (run,) = report["runs"]
    cfg = PretrainConfig.from_preset("tiny")
    cfg.model.vocab_size = 300
    assert run["step_flops"] == sum(objective_step_flops(cfg.model, cfg.objective, 2,
                                                         16).values())
    sides = ("ours", "ours_step", "ref", "bert_mlm", "modernbert_mlm")
    assert report["settings"]["sides"] == list(sides)
    for side in sides:
        assert run[side]["tokens_per_s"] > 0 and run[side]["mfu"] > 0, run[side]
        assert run[side]["mfu_backward_2x"] == pytest.approx(1.5 * run[side]["mfu"], rel=1e-3)
        assert run[side]["peak_memory_gib"] is None and run[side]["gpu_busy"] is None
    assert run["ours_step"]["compiled"] is False  # compiled on CUDA only
    for peer in ("bert_mlm", "modernbert_mlm"):  # their own FLOPs, at the tiny shape
        assert 0 < run[peer]["step_flops"] < run["step_flops"]
        assert run[peer]["attn_implementation"] == "sdpa"
    assert set(run["vs_ours"]) == {
        "ours_over_ref", "ours_over_bert_mlm", "ours_over_modernbert_mlm", "ours_step_over_ours",
        "ours_step_over_ref", "ours_step_over_bert_mlm", "ours_step_over_modernbert_mlm"}
    assert run["ours_over_ref"] == run["vs_ours"]["ours_over_ref"]
    ceiling = run["matmul_ceiling"]
    assert ceiling["dtype"] == "float32" and ceiling["ceiling_tflops"] > 0
    assert ceiling["shapes"]["disc_qkv"]["mkn"] == [32, 128, 384]  # 2 x 16 tokens, H 128
    assert ceiling["shapes"]["gen_vocab"]["mkn"] == [2 * 2, 128, 300]  # 2 slots per row
    tflops = [s["tflops"] for s in ceiling["shapes"].values()]
    assert min(tflops) <= ceiling["ceiling_tflops"] <= max(tflops)
    assert "989" in report["settings"]["peak_tflops_is"]


def test_throughput_benchmark_records_a_failing_side_and_runs_the_others(monkeypatch):
    """A side that raises (a compile failure on the GPU) is recorded as its error; the sides
    after it still run."""
    import argparse

    bench = _throughput_module()

    def broken(*args, **kwargs):
        raise RuntimeError("no graph today")

    monkeypatch.setattr(bench, "make_whole_step", broken)
    args = argparse.Namespace(batch_size=2, vocab_size=300, rounds=1, warmup=0, compile=False,
                              compile_step=True, peers=False, no_padding=False,
                              peak_tflops=bench.H100_BF16_DENSE_TFLOPS)
    (run,) = bench.device_report(args, ["tiny"], [16], ["fp32"], torch.device("cpu"))["runs"]
    assert run["ours_step"] == {"error": "RuntimeError: no graph today"}
    assert run["ref"]["tokens_per_s"] > 0
    assert set(run["vs_ours"]) == {"ours_over_ref"}


# --- benchmarks/cpu_step.py --------------------------------------------------------------


def test_cpu_step_benchmark_reports_both_samplers_and_restores_ours(capsys):
    """--quick on the tiny preset: each sampler timed on the same batches, utilisation is
    achieved / the matmul peak measured in the run, and the Gumbel patch is undone."""
    from electra.objectives import generators

    bench = importlib.import_module("benchmarks.cpu_step")
    ours = generators.categorical_sample
    report = bench.main(["--quick", "--samplers", "gumbel,categorical", "--threads", "1"])
    assert generators.categorical_sample is ours
    fp32 = report["modes"]["fp32"]
    peak = fp32["matmul_peak"]["weighted_gflops"]
    for entry in fp32["samplers"].values():
        assert len(entry["steps_s"]) == 2
        assert entry["utilisation_of_matmul_peak"] == pytest.approx(  # both rounded
            entry["achieved_gflops"] / peak, rel=0.02)
        # achieved is rounded to 0.1 and the median to 1e-4 s: allow for both roundings
        median = entry["median_step_s"]
        assert entry["achieved_gflops"] == pytest.approx(
            report["step_gflop"] / median, abs=0.051 + report["step_gflop"] * 5e-5 / median**2)
    assert set(fp32["speedup_vs_gumbel"]) == {"gumbel", "categorical"}
    assert "aten::mm" in fp32["profile_top_self_cpu_share"] or "aten::addmm" in fp32[
        "profile_top_self_cpu_share"]
    assert json.loads(capsys.readouterr().out) == report


def test_the_encoders_own_kernel_devices_are_the_backends_without_fused_kernels():
    from electra.device import BACKENDS
    from electra.model.encoder import _OWN_KERNELS

    assert _OWN_KERNELS == {n for n, b in BACKENDS.items() if not b.fused_kernels}

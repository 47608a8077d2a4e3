"""The GPU profile's CPU dry run: every part of `benchmarks.gpu_profile` at toy sizes, so the
run on a GPU machine cannot fail on a typo."""

from __future__ import annotations

import json

import pytest
from torch import nn

from benchmarks import gpu_profile
from electra.model.encoder import MIN_RECOMPILE_LIMIT, compile_layers


@pytest.mark.slow  # ~15 s of CPU: toy steps, profiles and batch sizes
def test_cpu_dry_run_runs_every_part(tmp_path):
    parts = "launch,profile,batch_scaling,graphed"  # profile_compiled: compiling takes a minute
    report = gpu_profile.main(["--cpu-dry-run", "--out", str(tmp_path), "--parts", parts])
    got = report["parts"]
    assert {name: p["ok"] for name, p in got.items()} == dict.fromkeys(parts.split(","), True), got
    assert got["launch"]["add_"]["us_per_launch_done"] > 0
    for key in ("tiny/ours", "tiny/ref"):
        profiled = got["profile"][key]
        assert profiled["step_ms"] > 0 and profiled["top_level_ops_per_step"] > 100
        assert profiled["kernels_per_step"] == 0  # no GPU: no kernels, and none invented
    assert set(got["batch_scaling"]) == {"2", "4", "ok", "seconds"}
    assert got["graphed"]["eager_ms"] > 0 and got["graphed"]["graph_ms"] is None
    written = json.loads((tmp_path / "gpu_profile.json").read_text())
    assert set(written["parts"]) == set(parts.split(","))


def test_compile_layers_raises_the_recompile_limit():
    """One code object serves every layer; the generator's and discriminator's widths, train and
    eval, padded and unpadded batches are separate graphs, more than torch's default 8."""
    import torch._dynamo

    name = next(n for n in ("recompile_limit", "cache_size_limit")
                if hasattr(torch._dynamo.config, n))
    before = getattr(torch._dynamo.config, name)
    try:
        setattr(torch._dynamo.config, name, 8)
        assert compile_layers(nn.Sequential(nn.Linear(2, 2))) == 0
        assert getattr(torch._dynamo.config, name) == MIN_RECOMPILE_LIMIT
    finally:
        setattr(torch._dynamo.config, name, before)

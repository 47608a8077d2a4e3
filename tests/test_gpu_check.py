"""The GPU check's CPU dry run: every stage of `benchmarks.gpu_check` at toy sizes, so the run
on a GPU machine cannot fail on a typo."""

from __future__ import annotations

import json

import pytest

from benchmarks import gpu_check

pytestmark = pytest.mark.skipif(not (gpu_check.SHARED / "corpus").is_dir(),
                                reason="needs ../shared/data (corpus and GLUE SST-2)")


@pytest.mark.slow  # ~2 min of CPU: vocabulary, packing, throughput, 20 steps, 2 fine-tunings
def test_cpu_dry_run_runs_every_stage(tmp_path):
    report = gpu_check.main(["--cpu-dry-run", "--out", str(tmp_path / "out"), "--work",
                             str(tmp_path / "work")])
    stages = report["stages"]
    assert {name: s["ok"] for name, s in stages.items()} == {
        "throughput": True, "pretrain": True, "curves": True, "finetune": True}, stages
    run = stages["throughput"]["runs"][0]
    sides = ["ours", "ours_step", "ref", "bert_mlm", "modernbert_mlm"]
    assert stages["throughput"]["settings"]["sides"] == sides  # no compiled layers on CPU
    for side in sides:
        assert run[side]["tokens_per_s"] > 0 and run[side]["mfu"] > 0, run[side]
        assert run[side]["mfu_backward_2x"] > run[side]["mfu"]
        assert run[side]["gpu_busy"] is None  # profiled on CUDA only
    assert run["ours_step"]["compiled"] is False  # the whole step eagerly: same code, no graph
    for peer in ("bert_mlm", "modernbert_mlm"):  # the tiny shapes, their own FLOPs
        assert run[peer]["params_non_embedding"] < 200_000 and run[peer]["step_flops"] > 0
    assert run["vs_ours"]["ours_step_over_ours"] > 0 and run["vs_ours"]["ours_over_ref"] > 0
    ceiling = run["matmul_ceiling"]
    assert ceiling["dtype"] == "float32" and ceiling["ceiling_tflops"] > 0
    assert set(ceiling["shapes"]) == {f"{net}_{op}" for net in ("disc", "gen") for op in (
        "qkv", "attn_out", "ffn_in", "ffn_out")} | {"gen_vocab"}
    assert stages["pretrain"]["steps"] == 20
    assert stages["pretrain"]["heldout_probes"][-1]["step"] == 20
    assert "heldout_auc_unigram" in stages["pretrain"]["heldout_probes"][-1]
    assert set(stages["finetune"]) >= {"pretrained", "random_init"}
    assert (tmp_path / "out" / "pretrain_curves.png").stat().st_size > 0
    written = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert {n: s["ok"] for n, s in written["stages"].items()} == {n: True for n in stages}

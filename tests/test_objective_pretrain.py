"""Every objective and option pre-trains end to end through `electra pretrain` and
exports Hugging Face directories that `electra.model.hf.load_encoder` reads."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_train import TINY, pretrain_argv, read_metrics

from electra.cli import main
from electra.model.hf import load_encoder, load_pretrained
from electra.runtime import checkpoint

try:
    import transformers
except ImportError:  # the HF check is skipped without transformers
    transformers = None

STEPS = 4

# name -> (objective overrides, exported names in order, metric keys expected in the log)
CASES: dict[str, tuple[dict, list[str], set[str]]] = {
    "mlm": ({"name": "mlm"}, ["model"], {"mlm_loss", "mlm_acc"}),
    "electra-15": ({"name": "electra-15"}, ["discriminator", "generator"],
                   {"gen_loss", "disc_loss", "disc_acc", "gen_acc"}),
    "replace-mlm": ({"name": "replace-mlm"}, ["model", "generator"],
                    {"gen_loss", "mlm_loss", "mlm_acc", "replaced_frac"}),
    "all-tokens-mlm": ({"name": "all-tokens-mlm"}, ["model", "generator"],
                       {"gen_loss", "mlm_loss", "mlm_acc"}),
    "unigram": ({"generator": "unigram", "temperature": 0.5}, ["discriminator"],
                {"disc_loss", "replaced_frac"}),
    "gdes-deep2-disallow": ({"sharing": "gdes", "generator_layers": 1,
                             "disallow_correct": True},
                            ["discriminator", "generator"], {"gen_loss", "disc_loss"}),
    "sharing-all": ({"sharing": "all", "generator_multiplier": 1.0},
                    ["discriminator", "generator"], {"gen_loss", "disc_loss"}),
    "sharing-none": ({"sharing": "none"}, ["discriminator", "generator"],
                     {"gen_loss", "disc_loss"}),
    "two-stage": ({"algorithm": "two-stage", "generator_multiplier": 1.0},
                  ["discriminator", "generator"], {"gen_loss", "disc_loss"}),
    "adversarial": ({"algorithm": "adversarial"}, ["discriminator", "generator"],
                    {"gen_loss", "disc_loss", "adv_loss", "baseline_loss"}),
}


def config_file(directory: Path, objective: dict, **train) -> Path:
    cfg = copy.deepcopy(TINY)
    cfg["objective"] = {**cfg["objective"], **objective}
    cfg["train"].update({"steps": STEPS, "log_every": 2, "save_every": 2, **train})
    path = directory / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_objective_pretrains_and_exports_hf_dirs(case, data_dir, tmp_path):
    objective, names, metrics = CASES[case]
    out = tmp_path / "out"
    assert main(pretrain_argv(config_file(tmp_path, objective), data_dir, out)) == 0
    records = read_metrics(out)
    assert [r["step"] for r in records] == [2, 4]
    assert metrics <= set(records[-1]), set(records[-1])
    assert all(r["flops"] > 0 for r in records)
    assert sorted(p.name for p in (out / "final").iterdir()) == sorted(names)
    for name in names:
        encoder = load_encoder(out / "final" / name)
        assert encoder.config.vocab_size > 100
        model = load_pretrained(out / "final" / name)  # the HF head loads too
        assert type(model).__name__ == ("Generator" if name in ("model", "generator")
                                        else "Discriminator")
    config = json.loads((out / "final" / names[0] / "config.json").read_text())
    assert config["electra_toolkit"]["objective"] == objective.get("name", "electra")
    if transformers is not None:
        for name in names:
            cls = (transformers.ElectraForMaskedLM if name in ("model", "generator")
                   else transformers.ElectraForPreTraining)
            _, info = cls.from_pretrained(out / "final" / name, output_loading_info=True)
            assert not info["missing_keys"] and not info["unexpected_keys"], (name, info)


def test_objective_flag_selects_the_objective(data_dir, tmp_path):
    out = tmp_path / "out"
    argv = pretrain_argv(config_file(tmp_path, {}), data_dir, out, "--objective", "mlm")
    assert main(argv) == 0
    assert json.loads((out / "settings.json").read_text())["objective"]["name"] == "mlm"
    assert (out / "final" / "model" / "model.safetensors").is_file()


def test_two_stage_logs_generator_then_discriminator_losses(data_dir, tmp_path):
    out = tmp_path / "out"
    cfg = config_file(tmp_path, CASES["two-stage"][0], log_every=1)
    assert main(pretrain_argv(cfg, data_dir, out)) == 0
    records = read_metrics(out)
    assert ["disc_loss" in r for r in records] == [False, False, True, True]
    # stage 1 trains the generator only: the loss is its MLM loss
    assert records[0]["loss"] == pytest.approx(records[0]["gen_loss"])


def test_two_stage_resume_after_the_switch_is_bit_exact(data_dir, tmp_path):
    """Interrupted right after the step-2 checkpoint (the switch happens at step 2), resumed:
    the discriminator is not re-initialised, the result equals the uninterrupted run."""
    cfg = config_file(tmp_path, CASES["two-stage"][0])
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(pretrain_argv(cfg, data_dir, full)) == 0
    real_commit = checkpoint.commit

    def commit(tmp, out_dir, step, meta, keep, **kwargs):
        final = real_commit(tmp, out_dir, step, meta, keep, **kwargs)
        if step == 2:
            raise KeyboardInterrupt
        return final

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoint, "commit", commit)
        assert main(pretrain_argv(cfg, data_dir, part)) == 130
    assert main(pretrain_argv(cfg, data_dir, part, "--resume")) == 0
    for name in ("discriminator", "generator"):
        a = load_file(str(full / "final" / name / "model.safetensors"))
        b = load_file(str(part / "final" / name / "model.safetensors"))
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), f"{name}: {key}"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["two-stage", "gdes-deep2-disallow", "mlm"])
def test_objective_under_two_processes(case, data_dir, tmp_path):
    """DDP (gloo, 2 CPU processes): a stage that leaves a network idle (two-stage) and the
    detached shared table (GDES) train without DDP reduction errors."""
    import os
    import subprocess
    import sys

    cfg = config_file(tmp_path, CASES[case][0])
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", "-m", "electra.cli", *pretrain_argv(cfg, data_dir, out, "--device", "cpu")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in read_metrics(out)] == [2, 4]
    for name in CASES[case][1]:
        load_encoder(out / "final" / name)

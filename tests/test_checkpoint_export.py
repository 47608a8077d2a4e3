"""Every pre-training checkpoint is a model: `electra export` writes it as the run's end writes
OUT/final, `finetune --model` and `pretrain --init-from` take it, and `train.keep_every` keeps
the points of a learning curve beside the rolling checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_finetune_e2e import _user_data
from test_robustness import checkpoint_steps
from test_train import STEPS, one_error_line, pretrain_argv, tiny_config_file

from electra.cli import main
from electra.model.hf import load_pretrained
from electra.pretraining.checkpoint_export import export_dir, model_dir
from electra.pretraining.init_from import find_source
from electra.runtime import checkpoint

KEEP_EVERY = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """STEPS steps, a checkpoint every 2, the 2 newest kept and every KEEP_EVERY-th."""
    out = tmp_path_factory.mktemp("run") / "out"
    config = tiny_config_file(tmp_path_factory.mktemp("config"))
    assert main(pretrain_argv(config, data_dir, out, "--keep-every", str(KEEP_EVERY))) == 0
    return out


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_keep_every_keeps_the_curve_beside_the_newest(run: Path):
    # saved at 2, 4, 6, 8; the rolling two are 6 and 8; 4 is a multiple of KEEP_EVERY
    assert checkpoint_steps(run) == [4, 6, 8]
    assert json.loads((run / "settings.json").read_text())["train"]["keep_every"] == KEEP_EVERY


def test_the_last_checkpoint_exports_exactly_as_the_final_export(run: Path, capsys):
    capsys.readouterr()
    assert main(["export", str(run), "--step", str(STEPS)]) == 0
    dest = run / "exports" / f"step_{STEPS:08d}"
    assert capsys.readouterr().out.strip() == str(dest)
    final, exported = files_of(run / "final"), files_of(dest)
    cards = {name for name in final if name.endswith("/README.md")}
    assert cards == {name for name in exported if name.endswith("/README.md")}
    # the card names the step
    assert f"step_{STEPS:08d}".encode() in exported["discriminator/README.md"]
    for name in cards:
        del final[name], exported[name]
    assert final and exported == final  # byte for byte, config.json included
    assert main(["export", str(dest.parent.parent / "checkpoints" / dest.name)]) == 0
    assert capsys.readouterr().out.strip() == str(dest)  # written once, then named


def test_an_intermediate_checkpoint_exports_its_weights(run: Path, tmp_path: Path):
    """The export of step 4 holds the checkpoint's discriminator weights exactly, and
    transformers loads it with no missing weight."""
    transformers = pytest.importorskip("transformers")
    ckpt = checkpoint.step_dir(run, 4)
    dest = tmp_path / "step4"
    assert main(["export", str(ckpt), "--hf", str(dest)]) == 0
    assert sorted(p.name for p in dest.iterdir()) == ["discriminator", "generator"]
    saved = load_file(str(ckpt / "model.safetensors"))
    exported = load_pretrained(dest / "discriminator").state_dict()
    ours = {k.removeprefix("discriminator."): v for k, v in saved.items()
            if k.startswith("discriminator.")}
    assert ours.keys() == exported.keys()
    for key, value in ours.items():
        assert torch.equal(value, exported[key]), key
    assert not torch.equal(exported["electra.embeddings.word_embeddings.weight"],
                           load_pretrained(run / "final" / "discriminator").state_dict()[
                               "electra.embeddings.word_embeddings.weight"])
    model, info = transformers.AutoModel.from_pretrained(dest / "discriminator",
                                                         output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert type(model).__name__ == "ElectraModel"


def test_finetune_and_init_from_take_a_checkpoint(run: Path, tmp_path: Path, capsys):
    ckpt = checkpoint.step_dir(run, 4)
    _user_data(tmp_path / "train.tsv", 32, 0)
    _user_data(tmp_path / "dev.tsv", 8, 1)
    out = tmp_path / "ft"
    assert main(["finetune", "--model", str(ckpt), "--task", "user", "--text-a", "text",
                 "--label", "label", "--data", str(tmp_path), "--out", str(out),
                 "--batch-size", "8", "--epochs", "1", "--quiet"]) == 0
    export = export_dir(ckpt)
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == str(export / "discriminator")  # what it fine-tuned from
    assert (out / "model" / "config.json").is_file()
    assert model_dir(ckpt) == export

    source = find_source(ckpt, None, "electra")
    assert (source.main, source.generator) == (export / "discriminator", export / "generator")
    assert source.main_head == "discriminator"


def test_settings_without_keep_every_still_export_and_resume(run: Path, tmp_path: Path,
                                                             data_dir: Path, capsys):
    """A run written before `train.keep_every` existed (no such key in settings.json)."""
    import shutil

    old = tmp_path / "old"
    shutil.copytree(run, old, ignore=shutil.ignore_patterns("exports", "final"))
    settings = json.loads((old / "settings.json").read_text())
    del settings["train"]["keep_every"]
    (old / "settings.json").write_text(json.dumps(settings))
    assert main(["export", str(old), "--step", "6"]) == 0
    assert (old / "exports" / "step_00000006" / "discriminator" / "config.json").is_file()
    capsys.readouterr()
    assert main(["pretrain", "--config", str(old / "settings.json"), "--data", str(data_dir),
                 "--out", str(old), "--quiet", "--resume"]) == 0
    assert (old / "final" / "discriminator").is_dir()


def test_export_refuses_what_is_not_a_checkpoint(run: Path, tmp_path: Path, capsys):
    capsys.readouterr()
    assert main(["export", str(run), "--step", "2"]) == 1
    assert one_error_line(capsys.readouterr().err, "export") == (
        f"electra export: error: {run / 'checkpoints' / 'step_00000002'}: no checkpoint of step "
        "2 (kept: step_00000004, step_00000006, step_00000008)")
    assert main(["export", str(tmp_path)]) == 1
    assert one_error_line(capsys.readouterr().err, "export") == (
        "electra export: error: give --onnx OUT, --hf OUT or --sentence-transformers OUT (or a "
        "pre-training checkpoint as MODEL)")


def test_keep_every_must_not_be_negative():
    from electra.config import TrainConfig
    from electra.errors import ElectraError

    with pytest.raises(ElectraError, match=r"^train.keep_every must be >= 0"):
        TrainConfig(keep_every=-1).validate()
    TrainConfig(keep_every=0).validate()

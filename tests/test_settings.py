"""One settings path for `pretrain`, `finetune`, `multitask` and `cvt` (`electra.settings`):
defaults, then `--config FILE`, then flags, then `--set SECTION.KEY=VALUE`, each merged with
types checked; the same errors for an unknown section or key everywhere; the settings used
written next to the run in the form `--config` reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.cli import build_parser, main
from electra.config import PretrainConfig
from electra.cvt.cli import train_settings
from electra.errors import ElectraError
from electra.finetuning.cli import _finetune_settings
from electra.finetuning.settings import FinetuneSettings
from electra.pretraining.cli import build_pretrain_config
from electra.settings import Source, resolve, write_settings

# One command line per training command, complete but for what the tests add; each fails on
# its settings before it reads a file.
COMMANDS = {
    "pretrain": (["pretrain", "--data", "nowhere", "--out", "{out}"], "train"),
    "finetune": (["finetune", "--model", "nowhere", "--task", "SST-2", "--data", "nowhere",
                  "--out", "{out}"], "finetune"),
    "multitask": (["multitask", "--model", "nowhere", "--tasks", "SST-2", "--data", "nowhere",
                   "--out", "{out}"], "multitask"),
    "cvt": (["cvt", "--tasks", "chunk", "--data", "nowhere", "--out", "{out}", "--no-cvt",
             "--steps", "1"], "cvt"),
}


def _argv(command: str, out: Path, *extra: str) -> list[str]:
    argv, _ = COMMANDS[command]
    return [a.replace("{out}", str(out)) for a in argv] + list(extra)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_training_command_takes_config_and_set(command):
    flags = {a.option_strings[0] for a in build_parser()._subparsers._group_actions[0]
             .choices[command]._actions if a.option_strings}
    assert {"--config", "--set"} <= flags


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unknown_key_or_section_is_the_same_one_line_error_everywhere(command, tmp_path,
                                                                         capsys):
    _, section = COMMANDS[command]
    out = tmp_path / "out"
    assert main(_argv(command, out, "--set", f"{section}.no_such_key=1")) == 1
    assert "unknown key 'no_such_key'" in capsys.readouterr().err
    assert main(_argv(command, out, "--set", "no_such_section.lr=1")) == 1
    err = capsys.readouterr().err
    assert "unknown section 'no_such_section'" in err and len(err.strip().splitlines()) == 1
    config = tmp_path / "settings.json"
    config.write_text(json.dumps({section: {"no_such_key": 1}}))
    assert main(_argv(command, out, "--config", str(config))) == 1
    assert f"{config}" in capsys.readouterr().err
    assert not out.exists()


def test_config_then_flags_then_set(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"finetune": {"batch_size": 8, "warmup_fraction": 0.2,
                                               "seeds": 4}}))
    args = build_parser().parse_args(_argv("finetune", tmp_path / "o", "--config", str(config),
                                           "--batch-size", "16",
                                           "--set", "finetune.warmup_fraction=0.3"))
    s, sources = _finetune_settings(args, train=True)
    assert sources.of("finetune.batch_size") == Source("flag", "--batch-size")
    assert sources.of("finetune.seeds") == Source("file", str(config))
    assert (s.batch_size, s.warmup_fraction, s.seeds) == (16, 0.3, 4)
    assert s.weight_decay == FinetuneSettings().weight_decay  # untouched: the default


def test_types_are_checked(tmp_path):
    with pytest.raises(ElectraError, match="expected int"):
        resolve({"finetune": FinetuneSettings()}, None, {}, ["finetune.batch_size=many"])


def test_written_settings_read_back_as_a_config(tmp_path):
    used = FinetuneSettings()
    resolve({"finetune": used}, None, {}, ["finetune.lr=0.002", "finetune.seeds=3"])
    write_settings(tmp_path, {"finetune": used})
    again = FinetuneSettings()
    resolve({"finetune": again}, tmp_path / "settings.json", {}, [])
    assert again == used


def test_cvt_sections_come_from_config_flags_and_set_with_their_sources(tmp_path):
    """`electra cvt` has a `train` section --set reaches (steps, seed, ...) beside `cvt`."""
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"preset": "small-cpu", "cvt": {"lstm1": 64, "lstm2": 32},
                                  "train": {"seed": 4, "save_every": 7}}))
    args = build_parser().parse_args(_argv("cvt", tmp_path / "o", "--config", str(config),
                                           "--set", "cvt.lstm2=16", "--set", "train.steps=3",
                                           "--seed", "5"))
    s = train_settings(args)
    assert (s.config.lstm1, s.config.lstm2, s.config.cvt_weight) == (64, 16, 0.25)
    assert (s.steps, s.seed, s.save_every, s.cvt) == (3, 5, 7, False)  # --no-cvt, a flag
    assert s.sources.of("train.steps") == Source("set", "--set train.steps=3")
    assert s.sources.of("train.seed") == Source("flag", "--seed")
    assert s.sources.of("train.save_every") == Source("file", str(config))
    assert s.sources.of("cvt.cvt_weight") == Source("preset", f"{config}: preset")
    assert s.sources.of("train.precision").kind == "default"
    args.set = ["cvt.lstm2=wide"]
    with pytest.raises(ElectraError, match="--set cvt.lstm2=wide"):
        train_settings(args)


def test_pretrain_sources_name_the_preset_file_flag_and_set(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"train": {"seed": 4}, "objective": {"mask_prob": 0.2}}))
    args = build_parser().parse_args(_argv("pretrain", tmp_path / "o", "--preset", "small",
                                           "--config", str(config), "--lr", "0.1",
                                           "--set", "objective.mask_prob=0.25"))
    cfg, sources, source = build_pretrain_config(args)
    assert source is None and cfg.preset == "small" and cfg.train.learning_rate == 0.1
    assert sources.of("model.hidden_size") == Source("preset", "--preset small")
    assert sources.of("train.seed") == Source("file", str(config))
    assert sources.of("train.learning_rate") == Source("flag", "--lr")
    assert sources.of("objective.mask_prob") == Source("set", "--set objective.mask_prob=0.25")
    assert sources.given() == {"train.seed": str(config), "train.learning_rate": "--lr",
                               "objective.mask_prob": "--set objective.mask_prob=0.25"}


def test_flops_reads_a_run_settings_file(tmp_path, capsys):
    """`electra flops --config OUT/settings.json` counts that configuration; --set reaches
    every section."""
    settings = PretrainConfig.from_preset("tiny-modern")
    settings.train.steps, settings.model.vocab_size = 7, 1000
    write_settings(tmp_path, settings.to_dict())
    assert main(["flops", "--config", str(tmp_path / "settings.json"), "--seq-len", "64"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["preset"], report["steps"], report["vocab_size"]) == ("tiny-modern", 7, 1000)
    # the preset's own generator (half as deep), as `electra pretrain` counts it
    assert report["objective_config"]["generator_layers"] == \
        settings.objective.generator_layers == settings.model.num_hidden_layers // 2
    assert main(["flops", "--preset", "tiny", "--set", "train.batch_size=3"]) == 0
    assert json.loads(capsys.readouterr().out)["batch_size"] == 3
    # tiny-local's base-rate bias is for training ELECTRA; a count takes any objective
    assert main(["flops", "--preset", "tiny-local", "--objective", "mlm"]) == 0
    assert json.loads(capsys.readouterr().out)["objective_config"]["disc_bias_init"] == "zero"


def test_a_rerun_from_its_settings_file_is_byte_identical(data_dir, tmp_path):
    """`--config OUT/settings.json` on the same data reproduces the run exactly."""
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["pretrain", "--preset", "tiny", "--data", str(data_dir), "--out", str(first),
                 "--steps", "5", "--batch-size", "4", "--seed", "7", "--eval-every", "0",
                 "--set", "model.num_hidden_layers=2", "--quiet", "--device", "cpu"]) == 0
    assert main(["pretrain", "--config", str(first / "settings.json"), "--data", str(data_dir),
                 "--out", str(again), "--quiet", "--device", "cpu"]) == 0
    assert (first / "settings.json").read_text() == (again / "settings.json").read_text()
    for name in ("discriminator", "generator"):
        assert ((first / "final" / name / "model.safetensors").read_bytes()
                == (again / "final" / name / "model.safetensors").read_bytes())
    run = json.loads((first / "run.json").read_text())
    assert run["sources"]["train.steps"] == "flag: --steps"
    assert run["data"] == str(data_dir) and run["settings"] == "settings.json"
    meta = json.loads((first / "checkpoints" / "step_00000005" / "meta.json").read_text())
    assert (meta["settings"], meta["run"]) == ("settings.json", "run.json")
    assert "config" not in meta  # it points to the run's files instead of copying them


def _sst2(folder: Path) -> Path:
    (folder / "SST-2").mkdir(parents=True)
    rows = [f"a {'good' if i % 2 else 'bad'} film number {i}\t{i % 2}" for i in range(24)]
    for split in ("train", "dev"):
        (folder / "SST-2" / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows)
                                                       + "\n")
    return folder


def test_finetune_writes_the_settings_it_used(tiny_model, tmp_path, capsys):
    data = _sst2(tmp_path / "glue")
    out = tmp_path / "ft"
    assert main(["finetune", "--model", str(tiny_model), "--task", "SST-2", "--data", str(data),
                 "--out", str(out), "--epochs", "1", "--batch-size", "8", "--device", "cpu",
                 "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    run = json.loads((out / "run.json").read_text())
    assert (run["model"], run["task"], run["data"]) == (str(tiny_model), "SST-2", str(data))
    assert run["sources"]["finetune.batch_size"] == "flag: --batch-size"
    written = json.loads((out / "settings.json").read_text())["finetune"]
    assert written == {k: res["settings"][k] for k in written}
    assert written["lr"] == res["settings"]["lr"] is not None  # resolved from the size
    again = FinetuneSettings()
    resolve({"finetune": again}, out / "settings.json", {}, [])
    assert again.lr == written["lr"] and again.size == written["size"]

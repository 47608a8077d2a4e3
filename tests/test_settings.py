"""One settings path for `pretrain`, `finetune`, `multitask` and `cvt` (`electra.settings`):
defaults, then `--config FILE`, then flags, then `--set SECTION.KEY=VALUE`, each merged with
types checked; the same errors for an unknown section or key everywhere; the settings used
written next to the run in the form `--config` reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.cli import build_parser, main
from electra.cvt.config import CVTConfig
from electra.errors import ElectraError
from electra.finetune.cli import _finetune_settings
from electra.finetune.run import finetune
from electra.finetune.settings import FinetuneSettings
from electra.settings import overrides, resolve, write_settings

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
    s = _finetune_settings(args, train=True)
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


def test_cvt_overrides_come_from_config_and_set(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"cvt": {"lstm1": 64, "lstm2": 32}}))
    assert overrides(config, ["cvt.lstm2=16"], "cvt", CVTConfig()) == {"lstm1": 64, "lstm2": 16}
    with pytest.raises(ElectraError, match="--set cvt.lstm2=wide"):
        overrides(config, ["cvt.lstm2=wide"], "cvt", CVTConfig())


def _sst2(folder: Path) -> Path:
    (folder / "SST-2").mkdir(parents=True)
    rows = [f"a {'good' if i % 2 else 'bad'} film number {i}\t{i % 2}" for i in range(24)]
    for split in ("train", "dev"):
        (folder / "SST-2" / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows)
                                                       + "\n")
    return folder


def test_finetune_writes_the_settings_it_used(tiny_model, tmp_path):
    data = _sst2(tmp_path / "glue")
    out = tmp_path / "ft"
    res = finetune(tiny_model, "SST-2", data, out, FinetuneSettings(epochs=1, batch_size=8,
                                                                    device="cpu"))
    written = json.loads((out / "settings.json").read_text())["finetune"]
    assert written == {k: res["settings"][k] for k in written}
    assert written["lr"] == res["settings"]["lr"] is not None  # resolved from the size
    again = FinetuneSettings()
    resolve({"finetune": again}, out / "settings.json", {}, [])
    assert again.lr == written["lr"] and again.size == written["size"]

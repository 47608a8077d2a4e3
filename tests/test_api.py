"""The Python API (`electra.api`): the commands as functions of the package. Importing them is
cheap (no torch until one runs), keyword arguments parse exactly as the flags do, argparse's
checks become one-line `ElectraError`s, and a call returns what the command prints."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import electra
import electra.api
from electra.api import COMMANDS, ExportResult
from electra.cli import build_parser, main
from electra.errors import ElectraError
from electra.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
TINY = {"model.embedding_size": 16, "model.hidden_size": 32, "model.num_hidden_layers": 2,
        "model.intermediate_size": 64, "model.max_position_embeddings": 64}


def fresh_python(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    return json.loads(out.splitlines()[-1])


def test_importing_the_commands_imports_no_torch():
    seen = fresh_python(
        "import inspect, json, sys\n"
        "import electra\n"
        "loaded_on_import = sorted(m for m in sys.modules if m.startswith('electra.'))\n"
        "from electra import pretrain, finetune, score\n"
        "print(json.dumps({'on_import': loaded_on_import, 'torch': 'torch' in sys.modules,\n"
        "    'tasks': 'electra.tasks' in sys.modules,\n"
        "    'callable': [callable(f) for f in (pretrain, finetune, score)],\n"
        "    'same': [pretrain is electra.pretrain, finetune is electra.finetune],\n"
        "    'takes': ['out' in inspect.signature(f).parameters\n"
        "              for f in (pretrain, finetune, score)]}))\n")
    assert seen == {"on_import": ["electra.version"], "torch": False, "tasks": False,
                    "callable": [True] * 3, "same": [True, True], "takes": [True] * 3}


def test_the_command_code_lives_in_plain_packages_and_old_paths_are_refused_in_one_line():
    """`electra.pretrain` is the function; its code is the plain package `electra.pretraining`
    (and `electra.finetuning`, `electra.exporting`); an old import path names the new one."""
    seen = fresh_python(
        "import json, types\n"
        "import electra.pretraining.loop\n"
        "import electra.finetuning.predict as predict\n"
        "from electra.exporting import serving\n"
        "from electra import export, finetune, pretrain\n"
        "import electra.api\n"
        "try:\n"
        "    import electra.finetune.predict\n"
        "    refused = None\n"
        "except ModuleNotFoundError as e:\n"
        "    refused = str(e)\n"
        "print(json.dumps({\n"
        "    'modules': [electra.pretraining.loop.__name__, predict.__name__, serving.__name__],\n"
        "    'plain': [type(electra.pretraining) is types.ModuleType,\n"
        "              type(electra.exporting) is types.ModuleType],\n"
        "    'functions': [f is getattr(electra.api, f.__name__) for f in\n"
        "                  (pretrain, finetune, export)],\n"
        "    'refused': refused}))\n")
    assert seen == {"modules": ["electra.pretraining.loop", "electra.finetuning.predict",
                                "electra.exporting.serving"],
                    "plain": [True, True], "functions": [True] * 3,
                    "refused": "electra.finetune is now electra.finetuning (electra.finetune is "
                               "the command's function)"}


def test_every_command_is_a_function_with_typed_keywords():
    """`electra.api` has a function for each `electra` command, its keywords typed from the
    options' declarations (`electra.command`)."""
    from typing import Literal

    commands = build_parser().subcommand_parsers
    assert sorted(COMMANDS[f].name for f in electra.api.FUNCTIONS) == sorted(commands)
    assert set(electra.api.FUNCTIONS) <= set(electra.api.__all__)
    pretrain = inspect.signature(electra.api.pretrain).parameters
    assert pretrain["steps"].annotation == int | None
    assert pretrain["lr"].annotation == float | None
    assert pretrain["quiet"].annotation is bool
    assert pretrain["preset"].annotation == Literal[tuple(PRESETS)] | None
    assert pretrain["data"].annotation == str | os.PathLike
    assert pretrain["data"].default is inspect.Parameter.empty  # required
    assert inspect.signature(electra.api.flops).parameters["seq_len"].annotation == int | None


def test_flops_runs_as_a_function():
    assert electra.api.flops(preset="tiny", steps=10) == json.loads(
        subprocess.run([sys.executable, "-m", "electra.cli", "flops", "--preset", "tiny",
                        "--steps", "10"], capture_output=True, text=True, check=True,
                       cwd=ROOT).stdout)


def subcommand(name: str):
    return build_parser().subcommand_parsers[name]


@pytest.mark.parametrize("function", sorted(COMMANDS))
def test_each_function_takes_its_commands_flags(function):
    """The signature and docstring come from the command's declarations, so a new flag is a
    new keyword at once; this checks they are the `electra` command's own."""
    command = COMMANDS[function].name
    dests = list(subcommand(command).arguments)
    api = getattr(electra.api, function)
    assert list(inspect.signature(api).parameters) == dests
    if function in electra.__all__:
        assert inspect.signature(getattr(electra, function)) == inspect.signature(api)
    documented = [line.split(" ")[0].rstrip(",:") for line in api.__doc__.splitlines()
                  if line and not line[0].isspace()]
    assert [dest for dest in documented if dest in dests] == dests


@pytest.mark.parametrize("function,kwargs,argv", [
    ("pretrain", {"data": "d", "out": Path("o"), "preset": "tiny-local", "steps": 5,
                  "batch_size": "8", "lr": 1e-3, "precision": "fp32", "init_from": "runs/a",
                  "quiet": True, "set": {"train.seed": 3, "objective.disc_weight": 50.0}},
     ["pretrain", "--data", "d", "--out", "o", "--preset", "tiny-local", "--steps", "5",
      "--batch-size", "8", "--lr", "0.001", "--fp32", "--init-from", "runs/a", "--quiet",
      "--set", "train.seed=3", "--set", "objective.disc_weight=50.0"]),
    ("pretrain", {"data": "d", "out": "o", "resume": True},
     ["pretrain", "--data", "d", "--out", "o", "--resume"]),
    ("pretrain", {"data": "d", "out": "o", "resume": "auto"},
     ["pretrain", "--data", "d", "--out", "o", "--resume", "auto"]),
    ("pretrain", {"data": "d", "out": "o", "budget_flops": 1e16,
                  "set": ["model.hidden_size=32", "train.log_every=1"]},
     ["pretrain", "--data", "d", "--out", "o", "--budget-flops", "1e+16", "--set",
      "model.hidden_size=32", "--set", "train.log_every=1"]),
    ("prepare", {"corpus": Path("c.txt"), "tokenizer": "v", "out": "d", "seq_len": 64,
                 "workers": 1},
     ["prepare", "--corpus", "c.txt", "--tokenizer", "v", "--out", "d", "--seq-len", "64",
      "--workers", "1"]),
    ("train_vocab", {"corpus": ["a.txt", Path("b")], "out": "v", "vocab_size": 100,
                     "cased": True, "kind": "bpe"},
     ["vocab", "--corpus", "a.txt", "b", "--out", "v", "--vocab-size", "100", "--cased",
      "--kind", "bpe"]),
    ("train_vocab", {"corpus": "a.txt", "out": "v", "vocab_size": None, "cased": None},
     ["vocab", "--corpus", "a.txt", "--out", "v"]),
    ("pretrain", {"data": "d", "out": "o", "set": None, "steps": None, "quiet": None},
     ["pretrain", "--data", "d", "--out", "o"]),
    ("finetune", {"model": "m", "task": "user", "data": "d", "out": "o", "text_a": "review",
                  "label": "stars", "epochs": 2, "seeds": 3, "no_length_sort": True},
     ["finetune", "--model", "m", "--task", "user", "--data", "d", "--out", "o", "--text-a",
      "review", "--label", "stars", "--epochs", "2", "--seeds", "3", "--no-length-sort"]),
    ("export", {"model": "m", "hf": "o", "task": "RTE"},
     ["export", "m", "--hf", "o", "--task", "RTE"]),
    ("score", {"model": "g", "input": "s.txt", "out": "s.jsonl", "per_token": True,
               "scorer": "mlm", "batch_size": 4},
     ["score", "--model", "g", "--input", "s.txt", "--out", "s.jsonl", "--per-token",
      "--scorer", "mlm", "--batch-size", "4"]),
])
def test_keywords_give_what_the_command_line_parses(function, kwargs, argv):
    assert vars(COMMANDS[function].namespace(kwargs)) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("call,message", [
    (lambda: electra.pretrain(data="d", out="o", preset="huge"),
     f"pretrain: argument preset (--preset): invalid choice 'huge' (choose from "
     f"{', '.join(PRESETS)})"),
    (lambda: electra.pretrain(data="d", out="o", batchsize=8),
     "pretrain: unknown argument 'batchsize' (did you mean batch_size?); the arguments are the "
     "flags of `electra pretrain --help`"),
    (lambda: electra.pretrain(preset="tiny"),
     "pretrain: the following arguments are required: data (--data), out (--out)"),
    (lambda: electra.finetune(model="m", data="d", out="o"),
     "finetune: the following arguments are required: task (--task)"),
    (lambda: electra.pretrain(data="d", out="o", steps="many"),
     "pretrain: argument steps (--steps): expected a whole number, got 'many'"),
    (lambda: electra.pretrain(data="d", out="o", steps=2.5),
     "pretrain: argument steps (--steps): expected a whole number, got 2.5"),
    (lambda: electra.pretrain(data="d", out="o", quiet="yes"),
     "pretrain: argument quiet (--quiet): expected True or False, got 'yes'"),
    (lambda: electra.train_vocab(corpus="c", out="v", kind="bytes"),
     "vocab: argument kind (--kind): invalid choice 'bytes' (choose from wordpiece, unigram, "
     "bpe)"),
    (lambda: electra.export("m", onnx="a", hf="b"),
     "export: argument hf (--hf): not allowed with argument onnx (--onnx)"),
    (lambda: electra.export("m"),
     "give --onnx OUT, --hf OUT or --sentence-transformers OUT (or a pre-training checkpoint "
     "as MODEL)"),
    (lambda: electra.pretrain(data="d", out="o", set={"nosuch.key": 1}),
     "--set 'nosuch.key=1': unknown section 'nosuch' (known: model, objective, train)"),
    (lambda: electra.prepare(corpus="c.txt"),
     "give --tokenizer, --out (or --verify DIR, or --merge PART...)"),
])
def test_bad_arguments_are_one_line_errors(call, message):
    with pytest.raises(ElectraError) as raised:
        call()
    assert str(raised.value) == message


def test_an_error_reads_as_on_the_command_line(tmp_path, capsys):
    """A failure inside the command is the same ElectraError the CLI prints."""
    missing = tmp_path / "nope.txt"
    assert main(["vocab", "--corpus", str(missing), "--out", str(tmp_path / "v")]) == 1
    line = capsys.readouterr().err.strip()
    with pytest.raises(ElectraError) as raised:
        electra.train_vocab(corpus=missing, out=tmp_path / "v")
    assert line == f"electra vocab: error: {raised.value}"


def cli_stdout(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def without_timing(value, out: str):
    """A summary with its timings dropped and `out` written as OUT."""
    if isinstance(value, dict):
        return {k: without_timing(v, out) for k, v in value.items()
                if "seconds" not in k and not k.endswith("_per_s")}
    if isinstance(value, str):
        return value.replace(out, "OUT")
    return value


def test_vocab_and_prepare_return_what_the_command_prints(tmp_path, corpus_file, vocab_dir,
                                                          capsys):
    printed = cli_stdout(capsys, ["vocab", "--corpus", str(corpus_file), "--vocab-size", "300",
                                  "--out", str(tmp_path / "cli-vocab")])
    vocab = electra.train_vocab(corpus=corpus_file, vocab_size=300, out=tmp_path / "vocab")
    assert printed == f"vocabulary written to {tmp_path / 'cli-vocab'}\n"
    assert vocab.out == str(tmp_path / "vocab")
    argv = ["prepare", "--corpus", str(corpus_file), "--tokenizer", str(vocab_dir), "--seq-len",
            "32", "--workers", "1"]
    printed = cli_stdout(capsys, [*argv, "--out", str(tmp_path / "cli-data")])
    data = electra.prepare(corpus=[corpus_file], tokenizer=vocab_dir, seq_len=32, workers=1,
                           out=tmp_path / "data")
    assert json.loads(printed) == {"out": str(tmp_path / "cli-data"), "splits": data.splits}
    assert data.summary == {"out": str(tmp_path / "data"), "splits": data.splits}
    assert data.splits["train"]["num_examples"] > 0
    verified = electra.prepare(verify=data.out)
    assert cli_stdout(capsys, ["prepare", "--verify", data.out]) == \
        json.dumps(verified.summary) + "\n"
    assert verified.out is None and verified.verified["ok"] is True


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir) -> dict:
    """The same 2-step pre-training, fine-tuning, export and scoring, once through the API and
    once through the CLI: each API result and what the CLI printed."""
    root = tmp_path_factory.mktemp("api")
    sets = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]
    found: dict = {"root": root}
    capture = _Capture()
    found["pretrain"] = electra.pretrain(data=data_dir, out=root / "api-run", steps=2,
                                         batch_size=8, set=TINY, quiet=True)
    found["pretrain_cli"] = capture(["pretrain", "--data", str(data_dir), "--out",
                                     str(root / "cli-run"), "--steps", "2", "--batch-size", "8",
                                     *sets, "--quiet"])
    task = root / "task"
    task.mkdir()
    for split, size in (("train", 24), ("dev", 8)):
        rows = [{"text": f"the of and {'café' if i % 2 else 'naïve'} was", "label": str(i % 2)}
                for i in range(size)]
        (task / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = found["pretrain"].discriminator
    found["finetune"] = electra.finetune(model=model, task="user", text_a="text", label="label",
                                         data=task, out=root / "api-ft", epochs=1, quiet=True)
    found["finetune_cli"] = capture(["finetune", "--model", model, "--task", "user",
                                     "--text-a", "text", "--label", "label", "--data", str(task),
                                     "--out", str(root / "api-ft-cli"), "--epochs", "1",
                                     "--quiet"])
    found["export"] = electra.export(found["finetune"].model, hf=root / "api-hf")
    found["export_cli"] = capture(["export", found["finetune"].model, "--hf",
                                   str(root / "cli-hf")])
    sentences = root / "sentences.txt"
    sentences.write_text("the café was naïve.\nof the and.\n")
    generator = found["pretrain"].generator
    found["score"] = electra.score(model=generator, input=sentences, out=root / "api.jsonl",
                                   quiet=True)
    found["score_cli"] = capture(["score", "--model", generator, "--input", str(sentences),
                                  "--out", str(root / "cli.jsonl"), "--quiet"])
    return found


class _Capture:
    """`electra ARGV`'s stdout, in a module-scoped fixture (capsys is per test)."""

    def __call__(self, argv: list[str]) -> str:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        return out.getvalue()


def test_pretrain_returns_what_the_command_prints(runs):
    result, printed = runs["pretrain"], runs["pretrain_cli"]
    root = str(runs["root"])
    assert result.steps == 2 and result.summary["steps"] == 2
    assert result.out == f"{root}/api-run"
    assert result.final == {"discriminator": f"{root}/api-run/final/discriminator",
                            "generator": f"{root}/api-run/final/generator"}
    assert result.discriminator == result.final["discriminator"]
    assert result.generator == result.final["generator"]
    assert result.flops == result.summary["flops"] > 0
    assert printed == json.dumps(json.loads(printed), indent=2) + "\n"
    assert without_timing(json.loads(printed), f"{root}/cli-run") == \
        without_timing(result.summary, f"{root}/api-run")
    # `set` as a dict is `--set KEY=VALUE` for each item
    settings = json.loads((Path(result.out) / "settings.json").read_text())
    assert {f"model.{k}": v for k, v in settings["model"].items() if f"model.{k}" in TINY} == TINY
    assert settings == json.loads((runs["root"] / "cli-run" / "settings.json").read_text())


def test_finetune_export_and_score_return_what_the_commands_print(runs):
    root = str(runs["root"])
    tuned = runs["finetune"]
    printed = json.loads(runs["finetune_cli"])
    assert printed == {"task": "user", "median": tuned.median,
                       "results": f"{root}/api-ft-cli/results.json"}
    assert tuned.summary == {**printed, "results": f"{root}/api-ft/results.json"}
    assert tuned.results == json.loads(Path(tuned.results_file).read_text())
    assert tuned.model == f"{root}/api-ft/model" and tuned.task == "user"
    assert set(tuned.median) == {"accuracy"}
    assert runs["export_cli"] == f"{root}/cli-hf\n"
    assert runs["export"] == ExportResult(f"{root}/api-hf", "hf")
    score, printed = runs["score"], json.loads(runs["score_cli"])
    assert (score.texts, score.scorer) == (2, printed["scorer"]) and score.out == \
        f"{root}/api.jsonl"
    assert without_timing(printed, f"{root}/cli.jsonl") == \
        without_timing(score.summary, f"{root}/api.jsonl")
    assert Path(score.out).read_text() == (runs["root"] / "cli.jsonl").read_text()


def test_the_api_walkthrough_runs(tmp_path, monkeypatch):
    """docs/api.md's ```python blocks, in order, in one namespace, in an empty directory:
    text files to a vocabulary, shards, a short pre-training, a fine-tuned classifier and a
    transformers pipeline on it."""
    pytest.importorskip("transformers")
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_api"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/api.md, python block {number}", "exec"), namespace)
    assert namespace["run"].steps == 20
    assert namespace["tuned"].median["accuracy"] >= 0.95
    served = namespace["classify"](["The plot was gripping.", "The ending was tedious."])
    assert [row["label"] for row in served] == ["positive", "negative"]


def test_help_on_the_api_works_in_a_fresh_session():
    """docs/api.md: `import electra; help(electra.api.pretrain)` (electra.api on first use)."""
    seen = fresh_python("import json, pydoc, electra\n"
                        "text = pydoc.render_doc(electra.api.finetune)\n"
                        "print(json.dumps({'api': 'api' in dir(electra),\n"
                        "    'doc': text.count('Fine-tune a model')}))\n")
    assert seen == {"api": True, "doc": 1}


def test_the_flags_reference_is_current_and_every_option_explains_itself():
    """docs/flags.md is what the declarations give (`python tools/flags_doc.py` rewrites it),
    and no option is without a help text."""
    assert (ROOT / "docs" / "flags.md").read_text(encoding="utf-8") == \
        electra.api.flags_reference()
    unexplained = [f"{name} {option.flag}"
                   for name, parser in build_parser().subcommand_parsers.items()
                   for option in parser.options
                   if option.kind not in ("help", "version") and not option.action.help]
    assert unexplained == []


def test_a_declared_setting_reaches_the_settings_with_the_flag_as_its_source():
    """`setting=` on a declaration is all it takes: the value lands in the field, a switch left
    off and an empty list stay unset, a `--no-X` switch sets False, and the source names the
    flag."""
    from electra.finetuning.cli import _finetune_settings

    args = build_parser().parse_args(
        ["finetune", "--model", "m", "--task", "CoLA", "--data", "d", "--out", "o", "--lr",
         "2e-5", "--no-length-sort", "--report-to", "tensorboard"])
    flags = args.declared.from_args(args)["finetune"]
    assert (flags["lr"], flags["length_sorted"], flags["save_all_seeds"]) == (2e-5, False, None)
    assert flags["report_to"] == ["tensorboard"] and flags["tensorboard"] is None
    settings, sources = _finetune_settings(args, train=True)
    assert (settings.lr, settings.length_sorted, settings.report_to) == \
        (2e-5, False, ["tensorboard"])
    assert sources.of("finetune.length_sorted") == ("flag", "--no-length-sort")
    assert args.declared.flag_names["finetune.lr"] == "--lr"

"""Bad input through the `electra` command: exit status 1 and exactly one line on stderr,
`electra CMD: error: ...`, never a traceback; and nothing half-made left on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from electra.cli import main
from electra.data.prepare import prepare_corpus
from electra.data.vocab import train_vocab
from electra.runtime import checkpoint

TINY_SETS = ["--set", "model.embedding_size=16", "--set", "model.hidden_size=32",
             "--set", "model.num_hidden_layers=2", "--set", "model.intermediate_size=64",
             "--set", "model.max_position_embeddings=64"]


def fails(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the command; it must fail with one error line, which is returned."""
    capsys.readouterr()
    assert main(argv) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"electra {argv[0]}: error: "), lines[0]
    return lines[0]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(f.relative_to(directory)): f.read_bytes()
            for f in sorted(directory.rglob("*")) if f.is_file()}


def pretrain(data: Path, out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--data", str(data), "--out", str(out), "--quiet", "--steps", "2",
            "--batch-size", "8", "--save-every", "2", *TINY_SETS, *extra]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("cli_run") / "out"
    assert main(pretrain(data_dir, out)) == 0
    return out


@pytest.fixture(scope="module")
def other_vocab_data(tmp_path_factory: pytest.TempPathFactory, documents) -> Path:
    """Data prepared with a vocabulary trained on other text (same size, other tokens)."""
    root = tmp_path_factory.mktemp("other_vocab")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(reversed(doc)).upper() for doc in documents[:150]))
    tok = train_vocab([corpus], 500, root / "tok", lowercase=False, show_progress=False)
    out = root / "data"
    prepare_corpus([corpus], tok, 32, out, show_progress=False)
    return out


# --- vocab and prepare --------------------------------------------------------------------


@pytest.mark.parametrize("command", ["vocab", "prepare"])
def test_missing_corpus(command, tmp_path, vocab_dir, capsys):
    argv = [command, "--corpus", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "out")]
    if command == "prepare":
        argv += ["--tokenizer", str(vocab_dir)]
    line = fails(capsys, argv)
    assert "nope.txt" in line and "does not exist" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["vocab", "prepare"])
def test_empty_corpus(command, tmp_path, vocab_dir, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    argv = [command, "--corpus", str(empty), "--out", str(tmp_path / "out")]
    if command == "prepare":
        argv += ["--tokenizer", str(vocab_dir)]
    assert "empty" in fails(capsys, argv)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["vocab", "prepare"])
def test_invalid_json_line_is_named_and_nothing_is_left(command, tmp_path, vocab_dir,
                                                        documents, capsys):
    corpus = tmp_path / "corpus.jsonl"
    good = [json.dumps({"text": " ".join(doc)}) for doc in documents[:40]]
    corpus.write_text("\n".join(good[:30] + ['{"text": "unterminated'] + good[30:]) + "\n")
    out = tmp_path / "made" / "out"
    argv = [command, "--corpus", str(corpus), "--out", str(out)]
    if command == "prepare":
        argv += ["--tokenizer", str(vocab_dir)]
    line = fails(capsys, argv)
    assert f"{corpus}:31:" in line
    assert not out.exists()
    parent = out.parent
    assert not parent.exists() or not any(parent.iterdir())  # no temporary directories


# --- pretrain: data and configuration -----------------------------------------------------


def test_pretrain_without_manifest(tmp_path, data_dir, capsys):
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    (data / "manifest.json").unlink()
    line = fails(capsys, pretrain(data, tmp_path / "out"))
    assert "manifest.json" in line and "missing" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ['{"format": "electra-pretraining-data", ', "[1, 2]",
                                     '{"format": "something else"}'])
def test_pretrain_with_corrupt_manifest(content, tmp_path, data_dir, capsys):
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    (data / "manifest.json").write_text(content)
    assert "manifest.json" in fails(capsys, pretrain(data, tmp_path / "out"))
    assert not (tmp_path / "out").exists()


BAD_CONFIGS = {
    # (--steps -5 and --batch-size 0 are refused at the flag: usage errors, tested below)
    "negative steps": (["--set", "train.steps=-5"], "train.steps must be positive"),
    "zero batch": (["--set", "train.batch_size=0"], "train.batch_size must be positive"),
    "batch not divisible by accumulation": (["--batch-size", "8", "--grad-accum", "3"],
                                            "divisible by train.grad_accum"),
    "unknown --set key": (["--set", "model.hiden_size=32"], "unknown key 'hiden_size'"),
    "unknown --set section": (["--set", "modle.hidden_size=32"], "unknown section 'modle'"),
    "--set without a value": (["--set", "model.hidden_size"], "SECTION.KEY=VALUE"),
    "wrong type": (["--set", "train.steps=many"], "expected int"),
    "heads do not divide hidden": (["--set", "model.num_attention_heads=3"],
                                   "divisible by model.num_attention_heads"),
    "fractional generator size": (["--set", "objective.generator_multiplier=0.3"],
                                  "generator multiplier 0.3 does not give whole sizes"),
    "dropout out of range": (["--set", "model.hidden_dropout_prob=1.5"], "hidden_dropout_prob"),
    "sequence longer than positions": (["--set", "model.max_position_embeddings=16"],
                                       "exceeds model.max_position_embeddings (16"),
    "modern architecture, unusable window": (["--preset", "tiny-modern", "--set",
                                              "model.embedding_size=32", "--set",
                                              "model.local_attention=7"],
                                             "model.local_attention must be an even number"),
    "modern architecture, narrow tied generator": (
        ["--preset", "tiny-modern", "--set", "model.embedding_size=32", "--set",
         "objective.generator_layers=1", "--set", "objective.generator_multiplier=0.5"],
        "objective.generator_multiplier=1.0"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_nonsensical_config(case, tmp_path, data_dir, capsys):
    extra, expected = BAD_CONFIGS[case]
    line = fails(capsys, pretrain(data_dir, tmp_path / "out", *extra))
    assert expected in line
    assert not (tmp_path / "out").exists()  # rejected before anything is written


@pytest.mark.parametrize("content,expected", [
    ('{"train": {"stepz": 3}}', "unknown key 'stepz'"),
    ('{"train": {"steps": 3,}}', "invalid JSON"),
    ('{"preset": "huge"}', "unknown preset 'huge'"),
])
def test_bad_config_file(content, expected, tmp_path, data_dir, capsys):
    config = tmp_path / "config.json"
    config.write_text(content)
    line = fails(capsys, pretrain(data_dir, tmp_path / "out", "--config", str(config)))
    assert expected in line


# --- pretrain: resuming -------------------------------------------------------------------


def test_new_run_into_existing_run(small_run, data_dir, capsys):
    assert "--resume" in fails(capsys, pretrain(data_dir, small_run))


def test_resume_without_a_run(tmp_path, data_dir, capsys):
    assert "nothing to resume" in fails(capsys, pretrain(data_dir, tmp_path, "--resume"))


def test_resume_with_data_of_another_vocabulary(small_run, other_vocab_data, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(small_run, out)
    before = snapshot(out)
    line = fails(capsys, pretrain(other_vocab_data, out, "--resume", "--steps", "4"))
    assert "another vocabulary" in line and str(other_vocab_data) in line
    assert snapshot(out) == before  # a refused resume changes nothing


def test_resume_with_another_model(small_run, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(small_run, out)
    line = fails(capsys, pretrain(data_dir, out, "--resume", "--steps", "4",
                                  "--set", "model.intermediate_size=128"))
    assert "model configuration differs" in line


def test_resume_with_corrupt_run_config(small_run, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(small_run, out)
    (out / "settings.json").write_text('{"model": ')
    assert "settings.json" in fails(capsys, pretrain(data_dir, out, "--resume", "--steps", "4"))


def test_resume_of_a_run_recorded_in_the_older_config_json(small_run, data_dir, tmp_path,
                                                             capsys):
    """Runs written before settings.json and run.json kept both in OUT/config.json: they
    resume, and a corrupt one is a one-line error naming it."""
    out = tmp_path / "out"
    shutil.copytree(small_run, out)
    settings = json.loads((out / "settings.json").read_text())
    record = json.loads((out / "run.json").read_text())
    (out / "settings.json").unlink()
    (out / "run.json").unlink()
    (out / "config.json").write_text(json.dumps({"config": settings, **record}))
    assert main(pretrain(data_dir, out, "--resume", "--steps", "4")) == 0
    assert json.loads((out / "settings.json").read_text())["model"] == settings["model"]
    broken = tmp_path / "broken"
    shutil.copytree(small_run, broken)
    (broken / "settings.json").unlink()
    (broken / "config.json").write_text('{"config": ')
    assert "config.json" in fails(capsys, pretrain(data_dir, broken, "--resume", "--steps", "4"))


def test_resume_with_truncated_checkpoint(small_run, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(small_run, out)
    latest = checkpoint.find_latest(out)
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    before = snapshot(out)
    line = fails(capsys, pretrain(data_dir, out, "--resume", "--steps", "4"))
    assert str(latest) in line and "model.safetensors" in line
    assert snapshot(out) == before


def test_resume_past_the_end(small_run, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(small_run, out)
    before = snapshot(out)
    assert "already trained 2 steps" in fails(capsys, pretrain(data_dir, out, "--resume"))
    assert snapshot(out) == before


# --- flops --------------------------------------------------------------------------------


def test_flops_unknown_preset(capsys):
    """--preset takes its choices from electra.presets: argparse refuses an unknown one (exit
    status 2, its usage line) and names the presets."""
    with pytest.raises(SystemExit) as exit_info:
        main(["flops", "--preset", "gigantic"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'gigantic'" in err and "'tiny-local'" in err and "'large'" in err


def test_flops_nonsense_sizes(capsys):
    assert "--batch-size: must be positive" in usage_error(
        capsys, ["flops", "--preset", "small", "--batch-size", "0"])


def usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """A usage error: exit status 2 and one line naming the command and its --help."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith(f"(see electra {argv[0]} --help)"), lines[0]
    return lines[0]


@pytest.mark.parametrize("argv, message", [
    # a typo must not start a run over everything (0) or all but the last few (-5)
    (["finetune", "--max-train-examples", "0"], "--max-train-examples: must be positive, got 0"),
    (["finetune", "--max-train-examples", "-5"], "must be positive, got -5"),
    (["pretrain", "--steps", "0"], "--steps: must be positive, got 0"),
    (["prepare", "--workers", "0"], "--workers: must be positive"),
    (["cvt", "--seed", "-1"], "--seed: must be at least 0, got -1"),
    (["pretrain", "--batch-size", "many"], "--batch-size: expected a whole number, got 'many'"),
    (["pretrain", "--preset", "huge"], "argument --preset: invalid choice: 'huge'"),
])
def test_numbers_are_checked_at_the_flag_in_one_line(capsys, argv, message):
    assert message in usage_error(capsys, argv)


def test_a_zero_that_means_something_is_taken():
    from electra.cli import build_parser

    args = build_parser().parse_args(["finetune", "--model", "m", "--task", "CoLA", "--data", "d",
                                      "--out", "o", "--save-every", "0", "--seed", "0"])
    assert (args.save_every, args.seed) == (0, 0)


def test_version(capsys):
    from electra import __version__

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"electra {__version__}\n"


def test_a_run_that_fails_its_checks_leaves_nothing_and_the_same_out_runs_after(
        tmp_path, data_dir, capsys):
    """Fewer examples than a batch is refused before OUT is written, so the command, mended,
    is not then refused as 'already holds a run'."""
    out = tmp_path / "out"
    assert "fewer than one global batch" in fails(
        capsys, pretrain(data_dir, out, "--batch-size", "100000"))
    assert not out.exists()
    assert main(pretrain(data_dir, out)) == 0


def test_every_command_refuses_to_replace_an_output_in_one_wording(tmp_path, corpus_file,
                                                                   vocab_dir, data_dir, capsys):
    """vocab and prepare name the flag that overrides, as export does, in the same words."""
    vocab = fails(capsys, ["vocab", "--corpus", str(corpus_file), "--vocab-size", "300",
                           "--out", str(vocab_dir), "--quiet"])
    prepared = fails(capsys, ["prepare", "--corpus", str(corpus_file), "--tokenizer",
                              str(vocab_dir), "--out", str(data_dir), "--quiet"])
    assert vocab.endswith(f"{vocab_dir} already holds tokenizer files; choose another --out or "
                          "pass --overwrite to replace it")
    assert prepared.endswith(f"{data_dir} already holds prepared data; choose another --out or "
                             "pass --overwrite to replace it")


@pytest.mark.parametrize("item, message", [
    ("model.hidden_size=abc", "--set model.hidden_size=abc: expected int, got 'abc'"),
    ("model.hiden_size=3", "unknown key 'hiden_size' (did you mean hidden_size?)"),
])
def test_a_bad_set_names_itself_once_and_the_nearest_key(tmp_path, data_dir, capsys, item,
                                                         message):
    assert fails(capsys, pretrain(data_dir, tmp_path / "o", "--set", item)).endswith(message)


def test_a_run_shorter_than_its_warm_up_says_so(tmp_path, data_dir, capsys):
    assert main(pretrain(data_dir, tmp_path / "a")) == 0  # 2 steps, the preset's 100 of warm-up
    assert "the warm-up (train.warmup_steps 100) is as long as the run (2 steps)" in \
        capsys.readouterr().err
    assert main(pretrain(data_dir, tmp_path / "b", "--warmup-steps", "1")) == 0
    assert "warm-up" not in capsys.readouterr().err


def test_a_glue_task_missing_from_a_glue_folder_names_the_folder(tmp_path, tiny_model, capsys):
    glue = tmp_path / "glue"
    (glue / "CoLA").mkdir(parents=True)
    (glue / "SST-2").mkdir()
    message = fails(capsys, ["finetune", "--model", str(tiny_model), "--task", "MRPC", "--data",
                             str(glue), "--out", str(tmp_path / "out")])
    assert message.endswith(f"{glue}: no MRPC folder (it holds CoLA, SST-2); --data is a GLUE "
                            "folder with a MRPC/ folder, or the MRPC folder itself")


def test_evaluate_and_predict_refuse_another_commands_output(tmp_path, data_dir, capsys):
    """A fine-tuning run's OUT (its results.json would be replaced) or a pre-training run's
    is refused in the one wording, naming --overwrite; an empty OUT is taken."""
    from electra.outputs import check_writable, held_output

    run = tmp_path / "run"
    assert main(pretrain(data_dir, run)) == 0
    for command in ("evaluate", "predict"):
        message = fails(capsys, [command, "--model", str(run / "final" / "discriminator"),
                                 "--data", str(tmp_path), "--task", "SST-2", "--out", str(run)])
        assert message.endswith(f"{run} already holds a pre-training run; choose another "
                                "--out or pass --overwrite to replace it")
    finetuned = tmp_path / "ft"
    finetuned.mkdir()
    (finetuned / "settings.json").write_text('{"finetune": {}}')
    (finetuned / "results.json").write_text("{}")
    assert held_output(finetuned) == "a fine-tuning run"
    evaluated = tmp_path / "ev"
    evaluated.mkdir()
    (evaluated / "results.json").write_text("{}")
    check_writable(evaluated, "evaluation results")  # its own: taken
    check_writable(tmp_path / "new", "predictions")
    check_writable(run, "predictions", overwrite=True)


def test_the_same_flag_for_the_same_thing(capsys):
    """export takes --model as the other commands do (MODEL stays); cvt-predict writes --out
    (--output stays); giving the model twice or not at all is one line."""
    from electra.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["cvt-predict", "--model", "m", "--input", "i", "--out", "o"]).out \
        == parser.parse_args(["cvt-predict", "--model", "m", "--input", "i", "--output",
                              "o"]).out == "o"
    for argv in (["export", "m", "--model", "m", "--hf", "o"], ["export", "--hf", "o"]):
        assert fails(capsys, argv).endswith("give the model once: as MODEL or as --model")


def test_vocab_errors_name_the_command_once(capsys, tmp_path):
    assert fails(capsys, ["vocab", "--out", str(tmp_path / "v")]) == (
        "electra vocab: error: give --corpus PATH... or --from-vocab FILE")

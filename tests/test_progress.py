"""Progress where there is no terminal: one plain, flushed line per log interval (a training
loop's `log_every`, corpus preparation's time interval), a bar on a terminal, nothing with
`--quiet` (`electra.progress`)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cvt_helpers import TINY as TINY_CVT
from test_curves import _user_task

import electra
from electra.cli import main
from electra.cli_support import show_progress
from electra.data.prepare import prepare_corpus
from electra.data.vocab import train_vocab
from electra.progress import (
    CountProgress,
    Progress,
    StepProgress,
    count_line,
    format_duration,
    progress_mode,
    step_line,
)

TINY_SETS = ["--set", "model.embedding_size=16", "--set", "model.hidden_size=32",
             "--set", "model.num_hidden_layers=2", "--set", "model.intermediate_size=64",
             "--set", "model.max_position_embeddings=64"]


class FlushRecorder(io.StringIO):
    """A stream that records how much of its text had been written at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[int] = []

    def flush(self) -> None:
        self.flushed_at.append(len(self.getvalue()))
        super().flush()


def clock(*times: float):
    ticks = iter(times)
    return lambda: next(ticks)


# --- the lines ------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (-3, "0s"), (44.6, "45s"), (87, "1m27s"), (3599.4, "59m59s"), (3600, "1h00m"),
    (7530, "2h05m"), (100_000, "27h46m")])
def test_durations(seconds, shown):
    assert format_duration(seconds) == shown


def test_a_training_line():
    assert step_line("pretrain", 200, 1000, {"loss": "3.412", "disc_acc": 0.87123}, 2.3149,
                     87.0) == ("pretrain step 200/1000 (20%) | loss 3.412 | disc_acc 0.8712 | "
                               "2.31 steps/s | elapsed 1m27s | eta 5m46s")
    # slower than a step a second: seconds per step, as tqdm shows it
    assert step_line("SST-2 seed 1", 3, 10, {}, 0.25, 12.0) == (
        "SST-2 seed 1 step 3/10 (30%) | 4.00 s/step | elapsed 12s | eta 28s")
    assert step_line("cvt", 0, 5, {"task": "chunk"}, None, 0.0) == (
        "cvt step 0/5 (0%) | task chunk | ? steps/s | elapsed 0s | eta ?")


def test_a_count_line():
    assert count_line("preparing", 12_288, 3_145_728, 15.0) == (
        "preparing: 12,288 docs | 3,145,728 tokens | 819 docs/s | 209,715 tokens/s | "
        "elapsed 15s")
    assert count_line("reading corpus", 300, None, 2.0, done=True) == (
        "reading corpus: done, 300 docs | 150 docs/s | elapsed 2s")


# --- the modes ------------------------------------------------------------------------------


def test_library_arguments_keep_their_meaning():
    assert progress_mode(True) is Progress.BAR
    assert progress_mode(False) is Progress.OFF
    assert progress_mode(None) is Progress.OFF
    assert progress_mode("lines") is Progress.LINES
    assert progress_mode(Progress.BAR) is Progress.BAR
    with pytest.raises(ValueError, match="got 'log'"):
        progress_mode("log")


@pytest.mark.parametrize(("tty", "quiet", "mode"), [
    (True, False, Progress.BAR), (False, False, Progress.LINES),
    (True, True, Progress.OFF), (False, True, Progress.OFF)])
def test_the_command_line_choice(monkeypatch, tty, quiet, mode):
    class Stderr(io.StringIO):
        def isatty(self) -> bool:
            return tty

    monkeypatch.setattr(sys, "stderr", Stderr())
    assert show_progress(quiet) is mode


# --- the reporters --------------------------------------------------------------------------


def test_training_lines_carry_the_rate_since_the_last_line_and_are_flushed():
    stream = FlushRecorder()
    progress = StepProgress("lines", 10, start=0, desc="pretrain", stream=stream,
                            clock=clock(100.0, 110.0, 112.0))
    for _ in range(5):
        progress.advance({"loss": "9.000"})  # the bar's postfix: not a line
    assert stream.getvalue() == ""
    progress.report({"loss": "3.412"})
    first = len(stream.getvalue())
    for _ in range(5):
        progress.advance()
    progress.report({"loss": "3.001"})
    progress.close()
    assert stream.getvalue().splitlines() == [
        "pretrain step 5/10 (50%) | loss 3.412 | 2.00 s/step | elapsed 10s | eta 10s",
        "pretrain step 10/10 (100%) | loss 3.001 | 2.50 steps/s | elapsed 12s | eta 0s"]
    assert stream.flushed_at == [first, len(stream.getvalue())]  # each line, once written


def test_a_resumed_loop_counts_its_rate_from_where_it_started():
    stream = io.StringIO()
    progress = StepProgress("lines", 100, start=90, desc="pretrain", stream=stream,
                            clock=clock(0.0, 4.0))
    for _ in range(2):
        progress.advance()
    progress.set_total(94)  # a time budget's new plan
    progress.report({})
    assert stream.getvalue() == ("pretrain step 92/94 (97%) | 2.00 s/step | elapsed 4s | "
                                 "eta 4s\n")


def test_the_bar_shows_the_reported_numbers_and_off_shows_nothing():
    bar = io.StringIO()
    progress = StepProgress(True, 4, desc="pretrain", stream=bar)
    progress.advance()
    progress.report({"loss": "3.412"})
    progress.close()
    assert "loss=3.412" in bar.getvalue() and "1/4" in bar.getvalue()
    assert "pretrain step" not in bar.getvalue()
    silent = io.StringIO()
    progress = StepProgress(False, 4, stream=silent)
    progress.advance()
    progress.report({"loss": "3.412"})
    progress.close()
    assert silent.getvalue() == ""


def test_work_without_a_log_cadence_gets_a_line_every_interval_and_one_at_the_end():
    """Scoring counts texts (or passes) in batches: a line once `line_every_s` has passed,
    and where it ended."""
    stream = io.StringIO()
    with StepProgress("lines", 100, desc="score (mlm)", stream=stream, unit="text",
                      line_every_s=30.0,
                      clock=clock(0.0, 10.0, 31.0, 31.0, 50.0, 50.0)) as progress:
        for n in (32, 32, 36):  # at 10 s (no line), 31 s (a line) and 50 s (none yet)
            progress.advance(n=n)
    assert stream.getvalue().splitlines() == [  # the last: at close
        "score (mlm) text 64/100 (64%) | 2.06 texts/s | elapsed 31s | eta 17s",
        "score (mlm) text 100/100 (100%) | 1.89 texts/s | elapsed 50s | eta 0s"]


def test_count_lines_come_every_interval_and_once_at_the_end():
    stream = FlushRecorder()
    with CountProgress("lines", "preparing", interval_s=30.0, stream=stream,
                       clock=clock(0.0, 10.0, 31.0, 45.0, 62.0, 70.0, 75.0)) as progress:
        for docs in (100, 200, 300, 400, 500):  # at 10, 31, 45, 62 and 70 s
            progress.update(docs, 10 * docs)
    assert stream.getvalue().splitlines() == [
        "preparing: 300 docs | 3,000 tokens | 10 docs/s | 97 tokens/s | elapsed 31s",
        "preparing: 1,000 docs | 10,000 tokens | 16 docs/s | 161 tokens/s | elapsed 1m02s",
        "preparing: done, 1,500 docs | 15,000 tokens | 20 docs/s | 200 tokens/s | "
        "elapsed 1m15s"]
    ends = [m.end() for m in re.finditer("\n", stream.getvalue())]
    assert stream.flushed_at == ends


def test_no_final_line_after_an_error():
    stream = io.StringIO()
    with pytest.raises(RuntimeError), CountProgress("lines", "preparing", stream=stream,
                                                    clock=clock(0.0, 1.0)) as progress:
        progress.update(3)
        raise RuntimeError("bad record")
    assert stream.getvalue() == ""


# --- the commands ---------------------------------------------------------------------------


def test_prepare_writes_a_final_line_with_what_it_wrote(tmp_path, corpus_file, vocab_dir, capfd):
    manifest = prepare_corpus([corpus_file], vocab_dir, 32, tmp_path / "data",
                              heldout_fraction=0.1, shard_tokens=2000, workers=1,
                              show_progress="lines")
    lines = capfd.readouterr().err.splitlines()
    splits = manifest["splits"].values()
    docs = sum(s["num_documents"] for s in splits)
    tokens = sum(s["num_tokens"] for s in splits)
    assert len(lines) == 1, lines  # a run shorter than the interval: the final line only
    assert lines[0].startswith(f"preparing: done, {docs:,} docs | {tokens:,} tokens | "), lines
    assert re.fullmatch(r".* \| [\d,]+ docs/s \| [\d,]+ tokens/s \| elapsed \d+s", lines[0])


def test_vocab_counts_the_documents_it_read(tmp_path, corpus_file, documents, capfd):
    train_vocab([corpus_file], 500, tmp_path / "tok", show_progress="lines")
    lines = capfd.readouterr().err.splitlines()  # the trainer's own bars stay off
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"reading corpus: done, {len(documents)} docs | "), lines


def pretrain_argv(data: Path, out: Path, steps: int, log_every: int, *extra: str) -> list[str]:
    return ["pretrain", "--data", str(data), "--out", str(out), "--steps", str(steps),
            "--batch-size", "8", "--log-every", str(log_every), "--eval-every", "0",
            "--save-every", str(steps), *TINY_SETS, *extra]


LINE = re.compile(r"pretrain step (\d+)/60 \((\d+)%\) \| loss (\d+\.\d{3}) \| "
                  r"disc_acc (\d\.\d{3}) \| gen_acc (\d\.\d{3}) \| \d+\.\d\d (steps/s|s/step) \| "
                  r"elapsed \d+s \| eta (\d+s)")


def test_pretrain_in_a_log_file_writes_a_line_per_log_interval_as_it_runs(tmp_path, data_dir):
    """The honest check of flushing: the first line is read from the pipe while the process
    still trains, and every line carries what OUT/metrics.jsonl logged at that step."""
    out = tmp_path / "out"
    src = str(Path(electra.__file__).resolve().parents[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    code = "import sys; from electra.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *pretrain_argv(data_dir, out, 60, 10)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    read: list[tuple[str, bool]] = []  # (line, the process was still running)
    with proc.stderr:
        for line in proc.stderr:
            read.append((line.rstrip("\n"), proc.poll() is None))
    assert proc.wait(timeout=300) == 0, "\n".join(line for line, _ in read)
    progress = [(LINE.fullmatch(line), running) for line, running in read
                if line.startswith("pretrain step")]
    assert all(match for match, _ in progress), read
    assert [int(m[1]) for m, _ in progress] == [10, 20, 30, 40, 50, 60]
    assert [int(m[2]) for m, _ in progress] == [16, 33, 50, 66, 83, 100]
    assert progress[0][1], "the first line arrived only when the process had ended"
    assert progress[-1][0][7] == "0s"  # no time left at the last step
    logged = {r["step"]: r for r in map(json.loads, (out / "metrics.jsonl").open())
              if "loss" in r}
    for match, _ in progress:
        record = logged[int(match[1])]
        assert (match[3], match[4], match[5]) == (
            f"{record['loss']:.3f}", f"{record['disc_acc']:.3f}", f"{record['gen_acc']:.3f}")


@pytest.mark.parametrize(("flags", "lines"), [((), 2), (("--quiet",), 0)])
def test_quiet_silences_the_lines(tmp_path, data_dir, capsys, flags, lines):
    assert main(pretrain_argv(data_dir, tmp_path / "out", 4, 2, *flags)) == 0
    err = capsys.readouterr().err  # not a terminal: lines unless --quiet
    assert sum(line.startswith("pretrain step ") for line in err.splitlines()) == lines, err


def test_finetune_and_cvt_write_their_lines_too(tiny_model, tmp_path, capsys):
    _user_task(tmp_path / "data", 96)  # 96 examples, batch 32: 3 steps
    assert main(["finetune", "--model", str(tiny_model), "--task", "user", "--text-a", "text",
                 "--label", "label", "--data", str(tmp_path / "data"), "--out",
                 str(tmp_path / "ft"), "--epochs", "1", "--seeds", "1", "--log-every", "2"]) == 0
    lines = capsys.readouterr().err.splitlines()
    pattern = (r"user seed 1 step {}/3 \({}%\) \| loss \d\.\d{{4}} \| acc \d\.\d{{3}} \| "
               r"\d+\.\d\d (steps/s|s/step) \| elapsed \d+s \| eta \d+s")
    assert len(lines) == 2, lines  # every 2 steps and the last
    assert re.fullmatch(pattern.format(2, 66), lines[0]), lines
    assert re.fullmatch(pattern.format(3, 100), lines[1]), lines

    ner = tmp_path / "ner"
    ner.mkdir()
    sentence = ["EU NNP B-NP I-ORG", "rejects VBZ B-VP O", "German JJ B-NP I-MISC", ""]
    (ner / "eng.train").write_text("\n".join(sentence * 6) + "\n")
    (ner / "eng.testa").write_text("\n".join(sentence) + "\n")
    sets = [a for k, v in TINY_CVT.items() for a in ("--set", f"cvt.{k}={v}")]
    assert main(["cvt", "--tasks", "ner", "--data", str(ner), "--no-cvt", "--out",
                 str(tmp_path / "cvt"), "--epochs", "2", *sets]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if " step " in line]
    assert len(lines) == 1, lines  # CVT logs every 25 steps and at the last of its 4
    assert re.fullmatch(r"supervised step 4/4 \(100%\) \| sup \d+\.\d+ \| task ner \| "
                        r"\d+\.\d\d (steps/s|s/step) \| elapsed \d+s \| eta 0s", lines[0]), lines

"""experiments.bam's IMDB sentiment task: built from the labeled reviews in ../shared/data, read
by `electra multitask` as a user task beside the GLUE tasks."""

from __future__ import annotations

import json

import pytest

from electra.multitask.train import resolve_task
from experiments import bam

IMDB = bam.SHARED / "corpus" / "aclImdb" / "train.jsonl.gz"


@pytest.mark.skipif(not IMDB.is_file(), reason="no labeled IMDB reviews in ../shared/data")
def test_imdb_task_is_shuffled_labeled_and_readable(tmp_path):
    folder = bam.imdb_sentiment_task(bam.SHARED / "corpus", tmp_path / "IMDB", 200, 50)
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 200 and all("<br" not in r["text"] for r in rows)
    labels = [r["label"] for r in rows]
    assert set(labels) == {"pos", "neg"} and 60 < labels.count("pos") < 140  # not pos-first
    task, data = resolve_task("IMDB", tmp_path)
    assert len(task.read(data, "train")) == 200  # DATA/IMDB/, as multitask reads it
    assert len(task.read(data, "dev")) == 50


def test_a_user_task_teacher_is_found_under_its_own_name():
    """Single->Multi reads each teacher back by task name; a user task (IMDB) is saved under
    its own name, which the task registry does not know."""
    import pytest as _pytest

    from electra.errors import ElectraError
    from electra.finetuning.predict import _restore_task
    from electra.tasks.user import UserTask

    info = {"task": UserTask(text_a="text", label="label", task_name="IMDB").state()}
    assert _restore_task(info, "IMDB").name == "IMDB"
    with _pytest.raises(ElectraError, match="fine-tuned on IMDB, not SST-2"):
        _restore_task(info, "SST-2")


def test_single_long_is_single_for_the_multitask_epochs(tmp_path, monkeypatch):
    """Multi trains 6 epochs to Single's 3 (section 3.3); `single-long` is Single at Multi's
    length, so a gain from the other tasks can be told apart from one from training longer."""
    seen = {}

    def fake_run_strategy(model, tasks, data, out, strategy, settings, teachers, single):
        seen[out.name] = (strategy, single.epochs, teachers)
        return {}

    monkeypatch.setattr(bam, "run_strategy", fake_run_strategy)
    args = bam.parse_args(["--work", str(tmp_path), "--epochs", "6", "--single-epochs", "2"])
    for name in ("single", "single-long"):
        bam.run_one(name, args, tmp_path / "encoder", ["SST-2"])
    assert seen == {"single": ("single", 2.0, None), "single-long": ("single", 6.0, None)}


def test_the_table_marks_a_gain_over_single_at_the_multitask_length():
    sig = {"single": {"stars": ""}, "single-long": {"stars": "*"}}
    rows = {"multi": {"tasks": {"SST-2": 69.2}, "average": 69.2,
                      "significance": {"SST-2": sig}}}
    assert "| Multi | 69.2 | 69.2*ˡ |" in bam.table(rows, ["SST-2"], 5)

"""SQuAD through the fine-tuning framework: `electra finetune/evaluate/predict --task squad` on
real SQuAD v1.1 dev (split by article into train/dev), and squad2 on a crafted v2.0 set, with a
tiny randomly initialised encoder. Checks the files and that they score as results.json says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.cli import main
from electra.tasks import get_task
from electra.tasks.squad import split_squad_file
from electra.tasks.squad.data import load_squad_json
from electra.tasks.squad.metrics import evaluate_v1, evaluate_v2

DEV = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad" / "dev-v1.1.json.gz"
FAST = ("--max-seq-len", 128, "--doc-stride", 64, "--max-query-len", 32, "--epochs", 1,
        "--batch-size", 16, "--quiet")


def _run(*args: object) -> None:
    assert main([str(a) for a in args]) == 0


def _subset(dataset: dict, qids: set[str]) -> dict:
    """The official-format data set restricted to these questions."""
    return {"data": [{"paragraphs": [{"context": p["context"], "qas": [
        qa for qa in p["qas"] if qa["id"] in qids]} for p in a["paragraphs"]]}
        for a in dataset["data"]]}


@pytest.mark.skipif(not DEV.is_file(), reason=f"SQuAD v1.1 dev absent ({DEV})")
def test_squad_v1_finetune_evaluate_predict(tiny_model: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    train_path, dev_path = split_squad_file(DEV, data, dev_fraction=0.2)
    train_json, dev_json = load_squad_json(train_path), load_squad_json(dev_path)
    titles = {a["title"] for a in train_json["data"]}
    assert titles.isdisjoint(a["title"] for a in dev_json["data"])

    out = tmp_path / "run"
    _run("finetune", "--model", tiny_model, "--task", "squad", "--data", data, "--out", out,
         "--max-train-examples", 64, "--max-eval-examples", 32, *FAST)
    res = json.loads((out / "results.json").read_text())
    assert res["task"] == "squad" and res["primary_metric"] == "f1"
    assert res["metric_names"] == ["exact_match", "f1"]
    assert res["num_train_examples"] == 64 and res["num_eval_examples"] == {"dev": 32}
    s = res["settings"]
    assert (s["epochs"], s["max_seq_len"]) == (1, 128)
    scores = res["seeds"][0]["scores"]
    assert all(0.0 <= scores[m] <= 100.0 for m in ("exact_match", "f1"))

    preds = json.loads(Path(res["seeds"][0]["predictions"]["dev"]).read_text())
    dev_qids = [qa["id"] for a in dev_json["data"] for p in a["paragraphs"] for qa in p["qas"]]
    assert list(preds) == dev_qids[:32]
    assert all(isinstance(text, str) for text in preds.values())
    official = evaluate_v1(_subset(dev_json, set(preds)), preds)
    assert official["exact_match"] == pytest.approx(scores["exact_match"])
    assert official["f1"] == pytest.approx(scores["f1"])

    model_dir = out / "model"
    info = json.loads((model_dir / "finetune.json").read_text())
    assert info["head_kind"] == "span" and info["task"]["options"]["doc_stride"] == 64
    _run("evaluate", "--model", model_dir, "--data", data, "--out", tmp_path / "ev",
         "--max-eval-examples", 32)
    ev = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert ev["scores"] == pytest.approx(scores)

    (data / "test-v1.1.json").write_text(json.dumps(_subset(dev_json, set(dev_qids[:5]))))
    _run("predict", "--model", model_dir, "--data", data, "--out", tmp_path / "pred")
    test = json.loads((tmp_path / "pred" / "test_predictions.json").read_text())
    assert list(test) == dev_qids[:5] and [test[q] for q in test] == [preds[q] for q in test]


def _v2_data(directory: Path) -> None:
    """A small v2.0 set: the answer is the name after "by"; half the questions have none."""
    articles = []
    for a in range(6):
        qas = []
        for q, (who, what) in enumerate([("Ada", "engine"), ("Alan", "machine"),
                                         ("Grace", "compiler"), ("Edsger", "semaphore")]):
            qid = f"a{a}q{q}"
            if q % 2:
                qas.append({"id": qid, "question": f"Who painted the {what}?", "answers": [],
                            "is_impossible": True})
            else:
                start = 4 + len(what) + 14
                qas.append({"id": qid, "question": f"Who built the {what}?",
                            "answers": [{"text": who, "answer_start": start}],
                            "is_impossible": False})
        contexts = [f"The {what} was built by {who} long ago." for who, what in
                    [("Ada", "engine"), ("Alan", "machine"), ("Grace", "compiler"),
                     ("Edsger", "semaphore")]]
        articles.append({"title": f"t{a}", "paragraphs": [
            {"context": contexts[q], "qas": [qas[q]]} for q in range(4)]})
    directory.mkdir()
    for split in ("train", "dev"):
        (directory / f"{split}-v2.0.json").write_text(
            json.dumps({"version": "v2.0", "data": articles}))


def test_squad2_writes_na_probs_and_best_thresholds(tiny_model: Path, tmp_path: Path) -> None:
    data = tmp_path / "v2"
    _v2_data(data)
    dataset = load_squad_json(data / "dev-v2.0.json")
    for a in dataset["data"]:  # the crafted answers point at the right text
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                for ans in qa["answers"]:
                    assert p["context"][ans["answer_start"]:].startswith(ans["text"])
    out = tmp_path / "run"
    _run("finetune", "--model", tiny_model, "--task", "squad2", "--data", data, "--out", out,
         *FAST)
    res = json.loads((out / "results.json").read_text())
    seed = res["seeds"][0]
    assert res["task"] == "squad2"
    assert {"exact", "f1", "best_exact", "best_f1", "best_f1_thresh", "HasAns_f1",
            "NoAns_f1"} <= set(seed["scores"])
    preds = json.loads(Path(seed["predictions"]["dev"]).read_text())
    na_probs = json.loads(Path(seed["predictions"]["dev_na_probs"]).read_text())
    assert len(preds) == len(na_probs) == 24
    assert all(0.0 <= p <= 1.0 for p in na_probs.values())
    assert evaluate_v2(dataset, preds, na_probs) == pytest.approx(seed["scores"])


def test_squad_task_registry_and_state() -> None:
    task = get_task("squad2", doc_stride=32, max_query_len=None)
    assert (task.name, task.head_kind, task.num_outputs, task.default_epochs) == (
        "squad2", "span", 3, 2)
    assert task.default_max_seq_len == 384 and task.options["doc_stride"] == 32
    assert task.options["max_query_len"] == 64
    restored = get_task(task.state()["name"], **task.state()["options"])
    assert restored.options == task.options and get_task("squad").num_outputs == 2

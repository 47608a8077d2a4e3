"""Task data in the Hugging Face Hub's layouts (`electra.tasks.hub_layout`): GLUE, CoNLL-2000,
SQuAD and user data converted here from the shipped files (the first rows of each split) to
the Hub's Parquet files and to `save_to_disk` folders give exactly the examples of the original
files; class ids map through the features (or --label-names) to the original labels; what is
missing is one error naming the file and what exists."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow", reason="needs the corpora extra (pyarrow)")

from conftest import SHARED_DATA  # noqa: E402
from hub_helpers import (  # noqa: E402
    class_label,
    glue_columns,
    squad_columns,
    tagging_columns,
    value,
    write_layout,
    write_parquet,
    write_saved_split,
)

from electra.errors import ElectraError  # noqa: E402
from electra.finetuning.glue_suite import glue_tasks  # noqa: E402
from electra.tasks import get_task, task_from_state  # noqa: E402
from electra.tasks.glue import SPECS  # noqa: E402
from electra.tasks.hub_layout import find_layout, parse_label_names  # noqa: E402

GLUE = SHARED_DATA / "glue"
CONLL2000 = SHARED_DATA / "conll2000"
SQUAD_DEV = SHARED_DATA / "squad" / "dev-v1.1.json.gz"
ROWS = 150  # of each split: enough to cover both labels, quick to convert
LAYOUTS = ("config", "data", "saved")
GLUE_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def plain(examples):
    """Examples without `where` (file:line against file:row, the one field that differs)."""
    return [replace(ex, where="") for ex in examples]


def head_lines(source: Path, target: Path, lines: int) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\n".join(source.read_bytes().split(b"\n")[:lines]) + b"\n")
    return target


def head_sentences(source: Path, target: Path, sentences: int) -> Path:
    """The first blank-line separated blocks of a CoNLL file."""
    blocks = source.read_text().split("\n\n")[:sentences]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n\n".join(blocks) + "\n")
    return target


@pytest.fixture(scope="module")
def glue_tsv(tmp_path_factory) -> Path:
    """The first ROWS rows of each split of SST-2, RTE and CoLA, as TSVs."""
    root = tmp_path_factory.mktemp("glue_tsv")
    for task in ("SST-2", "RTE", "CoLA"):
        for split in GLUE_SPLITS:
            head_lines(GLUE / task / f"{split}.tsv", root / task / f"{split}.tsv", ROWS + 1)
    return root


@pytest.mark.skipif(not GLUE.is_dir(), reason=f"GLUE data absent ({GLUE})")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", ["SST-2", "RTE", "CoLA"])
def test_glue_layouts_give_the_tsv_examples(name, layout, glue_tsv, tmp_path):
    spec = SPECS[name]
    tsv = {split: get_task(name).read(glue_tsv, split) for split in GLUE_SPLITS}
    data = write_layout(layout, tmp_path / "hub", {
        hub: glue_columns(spec, tsv[split], test=split == "test")
        for split, hub in GLUE_SPLITS.items()}, config=spec.hub_config)
    task = get_task(name)
    for split in GLUE_SPLITS:
        hub = task.read(data, split)
        assert plain(hub) == plain(tsv[split])
        assert len(hub) in (ROWS, ROWS + 1)  # CoLA's train/dev files have no header row
    assert hub[0].where.endswith(".arrow:row 1" if layout == "saved" else ".parquet:row 1")
    assert {ex.label for ex in task.read(data, "dev")} == set(spec.labels)


@pytest.mark.skipif(not GLUE.is_dir(), reason=f"GLUE data absent ({GLUE})")
def test_tsvs_win_and_the_glue_suite_finds_hub_configs(glue_tsv, tmp_path):
    """nyu-mll/glue's layout: DATA/<config>/ beside (or instead of) DATA/<Task>/*.tsv."""
    spec = SPECS["SST-2"]
    dev = get_task("SST-2").read(glue_tsv, "dev")
    write_layout("config", tmp_path, {
        "train": glue_columns(spec, dev[:5], test=False),
        "validation": glue_columns(spec, dev[5:9], test=False)}, config="sst2")
    assert glue_tasks(tmp_path) == ["SST-2"]

    def content(examples):
        return [(ex.texts, ex.label) for ex in examples]

    assert content(get_task("SST-2").read(tmp_path, "dev")) == content(dev[5:9])
    head_lines(glue_tsv / "SST-2" / "dev.tsv", tmp_path / "SST-2" / "dev.tsv", 4)
    assert plain(get_task("SST-2").read(tmp_path, "dev")) == plain(dev[:3])  # the TSV


def test_mnli_splits_columns_and_label_order(tmp_path):
    """MNLI's validation_matched/_mismatched and premise/hypothesis; the Hub's class ids
    (entailment, neutral, contradiction) map by name to the task's sorted labels."""
    features = {"premise": value("string"), "hypothesis": value("string"),
                "label": class_label(["entailment", "neutral", "contradiction"]),
                "idx": value("int32")}
    rows = {"premise": ["a", "b", "c"], "hypothesis": ["x", "y", "z"], "label": [0, 1, 2],
            "idx": [0, 1, 2]}
    for split in ("train", "validation_matched", "validation_mismatched", "test_matched"):
        test = split.startswith("test")
        write_parquet(tmp_path / "mnli", split,
                      {**rows, "label": [-1] * 3 if test else rows["label"]}, features)
    task = get_task("MNLI")
    assert [ex.label for ex in task.read(tmp_path, "mismatched")] == [
        "entailment", "neutral", "contradiction"]
    test = task.read(tmp_path, "test_matched")
    assert [(ex.texts, ex.label, ex.uid) for ex in test][2] == (("c", "z"), None, "2")
    with pytest.raises(ElectraError, match=r"mnli: no test_mismatched split in these Parquet "
                       r"files \(splits: test_matched, train, validation_matched, "
                       r"validation_mismatched\)"):
        task.read(tmp_path, "test_mismatched")


def test_stsb_float32_scores_read_as_the_tsv_writes_them(tmp_path):
    (tmp_path / "STS-B").mkdir()
    (tmp_path / "STS-B" / "dev.tsv").write_text(
        "index\tsentence1\tsentence2\tscore\n0\ta\tb\t3.800\n1\tc\td\t4.333\n")
    tsv = get_task("STS-B").read(tmp_path, "dev")
    hub = tmp_path / "hub"
    write_parquet(hub / "stsb", "validation", glue_columns(SPECS["STS-B"], tsv, False)[0], None)
    examples = get_task("STS-B").read(hub, "dev")
    assert [ex.label for ex in examples] == [3.8, 4.333]
    assert plain(examples) == plain(tsv)


def test_glue_label_names_from_features_flag_or_the_task(tmp_path):
    """Class names come from the features (any order), else --label-names, else the Hub's
    own for the task; a name the task does not know is an error naming the file."""
    texts = {"sentence": ["good", "bad"], "label": [0, 1]}
    write_parquet(tmp_path / "a", "validation", texts,
                  {"label": class_label(["positive", "negative"])})
    assert [ex.label for ex in get_task("SST-2").read(tmp_path / "a", "dev")] == ["1", "0"]
    write_parquet(tmp_path / "b", "validation", texts, None)
    assert [ex.label for ex in get_task("SST-2").read(tmp_path / "b", "dev")] == ["0", "1"]
    flagged = get_task("SST-2", label_names=["positive", "negative"])
    assert [ex.label for ex in flagged.read(tmp_path / "b", "dev")] == ["1", "0"]
    write_parquet(tmp_path / "c", "validation", texts, {"label": class_label(["meh", "ok"])})
    with pytest.raises(ElectraError, match=r"c/validation-00000-of-00001\.parquet: label name "
                       r"'meh' is not one of SST-2's \(0, 1, negative, positive\)"):
        get_task("SST-2").read(tmp_path / "c", "dev")


@pytest.fixture(scope="module")
def conll_files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("conll2000")
    head_sentences(CONLL2000 / "train.txt", root / "train.txt", 300)
    head_sentences(CONLL2000 / "test.txt", root / "test.txt", 100)
    return root


@pytest.mark.skipif(not CONLL2000.is_dir(), reason=f"CoNLL-2000 absent ({CONLL2000})")
@pytest.mark.parametrize("layout", ["config", "saved"])
def test_conll2000_rows_give_the_conll_examples(layout, conll_files, tmp_path):
    """eriktks/conll2000 on the Hub: train and test only (test is the dev split, as with the
    files); chunk tags as class ids whose names (in the Hub's own order, not sorted) are in
    the features."""
    task = get_task("chunk")
    files = {split: task.read(conll_files, split) for split in ("train", "dev")}
    names = sorted({t for exs in files.values() for ex in exs for t in ex.tags}, reverse=True)
    kind = "List" if layout == "saved" else "Sequence"
    data = write_layout(layout, tmp_path, {
        "train": tagging_columns(files["train"], "chunk_tags", names, kind),
        "test": tagging_columns(files["dev"], "chunk_tags", names, kind)}, config="chunk")
    hub_task = get_task("chunk")
    for split in ("train", "dev"):
        assert plain(hub_task.read(data, split)) == plain(files[split])
    assert len(files["train"]) == 300 and len(files["dev"]) == 100
    assert hub_task.labels == task.labels


def test_ner_rows_skip_docstart_and_become_iob2(tmp_path):
    """CoNLL-2003 as the Hub has it (a -DOCSTART- row per document) against the same text in
    IOB1 columns: the same examples."""
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "train.txt").write_text(
        "-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\n"
        "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n")
    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]
    write_parquet(tmp_path / "hub" / "conll2003", "train", {
        "tokens": [["-DOCSTART-"], ["EU", "rejects"], ["Peter", "Blackburn"]],
        "ner_tags": [[0], [3, 0], [1, 2]]}, {"ner_tags": {"feature": class_label(names),
                                                         "_type": "Sequence"}})
    files = get_task("ner").read(tmp_path / "files", "train")
    hub = get_task("ner").read(tmp_path / "hub" / "conll2003", "train")
    assert plain(hub) == plain(files)
    assert [ex.tags for ex in hub] == [["B-ORG", "O"], ["B-PER", "I-PER"]]


def test_tags_without_names_need_label_names_which_the_model_keeps(tmp_path):
    write_parquet(tmp_path, "train", {"tokens": [["Paris", "is"]], "ner_tags": [[2, 0]]}, None)
    with pytest.raises(ElectraError, match=r"train-00000-of-00001\.parquet: 'ner_tags' holds "
                       r"class ids but the features name no classes; give them with "
                       r"--label-names"):
        get_task("ner").read(tmp_path, "train")
    task = get_task("ner", label_names=parse_label_names("O,B-LOC,I-LOC"))
    assert [ex.tags for ex in task.read(tmp_path, "train")] == [["B-LOC", "O"]]
    restored = task_from_state(task.state())
    assert restored.label_names == ("O", "B-LOC", "I-LOC") and restored.labels == task.labels
    assert "label_names" not in get_task("ner").state()  # unchanged where none were given


def test_label_names_flag_forms(tmp_path):
    assert parse_label_names("O, B-X,I-X") == ("O", "B-X", "I-X")
    (tmp_path / "list.json").write_text('["neg", "pos"]')
    (tmp_path / "config.json").write_text('{"id2label": {"1": "pos", "0": "neg"}}')
    assert parse_label_names(str(tmp_path / "list.json")) == ("neg", "pos")
    assert parse_label_names(str(tmp_path / "config.json")) == ("neg", "pos")
    (tmp_path / "gap.json").write_text('{"0": "neg", "2": "pos"}')
    with pytest.raises(ElectraError, match=r"--label-names: .*gap\.json: class ids must run 0"):
        parse_label_names(str(tmp_path / "gap.json"))
    with pytest.raises(ElectraError, match=r"--label-names: an empty name in 'a,,b'"):
        parse_label_names("a,,b")


@pytest.mark.skipif(not SQUAD_DEV.is_file(), reason=f"SQuAD dev absent ({SQUAD_DEV})")
@pytest.mark.parametrize("layout", ["config", "saved"])
def test_squad_rows_give_the_json_examples(layout, tmp_path):
    """The first articles of SQuAD v1.1 dev as train and dev files, and as rajpurkar/squad's
    rows (plain_text/ config, or a save_to_disk folder)."""
    with gzip.open(SQUAD_DEV, "rt", encoding="utf-8") as f:
        articles = json.load(f)["data"]
    files = tmp_path / "files"
    files.mkdir()
    for split, part in (("train", articles[:1]), ("dev", articles[1:2])):
        (files / f"{split}-v1.1.json").write_text(json.dumps(
            {"version": "1.1", "data": [{**a, "paragraphs": a["paragraphs"][:6]} for a in part]}))
    task = get_task("squad")
    original = {split: task.read(files, split) for split in ("train", "dev")}
    data = write_layout(layout, tmp_path / "hub", {
        "train": squad_columns(original["train"]),
        "validation": squad_columns(original["dev"])}, config="plain_text")
    for split in ("train", "dev"):
        assert plain(task.read(data, split)) == plain(original[split])
    assert len(original["dev"]) > 20 and len(original["dev"][0].label.answers) == 3


def test_squad2_questions_without_answers_are_impossible(tmp_path):
    write_parquet(tmp_path / "squad_v2", "validation", {
        "id": ["q1", "q2"], "title": ["T", "T"], "context": ["Cats sleep.", "Cats sleep."],
        "question": ["Who sleeps?", "Who flies?"],
        "answers": [{"text": ["Cats"], "answer_start": [0]}, {"text": [], "answer_start": []}]},
        None)
    examples = get_task("squad2").read(tmp_path, "dev")
    assert [(ex.uid, ex.label.is_impossible, [a.text for a in ex.label.answers])
            for ex in examples] == [("q1", False, ["Cats"]), ("q2", True, [])]


def _user(label_names=()):
    return get_task("user", text_a="review", label="stars", label_names=label_names)


def test_user_parquet_file_and_hub_layouts_match_the_csv(tmp_path):
    rows = [("great film", "good"), ("dull", "bad"), ("fine, really", "good")]
    (tmp_path / "csv").mkdir()
    for split in ("train", "dev"):
        (tmp_path / "csv" / f"{split}.csv").write_text(
            "review,stars\n" + "".join(f'"{t}",{s}\n' for t, s in rows))
    def read(data, label_names=()):
        task = _user(label_names)  # train first: it sets the label set
        return {split: task.read(data, split) for split in ("train", "dev")}

    csv = read(tmp_path / "csv")
    columns = {"review": [t for t, _ in rows], "stars": [1, 0, 1]}
    features = {"review": value("string"), "stars": class_label(["bad", "good"])}
    for layout in ("plain", "data", "saved"):
        data = tmp_path / layout
        if layout == "plain":  # DATA/train.parquet, as DATA/train.csv
            data.mkdir()
            for split in ("train", "dev"):
                pa.parquet.write_table(pa.table(columns).replace_schema_metadata(
                    {"huggingface": json.dumps({"info": {"features": features}})}),
                    data / f"{split}.parquet")
        else:
            write_layout(layout, data, {"train": (columns, features),
                                        "validation": (columns, features)})
        hub = read(data)
        for split in ("train", "dev"):
            assert plain(hub[split]) == plain(csv[split]), layout
    write_parquet(tmp_path / "ids", "train", columns, None)  # no names: ids, as a CSV has them
    assert [ex.label for ex in _user().read(tmp_path / "ids", "train")] == ["1", "0", "1"]
    named = _user(("bad", "good")).read(tmp_path / "ids", "train")
    assert [ex.label for ex in named] == ["good", "bad", "good"]


def test_user_test_split_without_labels(tmp_path):
    features = {"stars": class_label(["bad", "good"])}
    write_parquet(tmp_path, "test", {"review": ["a", "b"], "stars": [-1, -1]}, features)
    task = _user()
    task.labels = ["bad", "good"]
    assert [(ex.texts, ex.label) for ex in task.read(tmp_path, "test")] == [
        (("a",), None), (("b",), None)]


def test_missing_split_column_shard_and_class_id_errors(tmp_path):
    texts = {"sentence": ["a", "b"], "label": [0, 1]}
    write_parquet(tmp_path / "sst2", "train", texts, None)
    with pytest.raises(ElectraError, match=r"sst2: no validation or dev split in these Parquet "
                       r"files \(splits: train\)"):
        get_task("SST-2").read(tmp_path, "dev")
    write_parquet(tmp_path / "rte", "train", texts, None)
    with pytest.raises(ElectraError, match=r"rte/train-00000-of-00001\.parquet: no column "
                       r"'sentence1', 'sentence2' in the train split \(columns: sentence, "
                       r"label\)"):
        get_task("RTE").read(tmp_path, "train")
    saved = write_saved_split(tmp_path / "saved", "train", {"text": ["a"], "label": [0]}, None,
                              files=1)
    with pytest.raises(ElectraError, match=r"saved: no column 'sentence' in the train split "
                       r"\(columns: text, label\)"):
        get_task("SST-2").read(saved, "train")
    shards = write_parquet(tmp_path / "cola", "train", texts, None, shards=3)
    shards[1].unlink()
    with pytest.raises(ElectraError, match=r"cola: the train split's Parquet shards are not 3 "
                       r"files numbered 0..2 \(found: train-00000-of-00003.parquet, "
                       r"train-00002-of-00003.parquet\)"):
        get_task("CoLA").read(tmp_path, "train")
    write_parquet(tmp_path / "x" / "sst2", "train", {**texts, "label": [0, 7]},
                  {"label": class_label(["negative", "positive"])})
    (tmp_path / "x" / "sst2" / "train-00000-of-00001.parquet").rename(
        tmp_path / "x" / "sst2" / "train-00000-of-00001-0a1b2c.parquet")  # older uploads' names
    with pytest.raises(ElectraError, match=r"sst2/train-00000-of-00001-0a1b2c\.parquet:row 2: "
                       r"'label' is 7, but there are 2 label names \(0, 1\)"):
        get_task("SST-2").read(tmp_path / "x", "train")


def test_a_folder_without_a_hub_layout_keeps_the_files_error(tmp_path):
    assert find_layout(tmp_path) is None
    with pytest.raises(ElectraError, match=r"train\.tsv: file not found"):
        get_task("SST-2").read(tmp_path, "train")
    with pytest.raises(ElectraError, match=r"no train\.txt for the train split of chunk"):
        get_task("chunk").read(tmp_path, "train")

"""Task readers on the real GLUE/CoNLL/UD files (row counts as in SOURCES.md) and on crafted
malformed files (the error names file:line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from electra.errors import ElectraError
from electra.tasks import get_task
from electra.tasks.glue import GlueTask

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

GLUE = SHARED_DATA / "glue"
needs_glue = pytest.mark.skipif(not GLUE.is_dir(), reason=f"GLUE data absent ({GLUE})")


@needs_glue
@pytest.mark.parametrize("task,split,rows", [
    ("CoLA", "train", 8551), ("CoLA", "dev", 1043), ("CoLA", "test", 1063),
    ("SST-2", "train", 67349), ("SST-2", "dev", 872), ("SST-2", "test", 1821),
    ("RTE", "train", 2490), ("RTE", "dev", 277), ("RTE", "test", 3000),
    ("WNLI", "train", 635), ("WNLI", "dev", 71), ("WNLI", "test", 146),
    ("QNLI", "dev", 5463), ("QNLI", "test", 5463),
])
def test_glue_row_counts(task: str, split: str, rows: int) -> None:
    examples = get_task(task).read(GLUE, split)
    assert len(examples) == rows
    if split == "test":
        assert examples[0].label is None and examples[0].uid == "0"
    else:
        assert all(ex.label is not None for ex in examples)


@needs_glue
def test_glue_columns() -> None:
    cola = get_task("cola").read(GLUE, "dev")[0]  # headerless: source, label, mark, sentence
    assert cola.texts == ("The sailors rode the breeze clear of the rocks.",)
    assert cola.label == "1" and cola.where.endswith("CoLA/dev.tsv:1")
    rte = get_task("RTE").read(GLUE, "train")[0]
    assert rte.texts[1] == "Weapons of Mass Destruction Found in Iraq." and \
        rte.label == "not_entailment" and rte.where.endswith(":2")


def _glue_dir(tmp_path: Path, task: str, text: str) -> Path:
    (tmp_path / task).mkdir()
    (tmp_path / task / "dev.tsv").write_text(text)
    return tmp_path


@pytest.mark.parametrize("task,text,message", [
    ("RTE", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\n",
     "dev.tsv:3: 3 columns, expected 4"),
    ("RTE", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n",
     "dev.tsv:2: label 'maybe' is not one of"),
    ("SST-2", "sentence\tlabel\nfine\t1\n \t0\n", "dev.tsv:3: empty text"),
    ("CoLA", "src\t1\t\tok\nsrc\t2\t\tbad label\n", "dev.tsv:2: label '2'"),
    ("STS-B", "index\tsentence1\tsentence2\tscore\n0\ta\tb\tfive\n", "dev.tsv:2: label 'five' "
     "is not a number"),
    ("SST-2", "text\tlabel\nfine\t1\n", "dev.tsv:1: missing column"),
])
def test_malformed_glue_rows_name_file_and_line(tmp_path: Path, task: str, text: str,
                                                message: str) -> None:
    data = _glue_dir(tmp_path, task, text)
    with pytest.raises(ElectraError, match=message.replace("(", r"\(")):
        GlueTask(task).read(data, "dev")


def test_missing_split_file(tmp_path: Path) -> None:
    with pytest.raises(ElectraError, match="train.tsv: file not found"):
        get_task("sst-2").read(tmp_path, "train")


@pytest.mark.skipif(not (SHARED_DATA / "conll2000").is_dir(), reason="CoNLL-2000 data absent")
def test_conll2000_counts() -> None:
    task = get_task("chunk")
    train = task.read(SHARED_DATA / "conll2000", "train")
    dev = task.read(SHARED_DATA / "conll2000", "dev")  # the test file: CoNLL-2000 has no dev
    assert (len(train), sum(len(e.words) for e in train)) == (8936, 211727)
    assert (len(dev), sum(len(e.words) for e in dev)) == (2012, 47377)
    assert train[0].words[:2] == ["Confidence", "in"] and train[0].tags[:2] == ["B-NP", "B-PP"]
    assert len(task.labels) == 22


@pytest.mark.skipif(not (SHARED_DATA / "ud_english_ewt").is_dir(), reason="UD EWT data absent")
def test_ud_ewt_counts() -> None:
    task = get_task("pos")
    dev = task.read(SHARED_DATA / "ud_english_ewt", "dev")
    assert len(dev) == 2001
    assert dev[0].words == ["From", "the", "AP", "comes", "this", "story", ":"]
    assert dev[0].tags == ["ADP", "DET", "PROPN", "VERB", "DET", "NOUN", "PUNCT"]


def test_conllu_skips_multiword_and_empty_nodes(tmp_path: Path) -> None:
    rows = ["# text = don't go", "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_",
            "1\tdo\tdo\tAUX\t_\t_\t0\troot\t_\t_", "2\tn't\tnot\tPART\t_\t_\t1\tadvmod\t_\t_",
            "2.1\tgo\tgo\tVERB\t_\t_\t_\t_\t_\t_", "3\tgo\tgo\tVERB\t_\t_\t1\txcomp\t_\t_", ""]
    (tmp_path / "train.conllu").write_text("\n".join(rows) + "\n")
    ex = get_task("pos").read(tmp_path, "train")
    assert [(e.words, e.tags) for e in ex] == [(["do", "n't", "go"], ["AUX", "PART", "VERB"])]
    (tmp_path / "dev.conllu").write_text("1\tdo\tdo\tAUX\n")
    with pytest.raises(ElectraError,
                       match=r"dev.conllu:1: 4 tab-separated columns, expected 10"):
        get_task("pos").read(tmp_path, "dev")


def test_ner_reads_iob1_as_iob2_and_skips_docstart(tmp_path: Path) -> None:
    (tmp_path / "train.txt").write_text(
        "-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n"
        "German JJ I-NP I-MISC\ncall NN I-NP O\n\nPeter NNP I-NP I-PER\nBlackburn NNP I-NP "
        "I-PER\n")
    (tmp_path / "valid.txt").write_text("EU NNP I-NP I-ORG\nrejects VBZ\n")
    task = get_task("ner")
    ex = task.read(tmp_path, "train")
    assert [e.tags for e in ex] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]
    with pytest.raises(ElectraError, match=r"valid.txt:2: 2 columns, expected 4"):
        task.read(tmp_path, "dev")


def test_user_task_readers_and_errors(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text('text,label\n"good, really",pos\nbad,neg\n')
    (tmp_path / "dev.jsonl").write_text('{"text": "ok", "label": "pos"}\n'
                                        '{"text": "meh", "label": "neutral"}\n')
    task = get_task("user", text_a="text", label="label")
    train = task.read(tmp_path, "train")
    assert train[0].texts == ("good, really",) and task.labels == ["neg", "pos"]
    with pytest.raises(ElectraError, match=r"dev.jsonl:2: label 'neutral' is not one of"):
        task.read(tmp_path, "dev")
    (tmp_path / "dev.jsonl").unlink()
    (tmp_path / "dev.tsv").write_text("text\tlabel\nok\tpos\textra\n")
    with pytest.raises(ElectraError, match=r"dev.tsv:2: 3 columns, expected 2"):
        task.read(tmp_path, "dev")
    with pytest.raises(ElectraError, match="needs --text-a"):
        get_task("user")
    (tmp_path / "dev.tsv").write_text("a\tb\tscore\nx\ty\t3.5\nx\ty\thigh\n")
    real = get_task("user", text_a="a", text_b="b", label="score", label_type="real")
    with pytest.raises(ElectraError, match=r"dev.tsv:3: label 'high' is not a number"):
        real.read(tmp_path, "dev")


def test_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "dev.tsv").write_text(
        "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA b.\tA c.\n",
        encoding="utf-8")
    ex = get_task("MRPC").read(tmp_path, "dev")
    assert ex[0].texts == ("A b.", "A c.") and ex[0].label == "1"


_LAYOUTS = {  # header, one row, for the GLUE files not in ../shared/data (real column layouts)
    ("MRPC", "train"): ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t7\t8\tA b.\tA c."),
    ("MRPC", "test"): ("index\t#1 ID\t#2 ID\t#1 String\t#2 String", "0\t7\t8\tA b.\tA c."),
    ("STS-B", "train"): ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1"
                         "\tsentence2\tscore", "0\tnews\tf\t2012\t1\tx\ty\tA b.\tA c.\t3.800"),
    ("STS-B", "test"): ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1"
                        "\tsentence2", "0\tnews\tf\t2012\t1\tx\ty\tA b.\tA c."),
    ("QQP", "train"): ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                       "5\t1\t2\tA b?\tA c?\t0"),
    ("QQP", "test"): ("id\tquestion1\tquestion2", "9\tA b?\tA c?"),
    ("MNLI", "train"): ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t"
                        "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\t"
                        "sentence2\tlabel1\tgold_label",
                        "0\t1\t1e\tgov\t( A )\t( B )\t(A)\t(B)\tA b.\tA c.\tneutral\tneutral"),
    ("MNLI", "dev_matched"): ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t"
                              "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\t"
                              "sentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\t"
                              "gold_label", "0\t1\t1e\tgov\t( A )\t( B )\t(A)\t(B)\tA b.\tA c.\t"
                              "neutral\tneutral\tneutral\tneutral\tneutral\tneutral"),
    ("MNLI", "test_mismatched"): ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t"
                                  "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\t"
                                  "sentence1\tsentence2",
                                  "0\t1\t1e\tgov\t( A )\t( B )\t(A)\t(B)\tA b.\tA c."),
}


@pytest.mark.parametrize("task,split", list(_LAYOUTS))
def test_glue_layouts_of_absent_tasks(tmp_path: Path, task: str, split: str) -> None:
    header, row = _LAYOUTS[(task, split)]
    (tmp_path / task).mkdir()
    (tmp_path / task / f"{split}.tsv").write_text(f"{header}\n{row}\n")
    name = {"dev_matched": "matched"}.get(split, split)
    ex = get_task(task).read(tmp_path, name)
    assert len(ex) == 1 and ex[0].texts[0].startswith("A b")
    if split.startswith("test"):
        assert ex[0].label is None and ex[0].uid == row.split("\t")[0]
    else:
        assert ex[0].label in ("1", 3.8, "0", "neutral")


def test_qqp_train_skips_truncated_rows(tmp_path: Path) -> None:
    header, row = _LAYOUTS[("QQP", "train")]
    (tmp_path / "QQP").mkdir()
    (tmp_path / "QQP" / "train.tsv").write_text(f"{header}\n{row}\n6\t1\t2\tcut off\n{row}\n")
    assert len(get_task("QQP").read(tmp_path, "train")) == 2

"""The one CoNLL reader (electra.conll) behind fine-tuning's tagging tasks and CVT: the real
CoNLL-2000 and UD English EWT files read the same through both, and each format detail
(gzip, -DOCSTART-, IOB1, comments, multiword tokens, empty nodes) is handled once."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from electra.conll import read_columns, read_conllu
from electra.cvt.tasks import CVTTask
from electra.errors import ElectraError
from electra.tagschemes import is_valid_iob
from electra.tasks import get_task

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CONLL2000 = SHARED / "conll2000"
EWT = SHARED / "ud_english_ewt"
needs_conll2000 = pytest.mark.skipif(not (CONLL2000 / "train.txt").is_file(),
                                     reason=f"CoNLL-2000 data absent ({CONLL2000})")
needs_ewt = pytest.mark.skipif(not (EWT / "en_ewt-ud-dev.conllu.gz").is_file(),
                               reason=f"UD English EWT data absent ({EWT})")


@needs_conll2000
@pytest.mark.parametrize("name, sentences, words", [("train.txt", 8936, 211727),
                                                    ("test.txt", 2012, 47377)])
def test_conll2000_read_alike_by_finetuning_and_cvt(name: str, sentences: int,
                                                     words: int) -> None:
    sents = read_columns(CONLL2000 / name)
    assert (len(sents), sum(len(s.words) for s in sents)) == (sentences, words)  # SOURCES.md
    assert all(is_valid_iob(t) and len(s.tags) == len(s.words) for s in sents for t in s.tags)
    assert sents[0].where == f"{CONLL2000 / name}:1"
    cvt = CVTTask("chunk").read_file(CONLL2000 / name)
    split = {"train.txt": "train", "test.txt": "test"}[name]
    finetune = get_task("chunk").read(CONLL2000, split)
    assert [(s.words, s.tags, s.where) for s in cvt] == [(s.words, s.tags, s.where)
                                                         for s in sents]
    assert [(e.words, e.tags, e.where) for e in finetune] == [(s.words, s.tags, s.where)
                                                              for s in sents]
    assert [e.index for e in finetune] == list(range(sentences))


@needs_ewt
def test_ud_ewt_read_alike_by_finetuning_and_cvt() -> None:
    path = EWT / "en_ewt-ud-dev.conllu.gz"
    trees = read_conllu(path)
    assert len(trees) == 2001
    assert all(len(s.heads) == len(s.rels) == len(s.upos) == len(s.words) for s in trees)
    assert all(0 <= h <= len(s.words) for s in trees for h in s.heads)
    pos = get_task("pos").read(EWT, "dev")
    dep = CVTTask("dep").read_file(path)
    assert [(e.words, e.tags, e.where) for e in pos] == [(s.words, s.upos, s.where)
                                                         for s in trees]
    assert [(s.words, s.heads, s.rels) for s in dep] == [(s.words, s.heads, s.rels)
                                                         for s in trees]
    # `where` is the line of the first word, also when a multiword token comes first
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    today = next(s for s in trees if s.words[:2] == ["Today", "'s"])
    line = int(today.where.rsplit(":", 1)[1])
    assert lines[line - 2].startswith("1-2\tToday's") and lines[line - 1].startswith("1\tToday")
    # XPOS instead of UPOS, untouched trees
    xpos = read_conllu(path, tree=False, tag_column=4)
    assert xpos[0].tags == ["IN", "DT", "NNP", "VBZ", "DT", "NN", ":"]
    assert xpos[0].upos == trees[0].upos and xpos[0].heads == []


def test_gzipped_iob1_columns_with_docstart_to_iob2(tmp_path: Path) -> None:
    f = tmp_path / "eng.train.gz"
    with gzip.open(f, "wt", encoding="utf-8") as handle:
        handle.write("-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\n"
                     "-DOCSTART- -X- -X- O\nPeter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n")
    raw = read_columns(f)
    assert [s.tags for s in raw] == [["I-ORG", "O"], ["I-PER", "I-PER"]]
    assert [s.where for s in raw] == [f"{f}:3", f"{f}:7"]
    assert [s.tags for s in read_columns(f, iob2=True)] == [["B-ORG", "O"], ["B-PER", "I-PER"]]
    assert [s.tags for s in read_columns(f, tag_column=2)] == [["I-NP", "I-VP"],
                                                               ["I-NP", "I-NP"]]


def test_columns_errors_name_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "train.txt"
    f.write_text("a DT B-NP\nb NN S-NP\n")
    with pytest.raises(ElectraError, match=f"^{f}:2: label 'S-NP' is not IOB"):
        read_columns(f)
    assert read_columns(f, check_iob=False)[0].tags == ["B-NP", "S-NP"]  # BIOES files too
    with pytest.raises(ElectraError, match=f"^{f}:1: 3 columns, expected the label in column 4"):
        read_columns(f, tag_column=3)
    f.write_text("\n-DOCSTART- -X- O\n\n")
    with pytest.raises(ElectraError, match=f"^{f}: no sentences"):
        read_columns(f)
    with pytest.raises(ElectraError, match=f"^{tmp_path / 'absent.txt'}: file not found"):
        read_columns(tmp_path / "absent.txt")


def test_unlabeled_words_file(tmp_path: Path) -> None:
    f = tmp_path / "input.txt"
    f.write_text("The\ndog\n\nbarks\n")
    assert [(s.words, s.tags) for s in read_columns(f, labeled=False)] == [
        (["The", "dog"], []), (["barks"], [])]


def test_conllu_comments_multiword_tokens_and_empty_nodes(tmp_path: Path) -> None:
    rows = ["# sent_id = 1", "# text = don't go", "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_",
            "1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_", "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_",
            "2.1\tgo\tgo\tVERB\t_\t_\t_\t_\t_\t_", "3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_",
            "", "# sent_id = 2", "1\tok\tok\tINTJ\tUH\t_\t_\t_\t_\t_", ""]
    f = tmp_path / "x.conllu"
    f.write_text("\n".join(rows) + "\n")
    first, second = read_conllu(f, tree=False)
    assert (first.words, first.tags, first.where) == (["do", "n't", "go"],
                                                      ["AUX", "PART", "VERB"], f"{f}:4")
    assert (second.words, second.where) == (["ok"], f"{f}:10")
    with pytest.raises(ElectraError, match=f"^{f}:10: HEAD '_' is not a number"):
        read_conllu(f)  # a tree needs HEAD and DEPREL on every word

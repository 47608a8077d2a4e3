"""CVT data: CoNLL readers and their file:line errors, BIOES (section 4.3.1), unlabeled text,
word vectors, and UAS/LAS with punctuation excluded."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from electra.conll import Sentence, read_columns, read_conllu
from electra.cvt.tasks import CVTTask, attachment_scores
from electra.cvt.unlabeled import load_sentences, tokenize
from electra.cvt.vocab import Vocab, build_vocab, normalize, read_word_vectors
from electra.errors import ElectraError
from electra.tagschemes import from_bioes, iob1_to_iob2, to_bioes
from electra.tasks.metrics import chunks

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


# ---- BIOES (4.3.1) ----

def test_bioes_encoding_section_4_3_1():
    iob2 = ["B-NP", "I-NP", "I-NP", "B-VP", "O", "B-NP", "B-NP", "I-NP"]
    assert to_bioes(iob2) == ["B-NP", "I-NP", "E-NP", "S-VP", "O", "S-NP", "B-NP", "E-NP"]


@pytest.mark.parametrize("tags", [
    ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC"],  # IOB1 (CoNLL-2003)
    ["B-NP", "I-NP", "B-NP", "O", "B-PP", "B-VP", "I-VP"],  # IOB2 (CoNLL-2000)
    ["O", "O"], ["B-X"], ["I-X"],
])
def test_bioes_round_trips(tags):
    assert from_bioes(to_bioes(tags)) == iob1_to_iob2(tags)
    assert chunks(to_bioes(tags)) == chunks(tags)


def test_bioes_round_trips_on_all_of_conll2000():
    path = SHARED / "conll2000" / "train.txt"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    for s in read_columns(path):
        assert from_bioes(to_bioes(s.tags)) == s.tags


def test_from_bioes_keeps_ill_formed_predictions_as_conlleval_reads_them():
    # an E- with no opener is a chunk of its own; a type change starts a new chunk
    assert from_bioes(["E-NP", "I-VP", "E-VP", "B-NP", "E-PP"]) == \
        ["B-NP", "B-VP", "I-VP", "B-NP", "B-PP"]


# ---- readers and their errors ----

def test_read_conll2003_iob1_with_docstart(tmp_path):
    f = tmp_path / "eng.train"
    f.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n"
                 "German JJ B-NP I-MISC\n\nPeter NNP B-NP I-PER\n")
    sents = read_columns(f)
    assert [s.words for s in sents] == [["EU", "rejects", "German"], ["Peter"]]
    assert sents[0].tags == ["I-ORG", "O", "I-MISC"]
    assert sents[1].where == f"{f}:7"
    task = CVTTask("ner")
    task.set_labels(sents)
    assert task.labels == ["O", "S-MISC", "S-ORG", "S-PER"]


@pytest.mark.parametrize("text, line, what", [
    ("a DT B-NP\nb NN\n", 2, "2 columns, expected 3"),
    ("a DT B-NP\n\nb NN X-NP\n", 3, "not IOB"),
    ("a\n", 1, "expected a word and a label"),
])
def test_bad_columns_file_names_file_and_line(tmp_path, text, line, what):
    f = tmp_path / "train.txt"
    f.write_text(text)
    with pytest.raises(ElectraError, match=f"^{f}:{line}: .*{what}"):
        read_columns(f)


def _conllu_line(i, word, head, rel="dep", upos="NOUN"):
    return "\t".join([str(i), word, word, upos, "_", "_", str(head), rel, "_", "_"])


def test_read_conllu_skips_multiword_tokens_and_empty_nodes(tmp_path):
    f = tmp_path / "x.conllu.gz"
    lines = ["# text = Don't go", "1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_",
             _conllu_line(1, "Do", 3, "aux", "AUX"), _conllu_line(2, "n't", 3, "advmod", "PART"),
             "2.1\tx\t_\t_\t_\t_\t_\t_\t_\t_", _conllu_line(3, "go", 0, "root", "VERB"), ""]
    with gzip.open(f, "wt") as h:
        h.write("\n".join(lines) + "\n")
    (s,) = read_conllu(f)
    assert s.words == ["Do", "n't", "go"]
    assert s.heads == [3, 3, 0] and s.rels == ["aux", "advmod", "root"]
    assert s.tags == s.upos == ["AUX", "PART", "VERB"]


@pytest.mark.parametrize("body, line, what", [
    ([_conllu_line(1, "a", 0), "2\tb\tb\tNOUN"], 3, "4 tab-separated columns, expected 10"),
    ([_conllu_line(1, "a", 0), _conllu_line(3, "b", 1)], 3, "word ID '3', expected 2"),
    ([_conllu_line(1, "a", 0), _conllu_line(2, "b", "x")], 3, "HEAD 'x' is not a number"),
    ([_conllu_line(1, "a", 0), _conllu_line(2, "b", 7)], 3, "HEAD 7 is past"),
    ([_conllu_line(1, "a", 0, "_")], 2, "no DEPREL"),
])
def test_bad_conllu_names_file_and_line(tmp_path, body, line, what):
    f = tmp_path / "train.conllu"
    f.write_text("\n".join(["# sent_id = 1", *body, ""]) + "\n")
    with pytest.raises(ElectraError, match=f"^{f}:{line}: {what}"):
        read_conllu(f)


def test_invalid_utf8_names_file_and_line(tmp_path):
    f = tmp_path / "train.txt"
    f.write_bytes(b"a DT B-NP\n\xff NN I-NP\n")
    with pytest.raises(ElectraError, match=f"^{f}:2: not valid UTF-8"):
        read_columns(f)


def test_ud_ewt_reads_as_pos_and_dep():
    path = SHARED / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    sents = read_conllu(path)
    assert len(sents) == 2001
    assert all(len(s.heads) == len(s.words) == len(s.upos) for s in sents)


# ---- UAS / LAS (4.3.1: punctuation left out) ----

def test_uas_las_on_a_hand_made_tree_without_punctuation():
    # "She ate fish ." : ate is root; She->ate nsubj; fish->ate obj; .->ate punct
    gold = Sentence(["She", "ate", "fish", "."], heads=[2, 0, 2, 2],
                    rels=["nsubj", "root", "obj", "punct"], upos=["PRON", "VERB", "NOUN", "PUNCT"])
    # head of "fish" wrong, label of "She" wrong, the punctuation wrong in both ways
    heads = [[2, 0, 1, 3]]
    rels = [["obj", "root", "obj", "det"]]
    scores = attachment_scores([gold], heads, rels)
    assert scores == {"uas": pytest.approx(2 / 3), "las": pytest.approx(1 / 3)}
    # counting punctuation too would give 2/4 and 1/4
    assert attachment_scores([gold], heads, rels, punct=()) == {"uas": 0.5, "las": 0.25}


# ---- unlabeled text and vocabulary ----

def test_tokenize_penn_treebank_style():
    assert tokenize("Don't sell: it's $5.3 million, (really)<br />done.") == [
        "Do", "n't", "sell", ":", "it", "'s", "$", "5.3", "million", ",", "(", "really", ")",
        "done", "."]


def test_unlabeled_reads_what_prepare_reads(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("First one here. Second\nwraps lines.\n\nThird!\n")
    with gzip.open(tmp_path / "d" / "b.jsonl.gz", "wt") as h:
        h.write('{"text": "JSON text works. Yes it does."}\n')
    sents = load_sentences([tmp_path / "d"], 100)
    assert sents == [["First", "one", "here", "."], ["Second", "wraps", "lines", "."],
                     ["Third", "!"], ["JSON", "text", "works", "."], ["Yes", "it", "does", "."]]
    assert len(load_sentences([tmp_path / "d"], 2)) == 2


def test_vocab_normalises_words_but_chars_keep_case():
    v = build_vocab([["The", "Price", "1999", "Pp"]], [["new", "new", "once"]], max_words=100)
    assert normalize("Price1999") == "price0000"
    assert v.word_id("PRICE") == v.word_id("price") != 1
    assert v.word_id("new") != 1 and v.word_id("once") == 1  # unlabeled words need 2 sightings
    assert v.char_ids("Pp", 20)[0] != v.char_ids("Pp", 20)[1]
    assert Vocab.from_json(v.to_json()).words == v.words


def test_word_vectors_glove_and_word2vec_formats(tmp_path):
    glove = tmp_path / "g.txt"
    glove.write_text("the 0.1 0.2\nCat 1 2\ncat 3 4\n")
    words, vecs = read_word_vectors(glove)
    assert words == ["the", "cat"]  # "Cat" normalised; the first vector of a form wins
    assert vecs.flatten().tolist() == pytest.approx([0.1, 0.2, 1.0, 2.0])
    w2v = tmp_path / "w.txt"
    w2v.write_text("2 3\nx 1 2 3\ny 4 5 6\n")
    assert read_word_vectors(w2v)[0] == ["x", "y"]
    bad = tmp_path / "b.txt"
    bad.write_text("x 1 2\ny 1\n")
    with pytest.raises(ElectraError, match=f"^{bad}:2: 1 numbers, expected 2"):
        read_word_vectors(bad)

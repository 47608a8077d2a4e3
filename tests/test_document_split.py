"""WikiGold as an `ner` dataset: the split by article and the IOB1 reading, scored as conlleval
scores the released tags (seqeval's default mode is conlleval's)."""

from __future__ import annotations

import json
import random

import pytest
from seqeval.metrics import f1_score as seqeval_f1

from electra.conll import read_columns
from electra.errors import ElectraError
from electra.tasks import get_task
from electra.tasks import metrics as M
from electra.tasks.document_split import WIKIGOLD, read_documents, split_documents
from tests.conftest import SHARED_DATA

WIKIGOLD_DIR = SHARED_DATA / "wikigold"
needs_wikigold = pytest.mark.skipif(not (WIKIGOLD_DIR / WIKIGOLD.file).is_file(),
                                    reason="WikiGold not in ../shared/data/wikigold")


def _words_and_tags(path):
    return [(s.words, s.tags) for s in read_columns(path, check_iob=False)]


@needs_wikigold
def test_wikigold_splits_by_article_into_a_partition(tmp_path):
    record = split_documents("wikigold", WIKIGOLD_DIR, tmp_path / "a")
    docs = record["documents"]
    assert {k: len(v) for k, v in docs.items()} == {"train": 87, "dev": 29, "test": 29}
    assert sorted(docs["train"] + docs["dev"] + docs["test"]) == list(range(145))
    assert docs["dev"][:3] == [3, 8, 13] and docs["test"][:3] == [4, 9, 14]
    sentences = {s: _words_and_tags(tmp_path / "a" / f"{s}.txt") for s in docs}
    assert {s: len(v) for s, v in sentences.items()} == {"train": 1023, "dev": 376,
                                                         "test": 297}
    released = _words_and_tags(WIKIGOLD_DIR / WIKIGOLD.file)
    assert sum(len(w) for v in sentences.values() for w, _ in v) == 39_007
    # every released sentence lands in exactly one split, words and tags unchanged
    assert sorted(map(repr, released)) == sorted(repr(x) for v in sentences.values() for x in v)
    # the same split every time, byte for byte
    split_documents("wikigold", WIKIGOLD_DIR / WIKIGOLD.file, tmp_path / "b")
    for name in ("train.txt", "dev.txt", "test.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert json.loads((tmp_path / "a" / "split.json").read_text())["sha256"] == record["sha256"]


@needs_wikigold
@pytest.mark.parametrize("seed", range(3))
def test_ner_task_reads_the_split_as_conlleval_scores_it(tmp_path, seed):
    """The `ner` task converts WikiGold's IOB1 to IOB2; span F1 of converted predictions equals
    conlleval's (seqeval) on the raw IOB1 tags, for the gold against itself and for perturbed
    copies."""
    split_documents("wikigold", WIKIGOLD_DIR, tmp_path)
    task = get_task("ner")
    examples = task.read(tmp_path, "dev")
    raw = [tags for _, tags in _words_and_tags(tmp_path / "dev.txt")]
    assert [ex.words for ex in examples] == [w for w, _ in _words_and_tags(tmp_path / "dev.txt")]
    assert task.score(examples, [ex.tags for ex in examples])["f1"] == 1.0
    assert seqeval_f1(raw, raw) == 1.0
    rng = random.Random(seed)
    labels = ["O", "I-PER", "I-LOC", "I-ORG", "I-MISC", "B-LOC", "B-ORG"]
    perturbed = [[rng.choice(labels) if rng.random() < 0.15 else t for t in tags]
                 for tags in raw]
    from electra.tagschemes import iob1_to_iob2

    ours = task.score(examples, [iob1_to_iob2(tags) for tags in perturbed])
    assert 0.3 < ours["f1"] < 1.0
    assert ours["f1"] == pytest.approx(seqeval_f1(raw, perturbed), abs=1e-12)
    assert ours == pytest.approx(M.span_f1(perturbed, raw))


def test_documents_are_read_between_docstart_lines(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("a O\n\n-DOCSTART- O\n\nb I-PER\nc O\n\nd O\n-DOCSTART- O\n\n"
                    "-DOCSTART- O\ne O\n")
    assert read_documents(path) == [["a O", ""], ["", "b I-PER", "c O", "", "d O"],
                                    ["e O"]]


def test_a_file_with_another_document_count_is_refused(tmp_path):
    path = tmp_path / WIKIGOLD.file
    path.write_text("a O\n-DOCSTART- O\nb O\n")
    with pytest.raises(ElectraError, match="2 documents, expected 145"):
        split_documents("wikigold", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ElectraError, match="file not found"):
        split_documents("wikigold", tmp_path / "missing", tmp_path / "out")
    with pytest.raises(ElectraError, match="unknown document split"):
        split_documents("conll", tmp_path, tmp_path / "out")

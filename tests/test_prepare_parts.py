"""Preparing one corpus on several machines (`prepare --num-shards N --shard-index I`) and
combining the parts (`prepare --merge`, `electra.data.merge`): the same examples as a
one-machine prepare, held-out split included, grouped by part; parts that do not belong
together are refused before anything is written."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from electra.cli import main
from electra.data.dataset import PretrainingDataset, verify_data
from electra.data.merge import merge_parts
from electra.data.prepare import prepare_corpus
from electra.data.vocab import train_vocab
from electra.errors import ElectraError

PARTS = 3


def _examples(data: Path, split: str) -> list[tuple[tuple[int, ...], int]]:
    dataset = PretrainingDataset(data, split)
    return [(tuple(tokens.tolist()), sep) for tokens, sep in map(dataset.example,
                                                                 range(len(dataset)))]


def _prepare(corpus: Path, vocab: Path, out: Path, **kwargs) -> dict:
    return prepare_corpus([corpus], vocab, 32, out, heldout_fraction=0.05, show_progress=False,
                          workers=1, **kwargs)


@pytest.fixture(scope="module")
def prepared(corpus_file, vocab_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("parts")
    _prepare(corpus_file, vocab_dir, root / "whole")
    for i in range(PARTS):
        _prepare(corpus_file, vocab_dir, root / f"part{i}", num_parts=PARTS, part_index=i)
    return root


def test_merged_parts_hold_the_one_machine_examples(prepared, tmp_path):
    parts = [prepared / f"part{i}" for i in (2, 0, 1)]  # any order on the command line
    manifest = merge_parts(parts, tmp_path / "merged")
    whole = json.loads((prepared / "whole" / "manifest.json").read_text())
    for split in ("train", "heldout"):
        merged = _examples(tmp_path / "merged", split)
        assert Counter(merged) == Counter(_examples(prepared / "whole", split))
        # grouped by part: part 0's examples first, in its own order
        part0 = _examples(prepared / "part0", split)
        assert merged[:len(part0)] == part0
        for key in ("num_documents", "num_examples", "num_tokens"):
            assert manifest["splits"][split][key] == whole["splits"][split][key]
    assert manifest["splits"]["heldout"]["num_documents"] > 0
    verify_data(tmp_path / "merged")  # every shard's size and SHA-256 as listed
    assert [m["part"] for m in manifest["merged_from"]] == [0, 1, 2]


def test_a_part_is_the_documents_of_its_index_modulo_n(prepared):
    documents = [json.loads((prepared / f"part{i}" / "manifest.json").read_text())["splits"]
                 for i in range(PARTS)]
    whole = json.loads((prepared / "whole" / "manifest.json").read_text())["splits"]
    total = sum(p["train"]["num_documents"] + p.get("heldout", {}).get("num_documents", 0)
                for p in documents)
    assert total == whole["train"]["num_documents"] + whole["heldout"]["num_documents"]
    sizes = [p["train"]["num_documents"] + p.get("heldout", {}).get("num_documents", 0)
             for p in documents]
    assert max(sizes) - min(sizes) <= 1


def test_the_cli_merges_and_pretraining_reads_the_result(prepared, tmp_path, capsys):
    out = tmp_path / "merged"
    assert main(["prepare", "--merge", *(str(prepared / f"part{i}") for i in range(PARTS)),
                 "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["splits"]["train"]["num_examples"] == len(PretrainingDataset(out))


@pytest.mark.parametrize("case", ["another vocabulary", "another --num-shards", "missing part",
                                  "part twice", "not a part"])
def test_parts_that_do_not_belong_together_are_refused(case, prepared, corpus_file, tmp_path):
    parts = [prepared / f"part{i}" for i in range(PARTS)]
    if case == "another vocabulary":
        vocab = train_vocab([corpus_file], 300, tmp_path / "vocab", show_progress=False)
        _prepare(corpus_file, vocab, tmp_path / "other", num_parts=PARTS, part_index=1)
        parts[1], match = tmp_path / "other", "prepared with a different vocabulary"
    elif case == "another --num-shards":
        _prepare(corpus_file, prepared / "whole" / "tokenizer", tmp_path / "other",
                 num_parts=2, part_index=1)
        parts[1], match = tmp_path / "other", "prepared with --num-shards 2"
    elif case == "missing part":
        parts, match = parts[:2], "part 2 of 3 is missing"
    elif case == "part twice":
        parts[2], match = parts[1], "part 1 given twice"
    else:
        parts[0], match = prepared / "whole", "not a part of a corpus"
    with pytest.raises(ElectraError, match=match):
        merge_parts(parts, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_a_shard_index_out_of_range_is_refused(corpus_file, vocab_dir, tmp_path):
    with pytest.raises(ElectraError, match="--shard-index must be in"):
        _prepare(corpus_file, vocab_dir, tmp_path / "p", num_parts=2, part_index=2)
    assert not (tmp_path / "p").exists()

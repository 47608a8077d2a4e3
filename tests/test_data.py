"""Corpus readers, sentence packing, shard preparation and the pre-training batch stream."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from electra.cli import main
from electra.data import prepare as prepare_module
from electra.data.corpus import iter_documents, split_sentences
from electra.data.dataset import PretrainingDataset, iterate_batches, verify_data
from electra.data.packing import ExampleBuilder, document_seed, pack_document
from electra.data.prepare import MAX_SEQ_LEN, prepare_corpus
from electra.data.vocab import train_vocab
from electra.data.word_cache import WordCache
from electra.errors import ElectraError
from electra.tokenizer import load_tokenizer, special_token_ids, vocab_checksum

CLS, SEP = 2, 3
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def docs_of(paths, **kwargs) -> list[tuple[str, int, str]]:
    return [(Path(d.source).name, d.line, d.text) for d in iter_documents(paths, **kwargs)]


# --- readers ---------------------------------------------------------------------------------


def test_plain_text_blank_lines_separate_documents(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"First para.\r\n  Second para.  \n\n\n   \nOther doc.\n\nLast")
    assert docs_of([path]) == [
        ("a.txt", 1, "First para.\nSecond para."),
        ("a.txt", 6, "Other doc."),
        ("a.txt", 8, "Last"),
    ]


def test_jsonl_and_text_field(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    rows = [{"text": "one"}, {"text": "  "}, {"body": "x", "text": "three"}]
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + json.dumps(rows[2]))
    assert docs_of([path]) == [("a.jsonl", 1, "one"), ("a.jsonl", 4, "three")]
    with pytest.raises(ElectraError, match=r"a\.jsonl:1: no 'body' field"):
        docs_of([path], text_field="body")
    other = tmp_path / "b.json"
    other.write_text(json.dumps({"body": "héllo"}) + "\n", encoding="utf-8")
    assert docs_of([other], text_field="body") == [("b.json", 1, "héllo")]


def test_gzip_variants(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("doc one\n\ndoc two\n")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write('{"text": "doc three"}\n')
    assert docs_of([tmp_path / "a.txt.gz", tmp_path / "b.jsonl.gz"]) == [
        ("a.txt.gz", 1, "doc one"), ("a.txt.gz", 3, "doc two"), ("b.jsonl.gz", 1, "doc three"),
    ]


def test_directory_sorted_recursive_skips_hidden(tmp_path: Path) -> None:
    (tmp_path / "sub" / ".git").mkdir(parents=True)
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "sub" / "c.jsonl").write_text('{"text": "c"}\n')
    (tmp_path / ".hidden.txt").write_text("hidden")
    (tmp_path / "sub" / ".git" / "x.txt").write_text("git")
    assert [d.text for d in iter_documents([tmp_path])] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.jsonl", b"{\"text\": \"a\"}\n\n{oops}\n", r"bad\.jsonl:3: invalid JSON"),
        ("bad.txt", b"fine\n\xff\xfe bad\n", r"bad\.txt:2: not valid UTF-8"),
        ("nofield.jsonl", b'{"text": "a"}\n{"title": "x"}\n', r"nofield\.jsonl:2: no 'text'"),
        ("num.jsonl", b'{"text": 3}\n', r"num\.jsonl:1: field 'text' is int"),
        ("list.jsonl", b"[1, 2]\n", r"list\.jsonl:1: no 'text' field"),
    ],
)
def test_reader_errors_name_file_and_line(tmp_path: Path, name: str, content: bytes,
                                          message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ElectraError, match=message) as info:
        list(iter_documents([path]))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_gzip_error_names_line(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "a.jsonl.gz", "wb") as handle:
        handle.write(b'{"text": "ok"}\n{bad\n')
    with pytest.raises(ElectraError, match=r"a\.jsonl\.gz:2: invalid JSON"):
        list(iter_documents([tmp_path / "a.jsonl.gz"]))
    data = gzip.compress(b"".join(b"line %d\n" % i for i in range(5000)))
    (tmp_path / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ElectraError, match=r"cut\.txt\.gz:\d+: cannot read file"):
        list(iter_documents([tmp_path / "cut.txt.gz"]))


def test_reading_is_lazy(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "first"}\nnot json\n')
    stream = iter_documents([path])
    assert next(stream).text == "first"
    with pytest.raises(ElectraError, match=":2:"):
        next(stream)


def test_missing_and_empty_corpus(tmp_path: Path) -> None:
    with pytest.raises(ElectraError, match="does not exist: .*nope.txt"):
        list(iter_documents([tmp_path / "nope.txt"]))
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    with pytest.raises(ElectraError, match="corpus is empty"):
        list(iter_documents([tmp_path / "blank.txt"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ElectraError, match="corpus is empty"):
        list(iter_documents([tmp_path / "empty"]))


def test_split_sentences() -> None:
    text = 'It rained. Did it? Yes! "Quite so." Then\nnew line 3.5 ok...  end'
    assert split_sentences(text) == [
        "It rained.", "Did it?", "Yes!", '"Quite so."', "Then", "new line 3.5 ok...", "end",
    ]
    assert split_sentences("  \n ") == []


def test_split_sentences_matches_its_definition() -> None:
    """The fast splitter gives exactly the sentences of the one-regex definition."""
    definition = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'\u201d\u2019)\]])\s+|\s*\n\s*")
    rng = random.Random(0)
    alphabet = list(".!?\"'\u201d\u2019)] \n\t\r\u2028\u00a0ab")
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        expected = [s for s in (p.strip() for p in definition.split(text)) if s]
        assert split_sentences(text) == expected, repr(text)


# --- packing ---------------------------------------------------------------------------------


class _FixedRandom:
    """Stands in for random.Random to pin each draw of the builder."""

    def __init__(self, value: float, randint: int = 7) -> None:
        self.value, self.int = value, randint

    def random(self) -> float:
        return self.value

    def randint(self, low: int, high: int) -> int:
        return self.int


def test_packing_follows_official_rules() -> None:
    """Two-segment case: target (20-3)//2 = 8, a losing coin flip sends the straddling sentence
    to segment B, and B is truncated to max_len - len(A) - 3."""
    builder = ExampleBuilder(20, CLS, SEP, seed=0)
    builder._rng = _FixedRandom(0.5)  # not single-segment, coin flip says "B", keep max_len
    out = []
    for i in range(5):
        out += builder.add_sentence([10 + i] * 4)
    assert len(out) == 1
    ids, sep = out[0]
    assert ids == [CLS, 10, 10, 10, 10, SEP] + [11] * 4 + [12] * 4 + [13] * 4 + [14] + [SEP]
    assert sep == 5 and builder.target_length == 20

    builder._rng = _FixedRandom(0.0, randint=7)  # single segment, then a random target of 7
    out = []
    for i in range(5):
        out += builder.add_sentence([20 + i] * 5)
    assert out == [([CLS] + [20] * 5 + [21] * 5 + [22] * 5 + [23] * 3 + [SEP], 19)]
    assert builder.target_length == 7  # sentence 24 (5 tokens) stays buffered
    assert builder.end_document() == [([CLS] + [24] * 5 + [SEP], 6)]
    assert builder.add_sentence([30] * 3) == []
    assert builder.add_sentence([31] * 4) == [([CLS, 30, 30, 30, 31, 31, 31, 31, SEP], 8)]
    assert builder.end_document() == []


def test_long_sentence_is_truncated() -> None:
    builder = ExampleBuilder(16, CLS, SEP, seed=0)
    ((ids, sep),) = builder.add_sentence(list(range(10, 110)))
    assert ids == [CLS, *range(10, 24), SEP] and sep == 15


def test_packing_invariants_and_statistics() -> None:
    max_len, rng = 64, random.Random(0)
    builder = ExampleBuilder(max_len, CLS, SEP, seed=1)
    examples, full_target, short_targets, created = [], [], 0, 0
    for doc in range(2500):
        for _ in range(rng.randint(1, 40)):
            target = builder.target_length
            new = builder.add_sentence([100 + doc] * rng.randint(3, 20))
            if new:
                created += 1
                short_targets += builder.target_length < max_len
                if target == max_len:
                    full_target.extend(new)
            examples += [(doc, e) for e in new]
        examples += [(doc, e) for e in builder.end_document()]

    for doc, (ids, sep) in examples:
        assert ids[0] == CLS and ids[-1] == SEP and ids[sep] == SEP
        assert len(ids) <= max_len and ids.count(SEP) in (1, 2)
        assert ids.count(CLS) == 1
        assert set(ids) - {CLS, SEP} == {100 + doc}  # never crosses a document boundary
    # Under a full target every example has two segments unless the 10% draw made it single.
    single = sum(ids.count(SEP) == 1 for ids, _ in full_target) / len(full_target)
    assert len(full_target) > 5000 and abs(single - 0.1) < 0.02
    # 5% of examples are followed by a random target (randint may also hit max_len: 1/60).
    assert abs(short_targets / created - 0.05 * 59 / 60) < 0.012


def test_documents_packed_on_their_own_keep_the_official_statistics() -> None:
    """pack_document (a generator per document, its first target drawn like any other): 10% of
    full-target examples are single-segment and 5% of targets are random, also at the start of
    a document."""
    max_len, examples, short_first = 64, [], 0
    for doc in range(4000):
        sentences = [[100 + i] * 10 for i in range(40)]  # 400 tokens: several examples
        packed = pack_document(sentences, max_len, CLS, SEP, document_seed(1, doc))
        short_first += len(packed[0][0]) < 60  # a random first target (below ~55)
        examples += packed[:-1]  # the last one is cut short by the document's end
    full = [ids for ids, _ in examples if len(ids) >= max_len - 1]
    single = sum(ids.count(SEP) == 1 for ids in full) / len(full)
    assert len(full) > 10000 and abs(single - 0.1) < 0.015
    # P(random first target) * P(it ends the example below 60 tokens: target <= 50) ~ 0.038
    assert abs(short_first / 4000 - 0.05 * 46 / 60) < 0.012
    assert document_seed(-1, 0) != document_seed(1, 0) != document_seed(1, 1)


def test_packing_is_seeded() -> None:
    def run(seed: int) -> list:
        builder, rng, out = ExampleBuilder(32, CLS, SEP, seed), random.Random(5), []
        for _ in range(200):
            for _ in range(rng.randint(1, 6)):
                out += builder.add_sentence([7] * rng.randint(1, 12))
            out += builder.end_document()
        return out

    assert run(3) == run(3) and run(3) != run(4)


# --- prepare ---------------------------------------------------------------------------------


def stored_examples(data_dir: Path, split: str = "train") -> list[list[int]]:
    dataset = PretrainingDataset(data_dir, split)
    return [dataset.example(i)[0].tolist() for i in range(len(dataset))]


def expected_stream(paths, tokenizer_dir: Path) -> list[list[int]]:
    tok = load_tokenizer(tokenizer_dir)
    streams = []
    for doc in iter_documents(paths):
        sentences = split_sentences(doc.text)
        encodings = tok.encode_batch(sentences, add_special_tokens=False)
        streams.append([i for e in encodings for i in e.ids])
    return streams


def test_prepare_round_trips_tokens(make_corpus, vocab_dir: Path, tmp_path: Path) -> None:
    corpus = make_corpus(120, seed=3)
    out = tmp_path / "data"
    manifest = prepare_corpus([corpus], vocab_dir, 512, out, shard_tokens=500, batch_docs=16,
                              heldout_fraction=0.0, show_progress=False)
    expected = [i for doc in expected_stream([corpus], vocab_dir) for i in doc]
    examples = stored_examples(out)
    stored = [i for ids in examples for i in ids if i not in (CLS, SEP)]
    assert stored == expected  # documents are < 509 tokens, so nothing was truncated
    tok = load_tokenizer(vocab_dir)
    assert tok.decode(stored[:50]) == tok.decode(expected[:50])

    train = manifest["splits"]["train"]
    assert list(manifest["splits"]) == ["train"] and train["num_documents"] == 120
    assert train["num_examples"] == len(examples) >= 120
    assert train["num_tokens"] == sum(len(e) for e in examples)
    assert len(train["shards"]) > 1
    assert sum(s["num_examples"] for s in train["shards"]) == len(examples)
    # a shard is closed by the example that reaches shard_tokens, never split inside one
    for shard in train["shards"][:-1]:
        last = np.diff(np.load(out / shard["offsets"]))[-1]
        assert shard["num_tokens"] >= 500 > shard["num_tokens"] - last
    assert manifest["seq_len"] == 512 and manifest["vocab_size"] == load_tokenizer(
        vocab_dir).get_vocab_size()
    assert manifest["vocab_checksum"] == vocab_checksum(vocab_dir)
    assert vocab_checksum(out / "tokenizer") == vocab_checksum(vocab_dir)
    assert manifest["settings"] == {"seed": 12345, "heldout_fraction": 0.0,
                                    "max_heldout_documents": 2000, "text_field": "text",
                                    "shard_tokens": 500}
    assert manifest["special_tokens"] == {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]",
                                          "sep": "[SEP]", "mask": "[MASK]"}
    assert manifest["tokenizer_kind"] == "wordpiece"
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert np.load(out / train["shards"][0]["tokens"]).dtype == np.uint16


def test_prepare_truncates_and_splits(corpus_file: Path, documents, data_dir: Path,
                                      vocab_dir: Path) -> None:
    manifest = json.loads((data_dir / "manifest.json").read_text())
    train, heldout = manifest["splits"]["train"], manifest["splits"]["heldout"]
    assert train["num_documents"] + heldout["num_documents"] == len(documents) == 300
    assert heldout["num_documents"] == 30
    streams = expected_stream([corpus_file], vocab_dir)
    for split in ("train", "heldout"):
        examples = stored_examples(data_dir, split)
        assert all(len(e) <= 32 and e[0] == CLS and e[-1] == SEP for e in examples)
        assert sum(map(len, examples)) == manifest["splits"][split]["num_tokens"]
    # With seq_len 32 long documents lose tokens to truncation, never gain any.
    total = sum(len([i for i in e if i not in (CLS, SEP)])
                for split in ("train", "heldout") for e in stored_examples(data_dir, split))
    assert 0.5 * sum(map(len, streams)) < total < sum(map(len, streams))


def test_prepare_is_deterministic(make_corpus, vocab_dir: Path, tmp_path: Path) -> None:
    corpus = make_corpus(60)
    a = prepare_corpus([corpus], vocab_dir, 24, tmp_path / "a", show_progress=False)
    b = prepare_corpus([corpus], vocab_dir, 24, tmp_path / "b", show_progress=False)
    prepare_corpus([corpus], vocab_dir, 24, tmp_path / "c", seed=7, show_progress=False)
    assert a["splits"] == b["splits"]
    assert stored_examples(tmp_path / "a") == stored_examples(tmp_path / "b")
    assert stored_examples(tmp_path / "a") != stored_examples(tmp_path / "c")


@pytest.mark.parametrize("workers", [1, 2])
def test_failed_prepare_leaves_no_output(vocab_dir: Path, tmp_path: Path, workers: int) -> None:
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    lines = [json.dumps({"text": f"Document {i} is here. It has words."}) for i in range(400)]
    (corpus_dir / "c.jsonl").write_text("\n".join(lines) + '\n{"text": broken\n')
    with pytest.raises(ElectraError, match=r"c\.jsonl:401: invalid JSON"):
        prepare_corpus([corpus_dir], vocab_dir, 16, tmp_path / "out", shard_tokens=64,
                       batch_docs=8, show_progress=False, workers=workers)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_prepare_overwrite_and_validation(make_corpus, vocab_dir: Path, tmp_path: Path) -> None:
    corpus, out = make_corpus(20), tmp_path / "out"
    prepare_corpus([corpus], vocab_dir, 16, out, show_progress=False)
    with pytest.raises(ElectraError, match="already holds prepared data"):
        prepare_corpus([corpus], vocab_dir, 16, out, show_progress=False)
    manifest = prepare_corpus([corpus], vocab_dir, 20, out, overwrite=True, show_progress=False)
    assert PretrainingDataset(out).seq_len == manifest["seq_len"] == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([corpus.name, "out"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    with pytest.raises(ElectraError, match="not a prepared data directory"):
        prepare_corpus([corpus], vocab_dir, 16, tmp_path / "other", overwrite=True,
                       show_progress=False)
    for bad in (7, MAX_SEQ_LEN + 1):  # the longest positions of any preset: 8,192
        with pytest.raises(ElectraError, match="seq_len"):
            prepare_corpus([corpus], vocab_dir, bad, tmp_path / "x", show_progress=False)
    with pytest.raises(ElectraError, match="does not exist"):
        prepare_corpus([tmp_path / "nope"], vocab_dir, 16, tmp_path / "x", show_progress=False)
    with pytest.raises(ElectraError, match="workers must be >= 1"):
        prepare_corpus([corpus], vocab_dir, 16, tmp_path / "x", show_progress=False, workers=0)
    assert not (tmp_path / "x").exists()


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_output_is_identical_whatever_the_workers(tmp_path: Path, documents, vocab_dir: Path,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    """Shards, tokenizer copy and manifest are byte-for-byte the same with 1, 2 or 3 workers
    and any chunk size (and `--workers` reaches them from the CLI); no fork warning from
    `tokenizers` appears."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with open(corpus / "a.txt", "w", encoding="utf-8") as handle:
        handle.write("\n\n".join(" ".join(doc) for doc in documents[:150]))
    with gzip.open(corpus / "b.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": " ".join(doc)}) + "\n" for doc in documents[150:])
    settings = {"heldout_fraction": 0.1, "shard_tokens": 1500, "show_progress": False}
    one = prepare_corpus([corpus], vocab_dir, 48, tmp_path / "w1", workers=1, batch_docs=64,
                         **settings)
    for workers, batch_docs in ((2, 5), (3, 16)):
        prepare_corpus([corpus], vocab_dir, 48, tmp_path / f"w{workers}", workers=workers,
                       batch_docs=batch_docs, **settings)
    reference = tree_bytes(tmp_path / "w1")
    assert len(one["splits"]["train"]["shards"]) > 3 and len(reference) > 12
    assert tree_bytes(tmp_path / "w2") == reference
    assert tree_bytes(tmp_path / "w3") == reference
    assert main(["prepare", "--corpus", str(corpus), "--tokenizer", str(vocab_dir),
                 "--seq-len", "48", "--out", str(tmp_path / "cli"), "--workers", "2",
                 "--heldout-fraction", "0.1"]) == 0
    # the CLI's shards are larger (no --shard-tokens flag): compare examples, not files
    for split in ("train", "heldout"):
        assert stored_examples(tmp_path / "cli", split) == stored_examples(tmp_path / "w1", split)
    err = capfd.readouterr().err
    assert "TOKENIZERS_PARALLELISM" not in err and "forked" not in err


def _packing(vocab_dir: Path) -> prepare_module.Packing:
    ids = special_token_ids(load_tokenizer(vocab_dir))
    return prepare_module.Packing(32, ids["cls"], ids["sep"], 0, "uint16")


def test_workers_read_a_bounded_number_of_chunks_ahead(vocab_dir: Path) -> None:
    pulled = []

    def chunks():
        for i in range(40):
            pulled.append(i)
            yield [i], ["train"], [f"Document number {i}. It has two sentences."]

    stream = prepare_module._pack_in_order(chunks(), vocab_dir, _packing(vocab_dir), workers=2)
    ahead = 2 * prepare_module.CHUNKS_PER_WORKER
    for consumed in range(1, 6):
        next(stream)
        assert len(pulled) == ahead + consumed - 1
    assert len(list(stream)) == 35
    expected = load_tokenizer(vocab_dir).encode("Document number 39.", add_special_tokens=False)
    assert prepare_module._tokenize(["Document number 39. It has two sentences."],
                                    WordCache(load_tokenizer(vocab_dir)))[0][0] == expected.ids


def test_a_chunk_is_packed_per_document_whatever_its_neighbours(vocab_dir: Path) -> None:
    """A document's examples depend on the seed and its corpus index only (its own generator),
    which is what lets workers pack chunks independently."""
    tokenizer, packing = WordCache(load_tokenizer(vocab_dir)), _packing(vocab_dir)
    texts = [f"Document {i} says something. " * (i + 3) for i in range(6)]
    whole = prepare_module._pack_chunk((list(range(6)), ["train"] * 6, texts), tokenizer,
                                       packing)["train"]
    parts = [prepare_module._pack_chunk(([i], ["train"], [texts[i]]), tokenizer, packing)["train"]
             for i in range(6)]
    assert whole.documents == 6 and sum(p.documents for p in parts) == 6
    assert np.array_equal(whole.tokens, np.concatenate([p.tokens for p in parts]))
    assert np.array_equal(whole.lengths, np.concatenate([p.lengths for p in parts]))
    # the same texts at other corpus indices are packed with other draws
    moved = prepare_module._pack_chunk((list(range(100, 106)), ["train"] * 6, texts), tokenizer,
                                       packing)["train"]
    assert (whole.lengths.tolist(), whole.sep_index.tolist()) != (
        moved.lengths.tolist(), moved.sep_index.tolist())


def test_a_killed_worker_fails_the_run(vocab_dir: Path) -> None:
    """A worker killed mid-run (as the kernel does when memory runs out) is an error, not a
    hang."""

    def chunks():
        for i in range(60):
            if i == 8:
                for child in multiprocessing.active_children():  # the pool's processes
                    child.kill()
            yield [i], ["train"], [f"Document number {i}. It has two sentences."]

    with pytest.raises(ElectraError, match="worker process died"):
        list(prepare_module._pack_in_order(chunks(), vocab_dir, _packing(vocab_dir), workers=2))


def test_leftovers_of_a_killed_run_are_removed(make_corpus, vocab_dir: Path,
                                               tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f".out.tmp-{dead}-abc123"
    live = tmp_path / f".out.tmp-{os.getpid()}-def456"  # a run in progress: not ours to remove
    for leftover in (stale, live):
        leftover.mkdir()
        (leftover / "train-00000.tokens.npy").write_bytes(b"partial")
    corpus = make_corpus(20)
    prepare_corpus([corpus], vocab_dir, 16, tmp_path / "out", show_progress=False, workers=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([corpus.name, "out", live.name])


def test_damaged_shards_are_named(data_dir: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A truncated shard fails every load; a byte changed in place is found by its checksum
    (verify=True, verify_data, `electra prepare --verify`). Each error is one line naming the
    file."""
    assert verify_data(data_dir)["ok"] and verify_data(data_dir)["files"] >= 6
    manifest = json.loads((data_dir / "manifest.json").read_text())
    shard = manifest["splits"]["train"]["shards"][1]
    assert shard["bytes"]["tokens"] == (data_dir / shard["tokens"]).stat().st_size
    broken = tmp_path / "broken"

    def damage(name: str, edit) -> Path:
        shutil.rmtree(broken, ignore_errors=True)
        shutil.copytree(data_dir, broken)
        path = broken / name
        path.write_bytes(edit(path.read_bytes()))
        return path

    def fails(make, path: Path) -> None:
        with pytest.raises(ElectraError) as info:
            make()
        message = str(info.value)
        assert message.startswith(str(path)) and "\n" not in message

    truncated = damage("train-00001.tokens.npy", lambda data: data[:-10])
    fails(lambda: PretrainingDataset(broken), truncated)
    fails(lambda: verify_data(broken), truncated)
    truncated = damage("heldout-00000.offsets.npy", lambda data: data[: len(data) // 2])
    fails(lambda: PretrainingDataset(broken, "heldout"), truncated)

    def flip(data: bytes, at: int = -20) -> bytes:
        return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]

    flipped = damage("train-00002.tokens.npy", flip)
    assert len(PretrainingDataset(broken)) == len(PretrainingDataset(data_dir))  # size only
    fails(lambda: PretrainingDataset(broken, verify=True), flipped)
    fails(lambda: verify_data(broken), flipped)
    assert main(["prepare", "--verify", str(broken)]) == 1
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and str(flipped) in line and "SHA-256" in line
    byte_order = damage("train-00000.tokens.npy",  # '<u2' -> '>u2': same size, swapped bytes
                        lambda data: data.replace(b"'<u2'", b"'>u2'", 1))
    fails(lambda: PretrainingDataset(broken), byte_order)
    assert main(["prepare", "--verify", str(data_dir)]) == 0


# --- dataset ---------------------------------------------------------------------------------


def test_get_batch_shapes_and_masks(data_dir: Path) -> None:
    dataset = PretrainingDataset(data_dir)
    assert dataset.seq_len == 32 and len(dataset) > 100
    assert dataset.vocab_checksum == vocab_checksum(data_dir / "tokenizer")
    indices = list(range(len(dataset)))
    batch = dataset.get_batch(indices)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}
    for tensor in batch.values():
        assert tensor.shape == (len(dataset), 32) and tensor.dtype == torch.long
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    assert int(mask.sum()) == dataset.num_tokens
    assert (ids[mask == 0] == 0).all() and (types[mask == 0] == 0).all()
    assert (ids[:, 0] == CLS).all()
    for row in range(len(dataset)):
        tokens, sep = dataset.example(row)
        n = len(tokens)
        assert ids[row, :n].tolist() == tokens.tolist() and mask[row, :n].all()
        assert types[row, : sep + 1].sum() == 0 and (types[row, sep + 1 : n] == 1).all()
    assert len(PretrainingDataset(data_dir, "heldout")) > 0


def test_dataset_errors(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ElectraError, match="manifest.json: missing"):
        PretrainingDataset(tmp_path)
    with pytest.raises(ElectraError, match="no split 'dev'"):
        PretrainingDataset(data_dir, "dev")
    broken = tmp_path / "broken"
    shutil.copytree(data_dir, broken)
    (broken / "train-00001.tokens.npy").unlink()
    with pytest.raises(ElectraError, match="incomplete"):
        PretrainingDataset(broken)
    (broken / "manifest.json").write_text('{"format": ')
    with pytest.raises(ElectraError, match="corrupt manifest"):
        PretrainingDataset(broken)


def take(stream, n: int) -> list[torch.Tensor]:
    return [next(stream)["input_ids"] for _ in range(n)]


def test_iterate_batches_deterministic_and_resumes(data_dir: Path) -> None:
    dataset = PretrainingDataset(data_dir)
    per_epoch = len(dataset) // 8
    full = take(iterate_batches(dataset, 8, seed=3), 2 * per_epoch + 3)
    again = take(iterate_batches(dataset, 8, seed=3), 2 * per_epoch + 3)
    assert all(torch.equal(a, b) for a, b in zip(full, again, strict=True))
    other = take(iterate_batches(dataset, 8, seed=4), 3)
    assert not all(torch.equal(a, b) for a, b in zip(full, other, strict=False))
    for k in (1, per_epoch - 1, per_epoch, per_epoch + 2):  # incl. across epoch boundaries
        resumed = take(iterate_batches(dataset, 8, seed=3, start_batch=k), 3)
        assert all(torch.equal(a, b) for a, b in zip(full[k : k + 3], resumed, strict=True))
    # Each epoch visits distinct examples: no row repeats within an epoch.
    epoch = torch.cat(full[:per_epoch])
    assert len({tuple(r.tolist()) for r in epoch}) >= len(epoch) - 5  # duplicates only by text


def test_rank_slices_partition_global_batch(data_dir: Path) -> None:
    dataset = PretrainingDataset(data_dir)
    world = 3
    global_stream = take(iterate_batches(dataset, 4 * world, seed=9, start_batch=5), 4)
    ranks = [take(iterate_batches(dataset, 4, seed=9, start_batch=5, rank=r, world_size=world), 4)
             for r in range(world)]
    for b in range(4):
        assert torch.equal(torch.cat([ranks[r][b] for r in range(world)]), global_stream[b])


def test_iterate_batches_errors(data_dir: Path) -> None:
    dataset = PretrainingDataset(data_dir, "heldout")
    with pytest.raises(ElectraError, match="fewer than one global batch"):
        next(iterate_batches(dataset, len(dataset), seed=0, world_size=2))
    with pytest.raises(ElectraError, match="invalid batching"):
        next(iterate_batches(dataset, 2, seed=0, rank=2, world_size=2))


# --- real data -------------------------------------------------------------------------------


def test_real_corpus_inaugural(tmp_path: Path) -> None:
    corpus = SHARED_DATA / "corpus" / "nltk" / "inaugural.jsonl.gz"
    if not corpus.is_file():
        pytest.skip(f"real corpus not found at {corpus} (shared data not present)")
    vocab = train_vocab([corpus], 2000, tmp_path / "tok", show_progress=False)
    manifest = prepare_corpus([corpus], vocab, 128, tmp_path / "data", heldout_fraction=0.05,
                              show_progress=False)
    splits = manifest["splits"]
    assert splits["train"]["num_documents"] + splits["heldout"]["num_documents"] == 55
    assert splits["heldout"]["num_documents"] in (2, 3)
    dataset = PretrainingDataset(tmp_path / "data")
    assert len(dataset) == splits["train"]["num_examples"] > 1000
    batch = next(iterate_batches(dataset, 16, seed=0))
    mask = batch["attention_mask"].bool()
    assert batch["input_ids"].shape == (16, 128)
    assert (batch["input_ids"][mask] == 1).float().mean() < 0.01  # few [UNK]s
    assert mask.float().mean() > 0.8  # packing fills most positions

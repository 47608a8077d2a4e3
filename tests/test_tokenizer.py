"""WordPiece vocab training, loading, Hugging Face compatibility and the vocab identity."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest

from electra.data.vocab import train_vocab, vocab_from_file
from electra.errors import ElectraError
from electra.tokenizer import (
    TOKENIZER_FILES,
    copy_tokenizer_files,
    load_tokenizer,
    special_token_ids,
    vocab_checksum,
)

SENTENCES = [
    "The café in Zürich was naïve, they said.",
    "KALOMI rentas vorqui!",
    "Unseen words like xylophone get split or become unknown?",
]


def test_trained_vocab_files_and_special_ids(vocab_dir: Path) -> None:
    for name in TOKENIZER_FILES:
        assert (vocab_dir / name).is_file(), name
    tokens = (vocab_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert 300 < len(tokens) <= 500
    assert any(t.startswith("##") for t in tokens)
    tok = load_tokenizer(vocab_dir)
    assert tok.get_vocab_size() == len(tokens)
    assert special_token_ids(tok) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    config = json.loads((vocab_dir / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True and config["model_max_length"] == 512


def test_vocab_dir_is_readable_by_all_and_leaves_no_temp_dir(vocab_dir: Path) -> None:
    """Written in a temp dir and installed like every other output (electra.fileutil): an
    ordinary 0o755 directory (mkdtemp's are private), nothing left beside it."""
    assert stat.S_IMODE(vocab_dir.stat().st_mode) == 0o755
    assert [p.name for p in vocab_dir.parent.iterdir()] == [vocab_dir.name]


def test_lowercase_and_accents_by_default(vocab_dir: Path) -> None:
    tok = load_tokenizer(vocab_dir)
    assert tok.encode("The CAFÉ").ids == tok.encode("the cafe").ids
    enc = tok.encode("the cafe", "of zurich")
    assert enc.ids[0] == 2 and enc.ids[-1] == 3 and enc.ids.count(3) == 2
    first_sep = enc.ids.index(3)
    assert enc.type_ids == [0] * (first_sep + 1) + [1] * (len(enc.ids) - first_sep - 1)


def test_transformers_loads_same_tokenizer(vocab_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(vocab_dir), local_files_only=True)
    tok = load_tokenizer(vocab_dir)
    for sentence in SENTENCES:
        assert hf(sentence)["input_ids"] == tok.encode(sentence).ids
    pair = hf(SENTENCES[0], SENTENCES[1])
    enc = tok.encode(SENTENCES[0], SENTENCES[1])
    assert pair["input_ids"] == enc.ids and pair["token_type_ids"] == enc.type_ids
    assert [hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id,
            hf.mask_token_id] == [0, 1, 2, 3, 4]
    assert hf.model_max_length == 512
    assert hf("HELLO Café")["input_ids"] == hf("hello cafe")["input_ids"]


def test_cased_vocab_matches_transformers(make_corpus, tmp_path: Path) -> None:
    out = train_vocab([make_corpus(80)], 400, tmp_path / "cased", lowercase=False,
                      show_progress=False)
    tok = load_tokenizer(out)
    assert tok.encode("The").ids != tok.encode("the").ids
    assert tok.encode("café").ids != tok.encode("cafe").ids
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    for sentence in SENTENCES:
        assert hf(sentence)["input_ids"] == tok.encode(sentence).ids


def test_vocab_too_small(corpus_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ElectraError, match="too small"):
        train_vocab([corpus_file], 5, tmp_path / "a", show_progress=False)
    with pytest.raises(ElectraError, match="alphabet alone need"):
        train_vocab([corpus_file], 20, tmp_path / "b", show_progress=False)
    assert not (tmp_path / "b").exists()


def test_failed_training_leaves_nothing(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "good words here"}\n{"text": 1\n', encoding="utf-8")
    with pytest.raises(ElectraError, match=r"c\.jsonl:2:"):
        train_vocab([corpus], 100, tmp_path / "out", show_progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


def test_refuses_existing_tokenizer(vocab_dir: Path, corpus_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "tok"
    copy_tokenizer_files(vocab_dir, out)
    with pytest.raises(ElectraError, match="already holds tokenizer files"):
        train_vocab([corpus_file], 400, out, show_progress=False)
    train_vocab([corpus_file], 400, out, show_progress=False, overwrite=True)
    assert load_tokenizer(out).get_vocab_size() <= 400


def test_vocab_from_file_matches(vocab_dir: Path, tmp_path: Path) -> None:
    out = vocab_from_file(vocab_dir / "vocab.txt", tmp_path / "copy")
    assert vocab_checksum(out) == vocab_checksum(vocab_dir)
    a, b = load_tokenizer(vocab_dir), load_tokenizer(out)
    for sentence in SENTENCES:
        assert a.encode(sentence).ids == b.encode(sentence).ids


def test_vocab_from_file_bert_layout(tmp_path: Path) -> None:
    """BERT's vocab has [PAD]=0 but [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]",
                                                                  "[MASK]"]
    tokens += ["the", "cat", "sat", "##s", "on", "mat", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    out = vocab_from_file(tmp_path / "vocab.txt", tmp_path / "bert")
    tok = load_tokenizer(out)
    assert special_token_ids(tok) == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    assert tok.encode("The cats sat.").tokens == ["[CLS]", "the", "cat", "##s", "sat", ".",
                                                  "[SEP]"]
    assert (out / "vocab.txt").read_bytes() == (tmp_path / "vocab.txt").read_bytes()
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    assert hf("The cats sat on a mat.")["input_ids"] == tok.encode("The cats sat on a mat.").ids


def test_vocab_from_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "missing.txt"
    bad.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nfoo\n", encoding="utf-8")
    with pytest.raises(ElectraError, match=r"missing special tokens \[MASK\]"):
        vocab_from_file(bad, tmp_path / "o1")
    dup = tmp_path / "dup.txt"
    dup.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nfoo\nfoo\n", encoding="utf-8")
    with pytest.raises(ElectraError, match=r"dup\.txt:7: duplicate token 'foo'"):
        vocab_from_file(dup, tmp_path / "o2")
    with pytest.raises(ElectraError, match="does not exist"):
        vocab_from_file(tmp_path / "nope.txt", tmp_path / "o3")


def test_load_from_vocab_txt_only(vocab_dir: Path, tmp_path: Path) -> None:
    only = tmp_path / "only"
    only.mkdir()
    (only / "vocab.txt").write_bytes((vocab_dir / "vocab.txt").read_bytes())
    a, b = load_tokenizer(vocab_dir), load_tokenizer(only)
    for sentence in SENTENCES:
        assert a.encode(sentence).ids == b.encode(sentence).ids
        assert a.encode(sentence, "pair").type_ids == b.encode(sentence, "pair").type_ids


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ElectraError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(ElectraError, match=rf"{tmp_path}: missing tokenizer.json and vocab.txt"):
        load_tokenizer(tmp_path)
    with pytest.raises(ElectraError, match="missing tokenizer.json and vocab.txt"):
        vocab_checksum(tmp_path)


def test_checksum_and_copy(vocab_dir: Path, tmp_path: Path) -> None:
    expected = hashlib.sha256((vocab_dir / "vocab.txt").read_bytes()).hexdigest()
    assert vocab_checksum(vocab_dir) == expected
    copied = copy_tokenizer_files(vocab_dir, tmp_path / "model")
    assert sorted(p.name for p in copied) == sorted(TOKENIZER_FILES)
    assert vocab_checksum(tmp_path / "model") == expected
    with open(tmp_path / "model" / "vocab.txt", "a", encoding="utf-8") as handle:
        handle.write("extra\n")
    assert vocab_checksum(tmp_path / "model") != expected

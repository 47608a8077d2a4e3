"""WordCache gives exactly the ids of `encode_batch`: on real text, on the characters where
Python's and BERT's ideas of whitespace differ, after its memory is reset, and (by plain
delegation) for a pipeline whose words are not independent."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
from conftest import SHARED_DATA
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from electra.data.corpus import split_sentences
from electra.data.vocab import train_vocab
from electra.data.word_cache import _HAS_DELETED_CONTROL, WordCache, words_are_independent
from electra.tokenizer import load_tokenizer

TRICKY = [
    "though\x85in fact",  # NEL: whitespace to Python, a deleted control character to BERT
    "a\x0bb c\x0cd e\x1cf g\x1dh i\x1ej k\x1fl",
    "no\u00a0break, ideographic\u3000space, line\u2028separator, thin\u2009space",
    "zero\u200bwidth joiner\u200dhere and a soft\u00adhyphen",
    "Café naïve ÉCOLE Ångström résumé",
    "中文字符混合English文本",
    "tab\tnew\nline\rreturn  double  spaces ",
    "don't U.S.A. e-mail (parenthesised) \"quoted\" 3.14 1,000,000 ...!?",
    "x" * 150 + " " + "y" * 99,  # longer than WordPiece's 100 characters: [UNK]
    "words around [SEP] and glued[MASK]tokens [CLS]",
    "",
    "   ",
    "\x00null\ufffdreplacement",
    "[MA\x0bSK] and x [SE\x85P] y",  # special tokens are matched before controls are deleted
]


def _reference(tokenizer: Tokenizer, sentences: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(sentences, add_special_tokens=False)]


@pytest.fixture(scope="module")
def real_sentences() -> list[str]:
    source = SHARED_DATA / "corpus" / "aclImdb" / "unsup.jsonl.gz"
    if not source.is_file():
        pytest.skip(f"needs {source}")
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in itertools.islice(handle, 600)]
    return [s for text in texts for s in split_sentences(text)]


@pytest.fixture(scope="module")
def real_tokenizer(tmp_path_factory, real_sentences) -> Tokenizer:
    corpus = tmp_path_factory.mktemp("wc") / "corpus.txt"
    corpus.write_text("\n".join(real_sentences) + "\n", encoding="utf-8")
    return load_tokenizer(train_vocab([corpus], 2000, corpus.parent / "tok",
                                      show_progress=False))


def test_same_ids_as_encode_batch_on_real_and_tricky_text(real_tokenizer, real_sentences):
    cache = WordCache(real_tokenizer)
    assert cache.enabled
    for start in range(0, len(real_sentences), 1000):  # several calls: remembered words reused
        batch = real_sentences[start : start + 1000]
        assert cache.encode(batch) == _reference(real_tokenizer, batch)
    assert cache.encode(TRICKY) == _reference(real_tokenizer, TRICKY)
    assert len(cache._index) < sum(len(s.split()) for s in real_sentences) / 3
    assert cache.encode([]) == []
    for few in (["one"], ["", "one"], ["  ", ""], ["x\x85y"]):
        assert WordCache(real_tokenizer).encode(few) == _reference(real_tokenizer, few)


def test_a_full_cache_starts_over_with_the_same_ids(real_tokenizer, real_sentences):
    small = WordCache(real_tokenizer, max_words=500)
    for start in range(0, 3000, 300):
        batch = real_sentences[start : start + 300]
        assert small.encode(batch) == _reference(real_tokenizer, batch)
        words = {w for s in batch if not _HAS_DELETED_CONTROL.search(s) for w in s.split()}
        assert len(small._index) <= 500 or set(small._index) == words  # or started over


def test_tricky_text_without_the_shared_data(vocab_dir: Path):
    tokenizer = load_tokenizer(vocab_dir)
    cache = WordCache(tokenizer)
    assert cache.enabled and cache.encode(TRICKY) == _reference(tokenizer, TRICKY)
    assert cache.encode(TRICKY[::-1]) == _reference(tokenizer, TRICKY[::-1])  # remembered


def test_only_bert_pipelines_are_split_into_words(vocab_dir: Path):
    bert = load_tokenizer(vocab_dir)
    assert words_are_independent(bert)
    for change in ("clean_text", "truncation", "lstrip"):
        other = load_tokenizer(vocab_dir)
        if change == "clean_text":
            other.normalizer = normalizers.BertNormalizer(clean_text=False)
        elif change == "truncation":
            other.enable_truncation(16)
        else:
            other.add_special_tokens([AddedToken("<x>", lstrip=True)])
        assert not words_are_independent(other), change
    other = Tokenizer(models.WordPiece(bert.get_vocab(), unk_token="[UNK]"))
    other.pre_tokenizer = pre_tokenizers.Metaspace()  # spaces become part of the tokens
    cache = WordCache(other)
    assert not cache.enabled
    sentences = ["a few words here", "and  there"]
    assert cache.encode(sentences) == _reference(other, sentences)

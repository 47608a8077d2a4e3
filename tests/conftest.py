"""Shared small fixtures: a synthetic corpus, a ~500-token vocabulary and a prepared data dir.

Session-scoped so the vocabulary is trained and the corpus prepared once per test run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from electra.data.prepare import prepare_corpus
from electra.data.vocab import train_vocab

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

_SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vor", "qui", "zel", "pha", "dun", "bre", "sto",
              "nix", "gal", "ber", "ot", "um", "ae", "shi", "wen"]
_COMMON = ("the of and to in is was that for on with as by at from his her they this "
           "café naïve Zürich résumé").split()


def synthetic_documents(num_docs: int, seed: int = 0) -> list[list[str]]:
    """Documents as lists of sentences over a small pseudo-language (with capitals, accents and
    punctuation, so normalization matters)."""
    rng = random.Random(seed)
    lexicon = _COMMON + [
        "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(400)
    ]
    docs = []
    for _ in range(num_docs):
        sentences = []
        for _ in range(rng.randint(1, 8)):
            words = [rng.choice(lexicon) for _ in range(rng.randint(3, 14))]
            words[0] = words[0].capitalize()
            if rng.random() < 0.2:
                words[len(words) // 2] += ","
            sentences.append(" ".join(words) + rng.choice([".", ".", ".", "!", "?"]))
        docs.append(sentences)
    return docs


def write_plain(path: Path, docs: list[list[str]]) -> Path:
    """Plain-text corpus: one paragraph per line (two sentences each), blank line between docs."""
    with open(path, "w", encoding="utf-8") as handle:
        for sentences in docs:
            for i in range(0, len(sentences), 2):
                handle.write(" ".join(sentences[i : i + 2]) + "\n")
            handle.write("\n")
    return path


@pytest.fixture(scope="session")
def documents() -> list[list[str]]:
    return synthetic_documents(300)


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory: pytest.TempPathFactory, documents: list[list[str]]) -> Path:
    return write_plain(tmp_path_factory.mktemp("corpus") / "corpus.txt", documents)


@pytest.fixture(scope="session")
def vocab_dir(tmp_path_factory: pytest.TempPathFactory, corpus_file: Path) -> Path:
    return train_vocab([corpus_file], 500, tmp_path_factory.mktemp("vocab") / "tok",
                       show_progress=False)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory, corpus_file: Path, vocab_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("data") / "prepared"
    prepare_corpus([corpus_file], vocab_dir, 32, out, heldout_fraction=0.1, shard_tokens=2000,
                   batch_docs=32, show_progress=False)
    return out


@pytest.fixture
def make_corpus(tmp_path: Path) -> Callable[[int, int], Path]:
    """Factory for a fresh plain-text corpus in tmp_path: make_corpus(num_docs, seed)."""

    def make(num_docs: int = 50, seed: int = 1) -> Path:
        return write_plain(tmp_path / f"corpus-{num_docs}-{seed}.txt",
                           synthetic_documents(num_docs, seed))

    return make


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One intra-op thread for the whole suite: the test models are tiny, and on a shared
    2-core machine two OpenMP threads waiting for each other make every step many times
    slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, vocab_dir: Path) -> Path:
    """A randomly initialised tiny discriminator exported in HF format with its tokenizer:
    the starting point of the fine-tuning tests."""
    from electra.config import ModelConfig
    from electra.model.encoder import init_weights
    from electra.model.hf import save_pretrained
    from electra.model.networks import Discriminator

    torch.manual_seed(0)
    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    cfg = ModelConfig(vocab_size=vocab_size, embedding_size=32, hidden_size=32,
                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=128)
    model = Discriminator(cfg)
    init_weights(model, cfg.initializer_range)
    return save_pretrained(model, tmp_path_factory.mktemp("tiny") / "disc", vocab_dir)

"""Word vectors for CVT's word embeddings, trained on unlabeled text (`electra cvt-vectors`).

The dissertation initialises CVT's word embeddings with 300-dimensional GloVe vectors (section
4.2, "Models"); no such file reaches these machines, so this trains word2vec (skip-gram with
negative sampling, gensim) on the corpus CVT learns from, tokenised and normalised as CVT reads
it (Penn-Treebank-style tokens, lower case, digits as 0), and writes the word2vec text format
that `electra cvt --word-vectors` reads. gensim is an optional dependency (the `vectors` extra).
"""

from __future__ import annotations

import random
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from electra.cvt.unlabeled import iter_sentences
from electra.cvt.vocab import normalize
from electra.errors import ElectraError, install_hint
from electra.fileutil import write_atomic


def corpus_sentences(paths: Sequence[str | Path], max_sentences: int | None,
                     text_field: str = "text", max_len: int = 100) -> list[list[str]]:
    """The corpus as CVT reads it (`iter_sentences`), each word normalised as CVT's vocabulary
    looks it up, so every vector written is one CVT can find."""
    out = []
    for words in iter_sentences(paths, text_field, max_len):
        out.append([normalize(w) for w in words])
        if max_sentences is not None and len(out) >= max_sentences:
            break
    return out


def _stable_hash(text: str) -> int:
    """gensim seeds each word's initial vector with hash(word + seed); Python's `hash` of a
    string differs between processes, so the same seed would give other vectors each run."""
    return zlib.crc32(text.encode("utf-8"))


def train_word_vectors(paths: Sequence[str | Path], out: str | Path, dim: int = 100,
                       epochs: int = 5, window: int = 5, min_count: int = 2,
                       max_sentences: int | None = None, seed: int = 0, workers: int = 1,
                       text_field: str = "text") -> dict:
    """Train skip-gram word2vec on `paths` and write OUT in word2vec text format (a `count dim`
    header, then `word v1 ... vdim` per line, most frequent first). One worker by default, so
    the same seed gives the same file."""
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise ElectraError(f"electra cvt-vectors needs gensim: {install_hint('vectors')}"
                           ) from None
    for name, value in (("dim", dim), ("epochs", epochs), ("window", window),
                        ("min_count", min_count)):
        if value < 1:
            raise ElectraError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    sentences = corpus_sentences(paths, max_sentences, text_field)
    if not sentences:
        raise ElectraError(f"no sentences of 2 or more words in {', '.join(map(str, paths))}")
    counts = Counter(w for words in sentences for w in words)
    if max(counts.values()) < min_count:  # sentences hold 2 or more words: counts is not empty
        raise ElectraError(f"no word occurs {min_count} times or more: lower --min-count")
    random.Random(seed).shuffle(sentences)  # corpora come ordered by source; SGD prefers mixed
    model = Word2Vec(sentences, vector_size=dim, window=window, min_count=min_count, sg=1,
                     negative=5, epochs=epochs, seed=seed, workers=workers,
                     hashfxn=_stable_hash)
    vectors = model.wv
    lines = [f"{len(vectors.index_to_key)} {dim}"]
    for word in vectors.index_to_key:
        lines.append(word + " " + " ".join(f"{x:.5f}" for x in vectors[word]))
    write_atomic(out, "\n".join(lines) + "\n")
    return {"out": str(out), "words": len(vectors.index_to_key), "dim": dim,
            "sentences": len(sentences), "tokens": sum(map(len, sentences)), "epochs": epochs}

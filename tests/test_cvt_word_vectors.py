"""`electra cvt-vectors`: word2vec vectors (gensim) trained on unlabeled text as CVT reads it, in
the file format `electra cvt --word-vectors` takes (the paper's GloVe initialisation, section
4.2, made from the text at hand)."""

from __future__ import annotations

import json
import random
import sys

import pytest
import torch

from electra.cli import main as electra
from electra.cvt.vocab import read_word_vectors

pytest.importorskip("gensim")


def _corpus(path, n=600):
    """Two word classes in exchangeable contexts: animals sit, fruits are eaten; digits and
    capitals to check the normalisation."""
    rng = random.Random(0)
    animals, fruits = ["cat", "dog", "horse", "cow"], ["apple", "pear", "plum", "fig"]
    lines = []
    for _ in range(n):
        if rng.random() < 0.5:
            lines.append(f"The {rng.choice(animals)} sat on the mat near {rng.randint(1, 99)} "
                         "hills.")
        else:
            lines.append(f"I ate a ripe {rng.choice(fruits)} with {rng.randint(1, 99)} friends.")
    path.write_text("\n\n".join(lines) + "\n")
    return path


def _cos(a, b):
    return torch.nn.functional.cosine_similarity(a, b, dim=0).item()


def test_vectors_follow_contexts_are_normalised_and_reproducible(tmp_path, capsys):
    corpus = _corpus(tmp_path / "text.txt")
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for out in files:
        assert electra(["cvt-vectors", "--corpus", str(corpus), "--out", str(out), "--dim", "16",
                        "--epochs", "20", "--window", "3"]) == 0
    report = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    assert report["dim"] == 16 and report["sentences"] == 600
    assert files[0].read_bytes() == files[1].read_bytes()  # one worker, one seed: one file
    header = files[0].read_text().splitlines()[0]
    words, vectors = read_word_vectors(files[0])
    assert header == f"{len(words)} 16" and vectors.shape == (len(words), 16)
    assert "the" in words and "The" not in words  # lower case, as CVT looks words up
    assert "00" in words and not any(c.isdigit() and c != "0" for w in words for c in w)
    at = {w: vectors[i] for i, w in enumerate(words)}
    same = min(_cos(at["cat"], at["dog"]), _cos(at["apple"], at["pear"]))
    other = max(_cos(at["cat"], at["apple"]), _cos(at["dog"], at["pear"]))
    assert same > other + 0.1, (same, other)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    corpus = _corpus(tmp_path / "text.txt", n=20)
    out = tmp_path / "vectors.txt"
    with pytest.raises(SystemExit):  # refused at the flag, a usage error
        electra(["cvt-vectors", "--corpus", str(corpus), "--out", str(out), "--dim", "0"])
    assert "--dim: must be positive, got 0" in capsys.readouterr().err
    cases = [(["--min-count", "1000"], "no word occurs 1000 times")]
    for extra, message in cases:
        assert electra(["cvt-vectors", "--corpus", str(corpus), "--out", str(out),
                        *extra]) != 0
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
        assert not out.exists()
    headings = tmp_path / "headings.txt"
    headings.write_text("Contents\n\nIndex\n")  # one-word "sentences" only: none kept
    assert electra(["cvt-vectors", "--corpus", str(headings), "--out", str(out)]) != 0
    assert "no sentences of 2 or more words" in capsys.readouterr().err and not out.exists()
    monkeypatch.setitem(sys.modules, "gensim.models", None)
    assert electra(["cvt-vectors", "--corpus", str(corpus), "--out", str(out)]) != 0
    assert "pip install -e '.[vectors]' in the electra checkout" in capsys.readouterr().err
    assert not out.exists()


def test_the_cvt_benchmark_starts_every_run_from_the_vectors(tmp_path):
    """experiments/cvt.py --word-vectors FILE: each run's embeddings start from the file
    (results.json counts the words found), with vectors made by `electra cvt-vectors` from the
    same unlabeled text."""
    import importlib

    from cvt_helpers import TINY, write_chunk, write_unlabeled

    bench = importlib.import_module("experiments.cvt")
    chunk, raw = write_chunk(tmp_path / "chunk"), write_unlabeled(tmp_path / "raw.txt")
    vectors = tmp_path / "vectors.txt"
    assert electra(["cvt-vectors", "--corpus", str(raw), "--out", str(vectors), "--dim",
                    str(TINY["word_dim"]), "--min-count", "1", "--epochs", "1"]) == 0
    bench.main(["--work", str(tmp_path / "w"), "--tasks", "chunk", "--sizes", "full", "--seeds",
                "0", "--methods", "supervised,cvt", "--jobs", "1", "--steps", "2",
                "--unlabeled", str(raw), "--data", f"chunk={chunk}", "--word-vectors",
                str(vectors), *[a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]])
    for run in ("chunk-full-supervised-s0", "chunk-full-cvt-s0"):
        results = json.loads((tmp_path / "w" / "runs" / run / "results.json").read_text())
        assert results["word_vectors"]["file"] == str(vectors)
        assert results["word_vectors"]["found"] > 10

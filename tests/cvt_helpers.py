"""Tiny CVT fixtures: synthetic CoNLL-2000 and CoNLL-U files, unlabeled text, a tiny config."""

from __future__ import annotations

import random
from pathlib import Path

TINY = {"word_dim": 8, "char_dim": 4, "char_filters": 3, "lstm1": 12, "lstm2": 6,
        "projection": 6, "hidden": 8, "dep_projection": 5, "batch_size": 4, "warmup_steps": 0,
        "max_vocab": 500}

_NOUNS = ["dog", "cat", "Paris", "bank", "price", "market", "child", "idea"]
_VERBS = ["saw", "likes", "sold", "bought", "finds"]
_DETS = ["the", "a", "every"]


def _sentence(rng: random.Random) -> list[tuple[str, str, str, int, str]]:
    """(word, POS, chunk, head, relation) for `det noun verb det noun .`."""
    d1, n1, v, d2, n2 = (rng.choice(_DETS), rng.choice(_NOUNS), rng.choice(_VERBS),
                         rng.choice(_DETS), rng.choice(_NOUNS))
    return [(d1, "DET", "B-NP", 2, "det"), (n1, "NOUN", "I-NP", 3, "nsubj"),
            (v, "VERB", "B-VP", 0, "root"), (d2, "DET", "B-NP", 5, "det"),
            (n2, "NOUN", "I-NP", 3, "obj"), (".", "PUNCT", "O", 3, "punct")]


def write_chunk(d: Path, n_train: int = 24, n_test: int = 8, seed: int = 0) -> Path:
    rng = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.txt", n_train), ("test.txt", n_test)):
        lines = []
        for _ in range(n):
            lines += [f"{w} {p} {c}" for w, p, c, _, _ in _sentence(rng)] + [""]
        (d / name).write_text("\n".join(lines) + "\n")
    return d


def write_ud(d: Path, n_train: int = 24, n_dev: int = 8, seed: int = 1) -> Path:
    rng = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.conllu", n_train), ("dev.conllu", n_dev)):
        lines = []
        for k in range(n):
            lines.append(f"# sent_id = {k}")
            for i, (w, p, _, h, r) in enumerate(_sentence(rng), start=1):
                lines.append("\t".join([str(i), w, w.lower(), p, "_", "_", str(h), r, "_", "_"]))
            lines.append("")
        (d / name).write_text("\n".join(lines) + "\n")
    return d


def write_unlabeled(path: Path, n: int = 40, seed: int = 2) -> Path:
    rng = random.Random(seed)
    text = "\n\n".join(" ".join(w for w, *_ in _sentence(rng))[:-2] + "." for _ in range(n))
    path.write_text(text + "\n")
    return path


def two_task_model(sentences: list[list[str]], seed: int = 0, **overrides):
    """A tiny chunk + dep CVTModel over `sentences`' vocabulary (hidden 32, parser
    projection 16, then `overrides`): (model, vocab, cfg, [tag task, dep task])."""
    import torch

    from electra.cvt.config import make_config
    from electra.cvt.model import CVTModel
    from electra.cvt.tasks import CVTTask
    from electra.cvt.vocab import build_vocab

    torch.manual_seed(seed)
    cfg = make_config("small", {**TINY, "hidden": 32, "dep_projection": 16, **overrides})
    tag = CVTTask("chunk")
    tag.labels = ["B-NP", "E-NP", "O", "S-VP"]
    dep = CVTTask("dep")
    dep.labels = ["det", "nsubj", "obj", "root"]
    vocab = build_vocab(sentences, [], 100)
    return CVTModel(cfg, vocab, [tag, dep]), vocab, cfg, [tag, dep]


def write_ner(d: Path) -> Path:
    """A tiny CoNLL-2003 NER folder (eng.train: 3 copies of two sentences, eng.testa: one),
    IOB1 tags, with a -DOCSTART- line."""
    d.mkdir(parents=True, exist_ok=True)
    sent = ["-DOCSTART- -X- -X- O", "", "EU NNP B-NP I-ORG", "rejects VBZ B-VP O",
            "German JJ B-NP I-MISC", "call NN I-NP O", "", "Peter NNP B-NP I-PER",
            "Blackburn NNP I-NP I-PER", ""]
    (d / "eng.train").write_text("\n".join(sent * 3) + "\n")
    (d / "eng.testa").write_text("\n".join(sent) + "\n")
    return d

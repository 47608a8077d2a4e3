"""The CVT tasks: chunk (CoNLL-2000), ner (CoNLL-2003), pos and dep (UD CoNLL-U).

A task reads its files (names as `electra finetune` looks for them), holds its label set (read
from the training data), turns sentences into target ids and predictions back into strings,
and scores them: span F1 for chunk/ner (BIOES internally, IOB2 for scoring, 4.3.1), accuracy
for pos, UAS/LAS for dep with punctuation (gold UPOS PUNCT) left out (4.3.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from electra.conll import Sentence, read_columns, read_conllu
from electra.cvt.conll import write_conllu, write_tagged
from electra.errors import ElectraError
from electra.tagschemes import from_bioes, iob1_to_iob2, to_bioes
from electra.tasks import tagging
from electra.tasks.metrics import span_f1

# UD's punctuation tag. SYM ($, %, +, emoticons) is left in: PTB evaluation scripts score
# $ and % as words, and UD's SYM is closer to those than to punctuation.
PUNCT_UPOS = ("PUNCT",)
TASK_NAMES = ("chunk", "ner", "pos", "dep")


def attachment_scores(golds: Sequence[Sentence], heads: Sequence[Sequence[int]],
                      rels: Sequence[Sequence[str]], punct: Sequence[str] = PUNCT_UPOS
                      ) -> dict[str, float]:
    """UAS and LAS over words whose gold UPOS is not punctuation."""
    total = uas = las = 0
    for g, hs, rs in zip(golds, heads, rels, strict=True):
        for i in range(len(g.words)):
            if g.upos and g.upos[i] in punct:
                continue
            total += 1
            if hs[i] == g.heads[i]:
                uas += 1
                las += rs[i] == g.rels[i]
    return {"uas": uas / total if total else 0.0, "las": las / total if total else 0.0}


class CVTTask:
    def __init__(self, name: str):
        if name not in TASK_NAMES:
            raise ElectraError(f"unknown CVT task {name!r} (known: {', '.join(TASK_NAMES)})")
        self.name = name
        self.kind = "dep" if name == "dep" else "tag"
        self.bioes = name in ("chunk", "ner")
        factory = {"chunk": tagging.chunking, "ner": tagging.ner}.get(name, tagging.pos)
        self.files = factory().files
        self.labels: list[str] = []
        self.primary_metric = {"chunk": "f1", "ner": "f1", "pos": "accuracy", "dep": "las"}[name]

    # ---- reading ----
    def read_file(self, path: str | Path, labeled: bool = True) -> list[Sentence]:
        """`labeled=False`: input to predict, whose labels (if any) are not needed."""
        if self.kind == "tag" and self.name != "pos":
            return read_columns(path, labeled=labeled)
        sents = read_conllu(path, tree=labeled and self.kind == "dep")
        if not labeled:
            for s in sents:
                s.tags, s.heads, s.rels = [], [], []
        return sents

    def find(self, data_dir: str | Path, split: str) -> Path:
        d = Path(data_dir)
        for name in self.files[split].split("|"):
            if (d / name).is_file():
                return d / name
        raise ElectraError(f"{d}: no {self.files[split].replace('|', ' or ')} for the {split} "
                           f"split of {self.name}")

    def set_labels(self, train: Sequence[Sentence]) -> None:
        if self.kind == "dep":
            self.labels = sorted({r for s in train for r in s.rels})
        else:
            self.labels = sorted({t for s in train for t in self.train_tags(s)})

    def train_tags(self, s: Sentence) -> list[str]:
        return to_bioes(s.tags) if self.bioes else s.tags

    # ---- targets ----
    def targets(self, sents: Sequence[Sentence], width: int) -> dict[str, torch.Tensor]:
        """Target ids padded with -100; labels unseen in training are -100 too."""
        index = {label: i for i, label in enumerate(self.labels)}
        if self.kind == "tag":
            tags = torch.full((len(sents), width), -100, dtype=torch.long)
            for b, s in enumerate(sents):
                for i, t in enumerate(self.train_tags(s)):
                    tags[b, i] = index.get(t, -100)
            return {"tags": tags}
        heads = torch.full((len(sents), width), -100, dtype=torch.long)
        rels = torch.full((len(sents), width), -100, dtype=torch.long)
        for b, s in enumerate(sents):
            for i, (h, r) in enumerate(zip(s.heads, s.rels, strict=True)):
                heads[b, i] = h
                rels[b, i] = index.get(r, -100)
        return {"heads": heads, "rels": rels}

    # ---- predictions ----
    def to_strings(self, decoded: torch.Tensor, lengths: Sequence[int]) -> list:
        """Per sentence: tags (IOB2 for span tasks), or (heads, relations) for dep."""
        out = []
        for row, n in zip(decoded.tolist(), lengths, strict=True):
            if self.kind == "tag":
                tags = [self.labels[i] for i in row[:n]]
                out.append(from_bioes(tags) if self.bioes else tags)
            else:
                out.append(([h for h, _ in row[:n]], [self.labels[r] for _, r in row[:n]]))
        return out

    def score(self, golds: Sequence[Sentence], preds: Sequence) -> dict[str, float]:
        if self.kind == "dep":
            return attachment_scores(golds, [p[0] for p in preds], [p[1] for p in preds])
        if self.bioes:
            return span_f1(preds, [iob1_to_iob2(g.tags) for g in golds])
        n = sum(len(g.tags) for g in golds)
        right = sum(p == t for g, ps in zip(golds, preds, strict=True)
                    for p, t in zip(ps, g.tags, strict=True))
        return {"accuracy": right / n if n else 0.0}

    def write(self, path: str | Path, sents: Sequence[Sentence], preds: Sequence) -> Path:
        """CoNLL-style output: conlleval columns for tagging, CoNLL-U for dep."""
        if self.kind == "dep":
            return write_conllu(path, sents, [p[0] for p in preds], [p[1] for p in preds])
        return write_tagged(path, sents, preds)

    @property
    def suffix(self) -> str:
        return ".conllu" if self.kind == "dep" else ".txt"

"""The CVT tasks: chunk (CoNLL-2000), ner (CoNLL-2003), pos and dep (UD CoNLL-U).

A task reads its files (names as `electra finetune` looks for them), holds its label set (read
from the training data), turns sentences into target ids and predictions back into strings,
and scores them: span F1 for chunk/ner (BIOES internally, IOB2 for scoring, 4.3.1), accuracy
for pos, UAS/LAS for dep with punctuation (gold UPOS PUNCT) left out (4.3.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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


@dataclass(frozen=True)
class CVTTaskSpec:
    """A CVT task: a tagging dataset (`electra.tasks.tagging.DATASETS`, the same record
    `electra finetune` reads) tagged word by word, or UD trees parsed."""

    dataset: tagging.TaggingDataset
    kind: Literal["tag", "dep"] = "tag"

    @property
    def primary_metric(self) -> str:
        if self.kind == "dep":
            return "las"
        return "f1" if self.dataset.spans else "accuracy"


# CVT's own tasks: dependency parsing on UD English EWT. Every tagging dataset
# (`electra.tasks.tagging.DATASETS`) is a CVT task too, under its own name.
PARSING_TASKS: dict[str, CVTTaskSpec] = {
    "dep": CVTTaskSpec(tagging.TaggingDataset(tagging.UD_EWT_FILES, "conllu", 3, "tags"),
                       kind="dep"),
}


def cvt_tasks() -> dict[str, CVTTaskSpec]:
    """Every task CVT trains, by name: the tagging datasets, then the parsing tasks."""
    return {**{name: CVTTaskSpec(dataset) for name, dataset in tagging.DATASETS.items()},
            **PARSING_TASKS}


def task_names() -> tuple[str, ...]:
    return tuple(cvt_tasks())


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
        tasks = cvt_tasks()
        if name not in tasks:
            raise ElectraError(f"unknown CVT task {name!r} (known: {', '.join(tasks)})")
        spec = tasks[name]
        self.name = name
        self.dataset = spec.dataset
        self.kind = spec.kind
        # Span labels train as BIOES and score as IOB2 (4.3.1).
        self.bioes = spec.kind == "tag" and spec.dataset.spans
        self.labels: list[str] = []
        self.primary_metric = spec.primary_metric

    # ---- reading ----
    def read_file(self, path: str | Path, labeled: bool = True) -> list[Sentence]:
        """`labeled=False`: input to predict, whose labels (if any) are not needed."""
        if self.dataset.format == "columns":
            return read_columns(path, tag_column=self.dataset.tag_column, labeled=labeled)
        sents = read_conllu(path, tree=labeled and self.kind == "dep",
                            tag_column=self.dataset.tag_column)
        if not labeled:
            for s in sents:
                s.tags, s.heads, s.rels = [], [], []
        return sents

    def find(self, data_dir: str | Path, split: str) -> Path:
        return self.dataset.find(data_dir, split, self.name)

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

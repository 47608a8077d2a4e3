"""Word-level tagging: CoNLL-2000 chunking, CoNLL-2003-style NER (span F1, conlleval) and UD
POS tagging (accuracy), dissertation section 2.6.1.

Each word's label goes on its first sub-token; the other sub-tokens get -100 and are ignored
by the loss. The tag set is read from the training file and saved with the fine-tuned model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from electra import conll
from electra.errors import ElectraError
from electra.tasks import metrics as M
from electra.tasks.base import Example, Task


def read_conll(path: Path, tag_column: int, iob1_to_iob2: bool = False) -> list[Example]:
    """Whitespace-separated columns, one word per line, blank line between sentences;
    -DOCSTART- lines (CoNLL-2003) are skipped. Labels are not checked against IOB: span F1
    reads IOB1, IOB2 and BIOES alike."""
    return _examples(conll.read_columns(path, tag_column=tag_column, check_iob=False,
                                        iob2=iob1_to_iob2))


def read_conllu(path: Path, column: int = 3) -> list[Example]:
    """CoNLL-U sentences (UPOS is column 3, 0-based); multiword-token lines ("1-2") and empty
    nodes ("1.1") are skipped, as they carry no tag of a surface word."""
    return _examples(conll.read_conllu(path, tree=False, tag_column=column))


def _examples(sentences: list[conll.Sentence]) -> list[Example]:
    return [Example(index=i, words=s.words, tags=s.tags, where=s.where)
            for i, s in enumerate(sentences)]


class TaggingTask(Task):
    head_kind = "token"

    def __init__(self, name: str, files: dict[str, str], reader, span_metric: bool,
                 epochs: int = 3):
        self.name = name
        self.files = files
        self.reader = reader
        self.span_metric = span_metric
        self.metric_names = ("f1", "precision", "recall") if span_metric else ("accuracy",)
        self.primary_metric = self.metric_names[0]
        self.default_epochs = epochs
        self.eval_splits = {"dev": "dev"}
        self.labels = []

    def read(self, data_dir: str | Path, split: str) -> list[Example]:
        if split not in self.files:
            raise ElectraError(f"{self.name}: no split {split!r}")
        d = Path(data_dir)
        for name in self.files[split].split("|"):  # alternatives, first that exists
            if (d / name).is_file():
                examples = self.reader(d / name)
                break
        else:
            raise ElectraError(f"{d}: no {self.files[split].replace('|', ' or ')} for the "
                               f"{split} split of {self.name}")
        if split == "train" and not self.labels:
            self.labels = sorted({t for ex in examples for t in ex.tags})
        return examples

    def featurize(self, examples: list[Example], tokenizer, max_seq_len: int) -> list[dict]:
        tokenizer.enable_truncation(max_seq_len)
        tokenizer.no_padding()
        encodings = tokenizer.encode_batch([ex.words for ex in examples], is_pretokenized=True)
        label_ids = {label: i for i, label in enumerate(self.labels)}
        feats = []
        for i, (ex, enc) in enumerate(zip(examples, encodings, strict=True)):
            labels, first_pos, prev = [], [], None
            for pos, word in enumerate(enc.word_ids):
                if word is not None and word != prev:
                    labels.append(label_ids.get(ex.tags[word], -100) if ex.tags else -100)
                    first_pos.append((word, pos))
                else:
                    labels.append(-100)
                prev = word if word is not None else prev
            feats.append({"input_ids": enc.ids, "token_type_ids": enc.type_ids,
                          "labels": labels, "example_index": i, "first_positions": first_pos})
        return feats

    def _fallback(self) -> str:
        return "O" if "O" in self.labels else self.labels[0]

    def postprocess(self, examples, features, outputs) -> list[list[str]]:
        preds: list[Any] = [None] * len(examples)
        for feat, out in zip(features, outputs, strict=True):
            ex = examples[feat["example_index"]]
            # Words cut off by truncation (or with no sub-token) get the fallback tag.
            tags = [self._fallback()] * len(ex.words)
            for word, pos in feat["first_positions"]:
                tags[word] = self.labels[int(np.argmax(out[pos]))]
            preds[feat["example_index"]] = tags
        return preds

    def gold(self, example: Example) -> Any:
        return example.tags

    def format_prediction(self, pred: list[str]) -> str:
        return " ".join(pred)

    def score(self, examples: list[Example], preds: list[list[str]]) -> dict[str, float]:
        golds = [ex.tags for ex in examples]
        if self.span_metric:
            return M.span_f1(preds, golds)
        flat_p = [t for sent in preds for t in sent]
        flat_g = [t for sent in golds for t in sent]
        return {"accuracy": M.accuracy(flat_p, flat_g)}


def chunking() -> TaggingTask:
    # CoNLL-2000 has no dev set; its test file is the evaluation split.
    return TaggingTask("chunk", {"train": "train.txt", "dev": "dev.txt|test.txt",
                                 "test": "test.txt"},
                       lambda p: read_conll(p, 2), span_metric=True)


def ner() -> TaggingTask:
    # CoNLL-2003 (IOB1 or IOB2 input; IOB2 for training and scoring).
    return TaggingTask("ner", {"train": "train.txt|eng.train",
                               "dev": "valid.txt|dev.txt|testa.txt|eng.testa",
                               "test": "test.txt|testb.txt|eng.testb"},
                       lambda p: read_conll(p, -1, iob1_to_iob2=True), span_metric=True)


def pos() -> TaggingTask:
    files = {split: "|".join(f"en_ewt-ud-{split}.conllu{gz}" for gz in (".gz", "")) +
             f"|{split}.conllu|{split}.conllu.gz" for split in ("train", "dev", "test")}
    return TaggingTask("pos", files, read_conllu, span_metric=False)

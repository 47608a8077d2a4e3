"""Word-level tagging: CoNLL-2000 chunking, CoNLL-2003-style NER (span F1, conlleval) and UD
POS tagging (accuracy), dissertation section 2.6.1.

Each word's label goes on its first sub-token; the other sub-tokens get -100 and are ignored
by the loss. The tag set is read from the training file and saved with the fine-tuned model.
Data may also be in the Hugging Face Hub's layouts (`electra.tasks.hub_layout`): rows of
`tokens` and integer tags named by the features, as the Hub serves CoNLL-2003, CoNLL-2000 and
WikiANN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from electra import conll
from electra.errors import ElectraError
from electra.tagschemes import iob1_to_iob2
from electra.tasks import metrics as M
from electra.tasks.base import Example, Task
from electra.tasks.hub_layout import HubLayout, HubSplit, find_layout, label_name, split_names


@dataclass(frozen=True)
class TaggingDataset:
    """A word-tagging dataset: its files, their format and its labels' scheme. `electra
    finetune`'s tagging tasks and CVT's (`electra.cvt.tasks`) both read this one record, so a
    new dataset is one entry in `DATASETS`."""

    # split -> the file names to look for in the data folder, "a|b": the first that exists
    files: dict[str, str]
    format: Literal["columns", "conllu"]  # CoNLL-2000/2003 columns, or UD's CoNLL-U
    tag_column: int  # the label's column, 0-based (-1: the last; UPOS is 3 in CoNLL-U)
    # "iob1" / "iob2": span labels, scored by span F1 (IOB1 read as IOB2); "tags": one label
    # per word, scored by accuracy
    scheme: Literal["iob1", "iob2", "tags"]
    # In the Hub's layouts (rows of `tokens` and integer tags): the tag column, the first of
    # these that exists, and the Hub's split names where they are not `split_names`' ("a|b")
    hub_tags: tuple[str, ...] = ()
    hub_splits: tuple[tuple[str, str], ...] = ()

    @property
    def spans(self) -> bool:
        return self.scheme != "tags"

    def locate(self, data_dir: str | Path, split: str, task: str) -> Path | None:
        """The file of `split` in `data_dir`, or None."""
        if split not in self.files:
            raise ElectraError(f"{task}: no split {split!r}")
        d = Path(data_dir)
        return next((d / name for name in self.files[split].split("|")
                     if (d / name).is_file()), None)

    def find(self, data_dir: str | Path, split: str, task: str) -> Path:
        """The file of `split` in `data_dir`; an error naming the names looked for."""
        path = self.locate(data_dir, split, task)
        if path is not None:
            return path
        d = Path(data_dir)
        raise ElectraError(f"{d}: no {self.files[split].replace('|', ' or ')} for the {split} "
                           f"split of {task}")

    def read_examples(self, path: Path) -> list[Example]:
        """Fine-tuning's view: labels are not checked against IOB (span F1 reads IOB1, IOB2
        and BIOES alike); IOB1 becomes IOB2. CoNLL-U: multiword-token lines ("1-2") and empty
        nodes ("1.1") are skipped, as they carry no tag of a surface word."""
        if self.format == "columns":
            sentences = conll.read_columns(path, tag_column=self.tag_column, check_iob=False,
                                           iob2=self.scheme == "iob1")
        else:
            sentences = conll.read_conllu(path, tree=False, tag_column=self.tag_column)
        return [Example(index=i, words=s.words, tags=s.tags, where=s.where)
                for i, s in enumerate(sentences)]

    def hub_split(self, layout: HubLayout, split: str) -> HubSplit:
        names = dict(self.hub_splits).get(split)
        return layout.split(names.split("|") if names else split_names(split))

    def read_hub(self, split: HubSplit, label_names: Sequence[str] = ()) -> list[Example]:
        """The examples of rows of `tokens` and integer tags (named by `label_names`, else by
        the features), as the files' reader gives them: "-DOCSTART-" rows are skipped and
        IOB1 becomes IOB2."""
        column = next((c for c in self.hub_tags if c in split.columns), None)
        if column is None:
            raise ElectraError(f"{split.where}: no tag column {' or '.join(self.hub_tags)} in "
                               f"the {split.name} split (columns: {', '.join(split.columns)})")
        names = list(label_names) or split.class_names(column)
        examples = []
        for where, row in split.rows(("tokens", column)):
            words, ids = row["tokens"] or [], row[column] or []
            if not words or words[0] == conll.DOCSTART:
                continue
            if len(ids) != len(words):
                raise ElectraError(f"{where}: {len(words)} tokens but {len(ids)} {column}")
            if names is None and any(isinstance(t, int) for t in ids):
                raise ElectraError(f"{split.where}: {column!r} holds class ids but the features "
                                   "name no classes; give them with --label-names")
            tags = [label_name(t, names, column, where) for t in ids]
            if any(t is None for t in tags):
                raise ElectraError(f"{where}: a token without a tag in {column!r}")
            if self.scheme == "iob1":
                tags = iob1_to_iob2(tags)
            examples.append(Example(index=len(examples), words=[str(w) for w in words],
                                    tags=tags, where=where))
        return examples


# UD English EWT, as released (en_ewt-ud-*.conllu, .gz or not) or renamed to SPLIT.conllu;
# CVT's dependency parsing reads the same files.
UD_EWT_FILES = {split: "|".join(f"en_ewt-ud-{split}.conllu{gz}" for gz in (".gz", ""))
                + f"|{split}.conllu|{split}.conllu.gz" for split in ("train", "dev", "test")}

DATASETS: dict[str, TaggingDataset] = {
    # CoNLL-2000 chunking (word, POS, chunk: the label is the last column). It has no dev
    # set; its test file is the evaluation split.
    "chunk": TaggingDataset({"train": "train.txt", "dev": "dev.txt|test.txt",
                             "test": "test.txt"}, "columns", -1, "iob2", ("chunk_tags",),
                            (("dev", "validation|dev|test"),)),
    # CoNLL-2003 NER, IOB1 (as released) or IOB2; the label is the last column.
    "ner": TaggingDataset({"train": "train.txt|eng.train",
                           "dev": "valid.txt|dev.txt|testa.txt|eng.testa",
                           "test": "test.txt|testb.txt|eng.testb"}, "columns", -1, "iob1",
                          ("ner_tags",)),
    # UD English EWT part-of-speech tags (UPOS).
    # The Hub: universal_dependencies' `upos`, or CoNLL-2003's `pos_tags`.
    "pos": TaggingDataset(UD_EWT_FILES, "conllu", 3, "tags", ("upos", "pos_tags")),
}


class TaggingTask(Task):
    head_kind = "token"

    def __init__(self, name: str, dataset: TaggingDataset, epochs: int = 3):
        self.name = name
        self.hub_configs = (name,)
        self.dataset = dataset
        self.span_metric = dataset.spans
        self.metric_names = ("f1", "precision", "recall") if self.span_metric else ("accuracy",)
        self.primary_metric = self.metric_names[0]
        self.default_epochs = epochs
        self.eval_splits = {"dev": "dev"}
        self.labels = []

    def read(self, data_dir: str | Path, split: str) -> list[Example]:
        path = self.dataset.locate(data_dir, split, self.name)
        layout = None if path is not None else find_layout(data_dir, self.hub_configs)
        if layout is not None:
            examples = self.dataset.read_hub(self.dataset.hub_split(layout, split),
                                             self.label_names)
        else:
            examples = self.dataset.read_examples(path or self.dataset.find(data_dir, split,
                                                                            self.name))
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


"""The fine-tuning task interface, shared by GLUE, tagging, user tasks and SQuAD.

A task turns files into examples, examples into features, features into batches, head outputs
into losses and predictions, and predictions into metrics and files. The loop
(`electra.finetuning.training`) knows nothing else, so single-task, multi-task and distilled
training are one loop with different targets:

    examples = task.read(data_dir, split)          # list[Example], input order; the task's
        # own files or the Hub's layouts (`electra.tasks.hub_layout`)
    features = task.featurize(examples, tokenizer, max_seq_len)
        # list[dict]: input_ids, token_type_ids, "labels" (int, float, or a per-token list with
        # -100 for ignored positions) and "example_index" (its example's position). A span task
        # may emit several features per example (document stride); each names its example.
    batch = task.collate(features, pad_id)         # padded tensors
    head = make_head(task.head_kind, encoder_cfg, task.num_outputs, dropout)  # finetune.heads
    loss = task.loss(output, batch)                # to "targets" if given (distillation), else
                                                   # to the gold "labels"
    preds = task.postprocess(examples, features, outputs)
        # outputs[i] is feature i's head output (numpy); returns one prediction per example,
        # aggregating the features of an example (a span task picks its best span here)
    metrics = task.score(examples, preds)          # dict of floats; task.primary_metric names one
    task.write_predictions(out_dir, stem, examples, preds)   # dev files; write_test: test files

A span-extraction task (SQuAD, `electra.tasks.squad`) subclasses `Task` with head_kind "span"
(whose output carries its own loss and, at evaluation, the start/end beams), its own collate,
strided windows in `featurize`, answer text in `postprocess`, and the official prediction files.
`format_prediction` turns a prediction into one TSV/JSONL cell.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from electra.errors import ElectraError
from electra.fileutil import write_atomic


@dataclass
class Example:
    """One input: texts for sentence(-pair) tasks or words for tagging; `where` is "file:line"
    so errors and predictions can point back at the source."""

    index: int
    texts: tuple[str, ...] = ()
    label: Any = None
    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    uid: str = ""
    where: str = ""


class Task:
    name: str = ""
    head_kind: str = "sequence"
    metric_names: tuple[str, ...] = ()
    primary_metric: str = ""
    default_epochs: int = 3
    default_max_seq_len: int = 128
    # Evaluation splits: name -> file stem. MNLI has two (matched, mismatched).
    eval_splits: dict[str, str] = {"dev": "dev"}
    labels: list[str] = []
    # The class names of integer labels in the Hub's layouts, by class id, where the data's
    # features lack them (--label-names); saved with the model.
    label_names: tuple[str, ...] = ()
    # The folders of a Hub dataset repository that may hold the task's data (nyu-mll/glue's
    # sst2/): where its reader looks, and what a dataset id's snapshot fetches (`electra.hub`).
    hub_configs: tuple[str, ...] = ()

    @property
    def num_outputs(self) -> int:
        return len(self.labels)

    def read(self, data_dir: str | Path, split: str) -> list[Example]:
        raise NotImplementedError

    def featurize(self, examples: list[Example], tokenizer, max_seq_len: int) -> list[dict]:
        raise NotImplementedError

    def collate(self, features: list[dict], pad_id: int = 0) -> dict[str, torch.Tensor]:
        return pad_collate(features, pad_id)

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Cross-entropy to the gold class ids ("labels"), or to a class distribution when the
        batch carries "targets" (distillation, dissertation section 3.2.2)."""
        labels = batch.get("targets", batch["labels"])
        if labels.is_floating_point():
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                   labels.view(-1, logits.shape[-1]))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1),
                               ignore_index=-100)

    def loss_units(self, batch: dict[str, torch.Tensor]) -> int:
        """What `loss` averages over in `batch` (gold labels not ignored, or rows of soft
        targets): gradient accumulation weights each micro-batch's loss by its share of these,
        so that the step's gradient is the whole batch's mean."""
        labels = batch.get("targets", batch["labels"])
        if labels.is_floating_point():
            return labels.numel() // labels.shape[-1]
        return int((labels != -100).sum())

    def hits(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[int, int]:
        """(correct, counted) argmax predictions of a training batch, for the accuracy log."""
        gold = batch["labels"]
        mask = gold != -100
        return int(((logits.argmax(-1) == gold) & mask).sum()), int(mask.sum())

    def postprocess(self, examples: list[Example], features: list[dict],
                    outputs: list[np.ndarray]) -> list[Any]:
        raise NotImplementedError

    def score(self, examples: list[Example], preds: list[Any]) -> dict[str, float]:
        raise NotImplementedError

    def gold(self, example: Example) -> Any:
        return example.label

    def format_prediction(self, pred: Any) -> str:
        return str(pred)

    def write_predictions(self, out_dir: Path, stem: str, examples: list[Example],
                          preds: list[Any]) -> dict[str, str]:
        """OUT/STEM_predictions.jsonl, one {"index", "prediction", "label"} per example in
        input order; returns {"predictions": path}."""
        lines = [json.dumps({"index": ex.index, "prediction": pred, "label": self.gold(ex)})
                 for ex, pred in zip(examples, preds, strict=True)]
        path = write_atomic(Path(out_dir) / f"{stem}_predictions.jsonl",
                            "".join(line + "\n" for line in lines))
        return {"predictions": str(path)}

    def write_test(self, out_dir: Path, data_dir: str | Path,
                   predict: Callable[[list[Example]], list[Any]]) -> list[str]:
        """Predict the test split with `predict` and write its files; returns their paths."""
        examples = self.read(data_dir, "test")
        return list(self.write_predictions(out_dir, "test", examples,
                                           predict(examples)).values())

    def served_labels(self) -> list[str]:
        """The class names a served model gives (config.json's id2label, what pipelines print):
        the labels as the data spells them, unless the task has names for them."""
        return [str(label) for label in self.labels]

    def state(self) -> dict:
        """What a fine-tuned model directory must remember to rebuild this task."""
        state = {"name": self.name, "labels": list(self.labels)}
        if self.label_names:
            state["label_names"] = list(self.label_names)
        served = self.served_labels()
        if served != [str(label) for label in self.labels]:
            state["served_labels"] = served
        return state

    def load_state(self, state: dict) -> None:
        self.labels = list(state["labels"])
        self.label_names = tuple(state.get("label_names", ()))


# --- file helpers ------------------------------------------------------------------------------


def open_text(path: Path) -> io.TextIOBase:
    """UTF-8 text, gzipped or not; a byte-order mark (MRPC's files have one) is dropped."""
    if not path.is_file():
        raise ElectraError(f"{path}: file not found")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig",
                                newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_delimited(path: Path, delimiter: str = "\t", quoting: int = csv.QUOTE_NONE
                   ) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-empty row. GLUE TSVs are read with no quoting (their
    texts contain bare quotes), as the GLUE baselines do."""
    with open_text(path) as handle:
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)
        try:
            for row in reader:
                if row and any(cell.strip() for cell in row):
                    yield reader.line_num, row
        except csv.Error as e:
            raise ElectraError(f"{path}:{reader.line_num}: {e}") from None


def pad_collate(features: list[dict], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Sentence or token features padded to the longest in the batch (dynamic padding); token
    labels are padded with -100 (ignored by the loss)."""
    longest = max(len(f["input_ids"]) for f in features)
    n = len(features)
    ids = torch.full((n, longest), pad_id, dtype=torch.long)
    types = torch.zeros((n, longest), dtype=torch.long)
    mask = torch.zeros((n, longest), dtype=torch.long)
    token_level = isinstance(features[0]["labels"], list)
    if token_level:
        labels = torch.full((n, longest), -100, dtype=torch.long)
    for i, f in enumerate(features):
        k = len(f["input_ids"])
        ids[i, :k] = torch.tensor(f["input_ids"])
        types[i, :k] = torch.tensor(f["token_type_ids"])
        mask[i, :k] = 1
        if token_level:
            labels[i, :k] = torch.tensor(f["labels"])
    if not token_level:
        dtype = torch.float if isinstance(features[0]["labels"], float) else torch.long
        labels = torch.tensor([f["labels"] for f in features], dtype=dtype)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}

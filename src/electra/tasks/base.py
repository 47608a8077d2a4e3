"""The fine-tuning task interface, shared by GLUE, tagging, user tasks and SQuAD.

A task turns files into examples, examples into features, head outputs into predictions,
and predictions into metrics. The loop (`electra.finetune.loop`) knows nothing else:

    examples = task.read(data_dir, split)          # list[Example], input order
    features = task.featurize(examples, tokenizer, max_seq_len)
        # list[dict]: input_ids, token_type_ids, "labels" (int, float, or a per-token list with
        # -100 for ignored positions) and "example_index" (its example's position). A span task
        # may emit several features per example (document stride); each names its example.
    head = make_head(task.head_kind, task.num_outputs, hidden)   # "sequence" | "token" | "span"
    loss = task.loss(logits, batch)                # logits from the head, batch collated
    preds = task.postprocess(examples, features, outputs)
        # outputs[i] is feature i's head output (numpy); returns one prediction per example,
        # aggregating the features of an example (a span task picks its best span here)
    metrics = task.score(examples, preds)          # dict of floats; task.primary_metric names one

A span-extraction task (SQuAD, `electra.tasks.squad`) subclasses `Task` with head_kind "span"
(`electra.finetune.heads.SpanHead`, whose output carries its own loss and, at evaluation, the
start/end beams the loop passes to `postprocess`), overrides `featurize` to emit strided windows
and `postprocess` to choose answer text, and writes the official prediction files.
`format_prediction` turns a prediction into one TSV/JSONL cell.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from electra.errors import ElectraError


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

    @property
    def num_outputs(self) -> int:
        return len(self.labels)

    def read(self, data_dir: str | Path, split: str) -> list[Example]:
        raise NotImplementedError

    def featurize(self, examples: list[Example], tokenizer, max_seq_len: int) -> list[dict]:
        raise NotImplementedError

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                               batch["labels"].view(-1), ignore_index=-100)

    def postprocess(self, examples: list[Example], features: list[dict],
                    outputs: list[np.ndarray]) -> list[Any]:
        raise NotImplementedError

    def score(self, examples: list[Example], preds: list[Any]) -> dict[str, float]:
        raise NotImplementedError

    def gold(self, example: Example) -> Any:
        return example.label

    def format_prediction(self, pred: Any) -> str:
        return str(pred)

    def state(self) -> dict:
        """What a fine-tuned model directory must remember to rebuild this task."""
        return {"name": self.name, "labels": list(self.labels)}

    def load_state(self, state: dict) -> None:
        self.labels = list(state["labels"])


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

"""Your own sentence(-pair) task from CSV, TSV, JSON lines or Parquet files.

DATA holds train.{csv,tsv,jsonl,parquet} and dev.{...} (test optional), or the same splits in
the Hugging Face Hub's layouts (`electra.tasks.hub_layout`: Parquet shards, `validation` as
dev, or a `datasets` save_to_disk folder). CSV/TSV files need a header row; `text_a`,
`text_b` (optional) and `label` name columns (JSONL: fields). Integer class ids in Parquet or
Arrow data become their names from the features (or --label-names). Classification
labels are the set seen in train (saved with the model); `label_type="real"` is regression.
"""

from __future__ import annotations

import csv
from pathlib import Path

from electra.data.corpus import iter_json_lines
from electra.errors import ElectraError
from electra.tasks.base import Example, read_delimited
from electra.tasks.hub_layout import HubSplit, find_layout, label_name, split_names
from electra.tasks.sentence import SentenceTask

FORMATS = (".tsv", ".csv", ".jsonl")


class UserTask(SentenceTask):
    name = "user"

    def __init__(self, text_a: str | None = None, text_b: str | None = None,
                 label: str | None = None, label_type: str = "class", task_name: str = "user"):
        if not text_a or not label:
            raise ElectraError("task user needs --text-a COLUMN and --label COLUMN "
                               "(and --text-b COLUMN for sentence pairs)")
        if label_type not in ("class", "real"):
            raise ElectraError(f"label type must be class or real, got {label_type!r}")
        self.columns = [c for c in (text_a, text_b) if c]
        self.label_column = label
        self.label_type = label_type
        self.regression = label_type == "real"
        self.metric_names = ("pearson", "spearman") if self.regression else ("accuracy",)
        self.primary_metric = self.metric_names[0]
        self.labels = []
        self.options = {"text_a": text_a, "text_b": text_b, "label": label,
                        "label_type": label_type}
        if task_name != "user":  # a named user task of a multi-task model
            self.name = task_name
            self.hub_configs = (task_name,)
            self.options["task_name"] = task_name

    def state(self) -> dict:
        return {**super().state(), "kind": "user", "options": self.options}

    def read(self, data_dir: str | Path, split: str) -> list[Example]:
        d = Path(data_dir)
        if self.name != "user" and (d / self.name).is_dir():  # DATA/<task>/, as GLUE's layout
            d = d / self.name
        path = next((d / f"{split}{ext}" for ext in FORMATS if (d / f"{split}{ext}").is_file()),
                    None)
        layout = find_layout(d) if path is None else None
        if path is not None:
            rows = self._rows(path)
        elif layout is not None:
            rows = self._hub_rows(layout.split(split_names(split)), split != "test")
        else:
            raise ElectraError(f"{d}: no {split}.tsv, {split}.csv, {split}.jsonl or "
                               f"{split}.parquet, and no Hub layout")
        has_label = split != "test"
        if split == "train" and not self.regression and not self.labels:
            rows = list(rows)
            self.labels = sorted({self._field(r, self.label_column, w) for w, r in rows})
        examples = []
        for where, row in rows:
            texts = tuple(self._field(row, c, where) for c in self.columns)
            if any(not t.strip() for t in texts):
                raise ElectraError(f"{where}: empty text")
            label = None
            if has_label or self.label_column in row:
                label = self.check_label(self._field(row, self.label_column, where), where)
            examples.append(Example(index=len(examples), texts=texts, label=label,
                                    uid=str(len(examples)), where=where))
        return examples

    @staticmethod
    def _field(row: dict, column: str, where: str) -> str:
        if column not in row or row[column] is None:
            raise ElectraError(f"{where}: no field {column!r}")
        return str(row[column])

    def _hub_rows(self, split: HubSplit, has_label: bool):
        """(file:row, {column: value}) of Parquet or `datasets` rows, class ids as their names
        (--label-names, else the features'; without either an id is its own name, "0")."""
        label = self.label_column
        rows = split.rows([*self.columns, label] if has_label else self.columns, (label,))
        names = None if self.regression else \
            list(self.label_names) or split.class_names(label)
        for where, row in rows:
            if label in row:
                row[label] = label_name(row[label], names, label, where)
                if row[label] is None:  # no label (-1, as the Hub's test splits have)
                    del row[label]
            yield where, row

    def _rows(self, path: Path):
        """(file:line, {column: value}) per record."""
        if path.suffix == ".jsonl":
            for lineno, record in iter_json_lines(path):
                if not isinstance(record, dict):
                    raise ElectraError(f"{path}:{lineno}: not a JSON object")
                yield f"{path}:{lineno}", record
            return
        delimiter = "\t" if path.suffix == ".tsv" else ","
        rows = read_delimited(path, delimiter, csv.QUOTE_MINIMAL)
        first = next(rows, None)
        if first is None:
            raise ElectraError(f"{path}: empty file")
        header = first[1]
        for lineno, row in rows:
            if len(row) != len(header):
                raise ElectraError(f"{path}:{lineno}: {len(row)} columns, expected "
                                   f"{len(header)}")
            yield f"{path}:{lineno}", dict(zip(header, row, strict=True))

"""The nine GLUE tasks, read from the standard GLUE directory layout (DATA/<Task>/{train,dev,
test}.tsv; MNLI has dev_matched/dev_mismatched and test_matched/test_mismatched) or from the
Hugging Face Hub's layouts (nyu-mll/glue's Parquet files, DATA/<config>/SPLIT-*.parquet, or a
`datasets` save_to_disk folder; `electra.tasks.hub_layout`), which give the same examples.

Columns are found by header name; CoLA's train/dev files have no header (source, label,
original mark, sentence); the Hub's columns and class names are each spec's `hub_*` fields.
Metrics follow the dissertation, section 2.6.2, plus F1 (MRPC, QQP) and Pearson (STS-B) as
GLUE reports them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.tasks.base import Example, read_delimited
from electra.tasks.hub_layout import HubSplit, find_layout, label_name, split_names
from electra.tasks.sentence import SentenceTask


@dataclass(frozen=True)
class GlueSpec:
    name: str
    text_columns: tuple[str, ...]
    label_column: str | None
    labels: tuple[str, ...]  # empty: regression
    metrics: tuple[str, ...]
    # The metric that counts in the GLUE score (section 2.6.2: MCC for CoLA, Spearman for STS,
    # accuracy elsewhere; MNLI counts its matched accuracy).
    glue_metric: str
    epochs: int = 3  # Table 5.2: 10 for RTE and STS, 3 otherwise
    eval_splits: tuple[tuple[str, str], ...] = (("dev", "dev"),)
    test_splits: tuple[tuple[str, str], ...] = (("test", "test"),)
    submission: tuple[str, ...] = ()  # GLUE server file name per test split
    test_id_column: str = "index"
    skip_short_rows: bool = False  # QQP's train file has a few truncated rows
    # Counted in the dev-set GLUE score: the eight tasks of section 5.2.4 (WNLI is left out, and
    # so is any task added to SPECS).
    in_glue_score: bool = False
    # The Hub's glue config, its text columns, and its class names by class id, each with the
    # TSV label it stands for (SST-2's "negative" is the TSV's "0").
    hub_config: str = ""
    hub_text_columns: tuple[str, ...] = ()
    hub_labels: tuple[tuple[str, str], ...] = ()


_BIN = ("0", "1")
_ENT = ("entailment", "not_entailment")


def _binary(negative: str, positive: str) -> dict:
    """The Hub's names for the TSVs' 0/1 labels."""
    return {"hub_labels": ((negative, "0"), (positive, "1"))}


def _named(*names: str) -> dict:
    """Class names the TSVs use too, in the Hub's class-id order."""
    return {"hub_labels": tuple((n, n) for n in names)}


_PAIR = ("sentence1", "sentence2")
SPECS: dict[str, GlueSpec] = {s.name: s for s in [
    GlueSpec("CoLA", ("sentence",), "label", _BIN, ("mcc", "accuracy"), "mcc",
             submission=("CoLA.tsv",), in_glue_score=True, hub_config="cola",
             **_binary("unacceptable", "acceptable")),
    GlueSpec("SST-2", ("sentence",), "label", _BIN, ("accuracy",), "accuracy",
             submission=("SST-2.tsv",), in_glue_score=True, hub_config="sst2",
             **_binary("negative", "positive")),
    GlueSpec("MRPC", ("#1 String", "#2 String"), "Quality", _BIN, ("accuracy", "f1"),
             "accuracy", submission=("MRPC.tsv",), in_glue_score=True, hub_config="mrpc",
             hub_text_columns=_PAIR, **_binary("not_equivalent", "equivalent")),
    GlueSpec("STS-B", ("sentence1", "sentence2"), "score", (), ("pearson", "spearman"),
             "spearman", epochs=10, submission=("STS-B.tsv",), in_glue_score=True,
             hub_config="stsb"),
    GlueSpec("QQP", ("question1", "question2"), "is_duplicate", _BIN, ("accuracy", "f1"),
             "accuracy", submission=("QQP.tsv",), test_id_column="id", skip_short_rows=True,
             in_glue_score=True, hub_config="qqp", **_binary("not_duplicate", "duplicate")),
    GlueSpec("MNLI", ("sentence1", "sentence2"), "gold_label",
             ("contradiction", "entailment", "neutral"), ("accuracy",), "accuracy",
             eval_splits=(("matched", "dev_matched"), ("mismatched", "dev_mismatched")),
             test_splits=(("test_matched", "test_matched"),
                         ("test_mismatched", "test_mismatched")),
             submission=("MNLI-m.tsv", "MNLI-mm.tsv"), in_glue_score=True, hub_config="mnli",
             hub_text_columns=("premise", "hypothesis"),
             **_named("entailment", "neutral", "contradiction")),
    GlueSpec("QNLI", ("question", "sentence"), "label", _ENT, ("accuracy",), "accuracy",
             submission=("QNLI.tsv",), in_glue_score=True, hub_config="qnli", **_named(*_ENT)),
    GlueSpec("RTE", ("sentence1", "sentence2"), "label", _ENT, ("accuracy",), "accuracy",
             epochs=10, submission=("RTE.tsv",), in_glue_score=True, hub_config="rte",
             **_named(*_ENT)),
    GlueSpec("WNLI", ("sentence1", "sentence2"), "label", _BIN, ("accuracy",), "accuracy",
             submission=("WNLI.tsv",), hub_config="wnli",
             **_binary("not_entailment", "entailment")),
]}
ALIASES = {"sst": "SST-2", "sts": "STS-B", "stsb": "STS-B", "sst2": "SST-2"}
# The tasks the GLUE score averages, in SPECS' order.
GLUE_SCORE_TASKS = tuple(name for name, spec in SPECS.items() if spec.in_glue_score)


def glue_score(scores: dict[str, float]) -> float | None:
    """The GLUE score in points (x100) over the GLUE-score tasks among `scores` ({task: its
    GLUE metric}), as the papers print it; None when there are none."""
    scored = [scores[t] for t in GLUE_SCORE_TASKS if t in scores]
    return 100 * statistics.fmean(scored) if scored else None

def task_summary(primary: dict[str, tuple[str, float]]) -> dict:
    """{task: (metric, score)} -> average (x100) over all tasks and the GLUE score (x100) over
    the GLUE-score tasks present (None when there are none), as section 3.3 reports results
    over tasks (WNLI excluded from the GLUE score)."""
    return {
        "primary": {t: {"metric": m, "score": v} for t, (m, v) in primary.items()},
        "average": 100 * statistics.fmean(v for _, v in primary.values()),
        "glue_score": glue_score({t: v for t, (_, v) in primary.items()}),
        "glue_score_tasks": [t for t in GLUE_SCORE_TASKS if t in primary],
    }


def glue_name(name: str) -> str | None:
    """The canonical GLUE task name for `name` (case-insensitive), or None."""
    low = name.lower()
    for canonical in SPECS:
        if canonical.lower() == low or canonical.lower().replace("-", "") == low:
            return canonical
    return ALIASES.get(low)


class GlueTask(SentenceTask):
    def __init__(self, name: str):
        spec = SPECS[name]
        self.spec = spec
        self.name = spec.name
        self.hub_configs = tuple(filter(None, (spec.name, spec.hub_config)))
        self.labels = list(spec.labels)
        self.regression = not spec.labels
        self.metric_names = spec.metrics
        self.primary_metric = spec.glue_metric
        self.default_epochs = spec.epochs
        self.eval_splits = dict(spec.eval_splits)
        self.test_splits = dict(spec.test_splits)

    def served_labels(self) -> list[str]:
        """The Hub's class names for the TSVs' labels (SST-2's "0" is "negative")."""
        names = {tsv: hub for hub, tsv in self.spec.hub_labels}
        return [names.get(label, label) for label in self.labels]

    def task_dir(self, data_dir: str | Path) -> Path:
        """DATA/<Task> if it exists, else DATA itself (pointing straight at the task folder);
        a GLUE folder with other tasks but not this one is an error naming the folder."""
        d = Path(data_dir)
        if (d / self.name).is_dir():
            return d / self.name
        others = sorted(p.name for p in d.iterdir() if p.is_dir() and p.name in SPECS) \
            if d.is_dir() else []
        if others:
            raise ElectraError(f"{d}: no {self.name} folder (it holds {', '.join(others)}); "
                               f"--data is a GLUE folder with a {self.name}/ folder, or the "
                               f"{self.name} folder itself")
        return d

    def read(self, data_dir: str | Path, split: str) -> list[Example]:
        stem = {"train": "train", **self.eval_splits, **self.test_splits}.get(split)
        if stem is None:
            raise ElectraError(f"{self.name}: no split {split!r}")
        path = self.task_dir(data_dir) / f"{stem}.tsv"
        is_test = stem.startswith("test")
        if not path.is_file():  # the TSVs win where both are there
            layout = find_layout(data_dir, self.hub_configs)
            if layout is not None:
                return self._read_hub(layout.split(split_names(stem)), is_test)
        return self._read_file(path, is_test)

    def has_training_data(self, data_dir: str | Path) -> bool:
        """Whether DATA holds this task in its own folder: DATA/<Task>/train.tsv, or a Hub
        layout with a train split in DATA/<Task> or DATA/<config> (nyu-mll/glue's `sst2/`)."""
        d = Path(data_dir)
        if (d / self.name / "train.tsv").is_file():
            return True
        for name in self.hub_configs:
            layout = find_layout(d / name)
            if layout is not None and "train" in layout.splits:
                return True
        return False

    def read_test_file(self, path: Path) -> list[Example]:
        """An unlabelled file in this task's test layout (e.g. GLUE's diagnostic set)."""
        return self._read_file(path, is_test=True)

    def _read_file(self, path: Path, is_test: bool) -> list[Example]:
        rows = read_delimited(path)
        if self.name == "CoLA" and not is_test:
            header = ["source", "label", "mark", "sentence"]  # no header row in the file
        else:
            first = next(rows, None)
            if first is None:
                raise ElectraError(f"{path}: empty file")
            header = first[1]
        cols = {name: i for i, name in enumerate(header)}
        wanted = list(self.spec.text_columns)
        wanted += [self.spec.test_id_column] if is_test else [self.spec.label_column]
        missing = [c for c in wanted if c not in cols]
        if missing:
            raise ElectraError(f"{path}:1: missing column(s) {missing} (header: {header})")
        examples: list[Example] = []
        for lineno, row in rows:
            where = f"{path}:{lineno}"
            if len(row) != len(header):
                if self.spec.skip_short_rows and not is_test:
                    continue
                raise ElectraError(f"{where}: {len(row)} columns, expected {len(header)}")
            texts = tuple(row[cols[c]] for c in self.spec.text_columns)
            if any(not t.strip() for t in texts):
                raise ElectraError(f"{where}: empty text")
            label = None if is_test else self.check_label(row[cols[self.spec.label_column]],
                                                           where)
            uid = row[cols[self.spec.test_id_column]] if is_test else str(len(examples))
            examples.append(Example(index=len(examples), texts=texts, label=label, uid=uid,
                                    where=where))
        return examples

    def hub_label_names(self, split: HubSplit) -> list[str]:
        """The TSV label of each of the Hub's class ids: the class names (--label-names, else
        the features', else the Hub's own for this task) through `hub_labels`."""
        names = list(self.label_names) or split.class_names("label") or \
            [hub for hub, _ in self.spec.hub_labels]
        to_tsv = {**{label: label for label in self.labels}, **dict(self.spec.hub_labels)}
        unknown = [n for n in names if n not in to_tsv]
        if unknown:
            raise ElectraError(f"{split.where}: label name {unknown[0]!r} is not one of "
                               f"{self.name}'s ({', '.join(to_tsv)})")
        return [to_tsv[n] for n in names]

    def _read_hub(self, split: HubSplit, is_test: bool) -> list[Example]:
        """Examples from the Hub's columns, the same as the TSVs' (labels as the TSVs spell
        them; a test example's uid is its `idx`)."""
        columns = self.spec.hub_text_columns or self.spec.text_columns
        rows = split.rows(columns, ("idx",)) if is_test else split.rows((*columns, "label"))
        names = None if self.regression else self.hub_label_names(split)
        examples: list[Example] = []
        for where, row in rows:
            texts = tuple("" if row[c] is None else str(row[c]) for c in columns)
            if any(not t.strip() for t in texts):
                raise ElectraError(f"{where}: empty text")
            label = None
            if not is_test:
                raw = label_name(row["label"], names, "label", where)
                if raw is None:
                    raise ElectraError(f"{where}: no label")
                label = self.check_label(str(raw), where)
            uid = str(row["idx"]) if is_test and row.get("idx") is not None \
                else str(len(examples))
            examples.append(Example(index=len(examples), texts=texts, label=label, uid=uid,
                                    where=where))
        return examples

    def write_test(self, out_dir: Path, data_dir: str | Path,
                   predict: Callable[[list[Example]], list[Any]]) -> list[str]:
        """The GLUE server's TSVs ("index<TAB>prediction"; CoLA.tsv, MNLI-m.tsv, ...); for MNLI
        also AX.tsv, the diagnostic set scored by the MNLI model, when DATA has it."""
        jobs = [(self.read(data_dir, split), filename)
                for split, filename in zip(self.test_splits, self.spec.submission, strict=True)]
        diagnostic = Path(data_dir) / "diagnostic" / "diagnostic.tsv"
        if self.name == "MNLI" and diagnostic.is_file():
            jobs.append((self.read_test_file(diagnostic), "AX.tsv"))
        written = []
        for examples, filename in jobs:
            rows = [f"{ex.uid}\t{self.format_prediction(pred)}\n"
                    for ex, pred in zip(examples, predict(examples), strict=True)]
            written.append(str(write_atomic(Path(out_dir) / filename,
                                            "index\tprediction\n" + "".join(rows))))
        return written

    def format_prediction(self, pred) -> str:
        if self.regression:  # the GLUE server expects STS-B scores within [0, 5]
            return f"{min(5.0, max(0.0, pred)):.3f}"
        return str(pred)

"""Task data written in the Hugging Face Hub's layouts with pyarrow alone (no `datasets`), from
the examples the original files give: Parquet files named as a dataset repository names them,
with the features in the schema's `huggingface` metadata, and `save_to_disk` folders
(dataset_dict.json, and per split state.json, dataset_info.json and Arrow stream files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from electra.tasks.base import Example
from electra.tasks.glue import GlueSpec

Columns = dict[str, Any]  # column name -> list of values, or a pyarrow array


def value(dtype: str) -> dict:
    return {"dtype": dtype, "_type": "Value"}


def class_label(names: list[str]) -> dict:
    return {"names": list(names), "_type": "ClassLabel"}


def sequence(feature: dict, kind: str = "Sequence") -> dict:
    """A list feature as datasets 2-3 (`Sequence`) or datasets 4 (`List`) serialise it."""
    return {"feature": feature, "_type": kind}


def _table(columns: Columns, features: dict | None) -> pa.Table:
    table = pa.table(columns)
    if features is not None:
        meta = {"huggingface": json.dumps({"info": {"features": features}})}
        table = table.replace_schema_metadata(meta)
    return table


def write_parquet(folder: Path, split: str, columns: Columns, features: dict | None,
                  shards: int = 1) -> list[Path]:
    """SPLIT-0000k-of-0000n.parquet files, the rows cut into `shards` in order."""
    folder.mkdir(parents=True, exist_ok=True)
    table = _table(columns, features)
    step = -(-table.num_rows // shards)
    paths = []
    for k in range(shards):
        path = folder / f"{split}-{k:05d}-of-{shards:05d}.parquet"
        pq.write_table(table.slice(k * step, step), path)
        paths.append(path)
    return paths


def write_saved_split(folder: Path, split: str, columns: Columns, features: dict | None,
                      files: int = 2) -> Path:
    """One split as `Dataset.save_to_disk` writes it: data-0000k-of-0000n.arrow stream files
    named in state.json, and dataset_info.json with the features."""
    folder.mkdir(parents=True)
    table = _table(columns, None)
    step = -(-table.num_rows // files)
    names = []
    for k in range(files):
        name = f"data-{k:05d}-of-{files:05d}.arrow"
        with pa.OSFile(str(folder / name), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.slice(k * step, step).to_batches(max_chunksize=64):
                writer.write_batch(batch)
        names.append(name)
    (folder / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": n} for n in names], "_fingerprint": "0",
        "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
        "_output_all_columns": False, "_split": split}))
    (folder / "dataset_info.json").write_text(json.dumps(
        {"features": features} if features is not None else {}))
    return folder


def write_saved_dict(folder: Path, splits: dict[str, tuple[Columns, dict | None]]) -> Path:
    """A DatasetDict's `save_to_disk` folder."""
    for split, (columns, features) in splits.items():
        write_saved_split(folder / split, split, columns, features)
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": list(splits)}))
    return folder


def write_layout(layout: str, root: Path, splits: dict[str, tuple[Columns, dict | None]],
                 config: str = "") -> Path:
    """`splits` in one layout under `root`: "config" (root/CONFIG/SPLIT-00000-of-00001.parquet,
    a dataset repository with configs), "data" (root/data/, two shards a split), or "saved"
    (a DatasetDict folder, root/CONFIG if given); returns the folder to give as DATA."""
    if layout == "config":
        for split, (columns, features) in splits.items():
            write_parquet(root / config, split, columns, features)
        return root
    if layout == "data":
        for split, (columns, features) in splits.items():
            write_parquet(root / "data", split, columns, features, shards=2)
        return root
    write_saved_dict(root / config if config else root, splits)
    return root


# --- converters from the examples the original files give --------------------------------------


def glue_columns(spec: GlueSpec, examples: list[Example], test: bool) -> tuple[Columns, dict]:
    """nyu-mll/glue's columns for one split: the texts, `label` (a class id; -1 in test splits;
    a float for STS-B) and `idx`."""
    text_columns = spec.hub_text_columns or spec.text_columns
    columns: Columns = {c: [ex.texts[i] for ex in examples] for i, c in enumerate(text_columns)}
    if spec.labels:
        ids = {tsv: i for i, (_, tsv) in enumerate(spec.hub_labels)}
        columns["label"] = [-1 if test else ids[ex.label] for ex in examples]
        label_feature = class_label([hub for hub, _ in spec.hub_labels])
    else:
        columns["label"] = pa.array([-1.0 if test else ex.label for ex in examples], pa.float32())
        label_feature = value("float32")
    columns["idx"] = pa.array([int(ex.uid) for ex in examples], pa.int32())
    features = {**{c: value("string") for c in text_columns}, "label": label_feature,
                "idx": value("int32")}
    return columns, features


def tagging_columns(examples: list[Example], tag_column: str, names: list[str],
                    kind: str = "Sequence") -> tuple[Columns, dict]:
    """CoNLL's rows on the Hub: `id`, `tokens` and integer tags named by the features."""
    ids = {name: i for i, name in enumerate(names)}
    columns = {"id": [str(i) for i in range(len(examples))],
               "tokens": [ex.words for ex in examples],
               tag_column: [[ids[t] for t in ex.tags] for ex in examples]}
    features = {"id": value("string"), "tokens": sequence(value("string"), kind),
                tag_column: sequence(class_label(names), kind)}
    return columns, features


def squad_columns(examples: list[Example]) -> tuple[Columns, dict]:
    """rajpurkar/squad's columns: id, title, context, question, answers {text, answer_start}."""
    squad = [ex.label for ex in examples]
    answers = pa.array([{"text": [a.text for a in ex.answers],
                         "answer_start": [a.start for a in ex.answers]} for ex in squad],
                       pa.struct([("text", pa.list_(pa.string())),
                                  ("answer_start", pa.list_(pa.int32()))]))
    columns = {"id": [ex.qid for ex in squad], "title": [ex.title for ex in squad],
               "context": [ex.context for ex in squad],
               "question": [ex.question for ex in squad], "answers": answers}
    features = {"id": value("string"), "title": value("string"), "context": value("string"),
                "question": value("string"),
                "answers": sequence({"text": value("string"), "answer_start": value("int32")})}
    return columns, features

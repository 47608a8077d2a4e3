"""Task data in the Hugging Face Hub's layouts, read from local folders with pyarrow (the
`datasets` library is not needed).

Two layouts, found in DATA, in one of its config folders (nyu-mll/glue's `sst2/`) or in its
`data/` folder:

- Parquet files named as a dataset repository names them, `SPLIT-NNNNN-of-NNNNN.parquet` (a
  hash after the count, as older uploads have, is allowed) or plainly `SPLIT.parquet`; the
  shards of a split are read in order and must all be there.
- A folder `datasets` wrote with `save_to_disk`: a DatasetDict (`dataset_dict.json` and one
  folder per split, each with `state.json`, `dataset_info.json` and its Arrow files), or a
  single Dataset (its `state.json` names its split).

Class labels are integers whose names are in the features: `dataset_info.json` for a
`save_to_disk` folder, the Parquet schema's `huggingface` metadata for the Hub's files (a
ClassLabel, or a sequence of them for tags). Tasks map the Hub's split names (`validation` is
their dev split) and columns to their own; this module only finds files and reads rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from electra.data.formats import (
    DATASET_DICT,
    DATASET_STATE,
    arrow_dataset_files,
    is_parquet,
    require,
)
from electra.errors import ElectraError

SHARD = re.compile(r"(?P<split>\w+?)(?:-(?P<index>\d{5})-of-(?P<count>\d{5})(?:-[0-9a-f]+)?)?"
                   r"\.parquet")
DATA_FOLDER = "data"
DATASET_INFO = "dataset_info.json"
HF_METADATA = b"huggingface"  # Parquet schema metadata: {"info": {"features": ...}}
NO_LABEL = -1  # a ClassLabel's "no label" (the Hub's GLUE test splits)


@dataclass(frozen=True)
class HubSplit:
    """One split: its files in order and, for a `save_to_disk` split, its dataset_info.json."""

    name: str
    files: tuple[Path, ...]
    info: Path | None = None

    @property
    def where(self) -> str:
        return str(self.files[0].parent if self.info else self.files[0])

    @cached_property
    def schema(self) -> Any:
        path = self.files[0]
        try:
            if is_parquet(path):
                return require("pyarrow.parquet", f"{path.name} (Parquet)").read_schema(path)
            pa = require("pyarrow", f"{path.name} (Arrow)")
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_stream(source).schema
        except ElectraError:
            raise
        except Exception as e:  # pyarrow raises its own ArrowInvalid / OSError kinds
            raise ElectraError(f"{path}: not a readable {_kind(path)} file ({e})") from None

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    @cached_property
    def features(self) -> dict:
        """The `datasets` features: dataset_info.json's, else the Parquet/Arrow schema's
        `huggingface` metadata; {} when neither says."""
        if self.info is not None and self.info.is_file():
            try:
                return json.loads(self.info.read_text()).get("features") or {}
            except json.JSONDecodeError as e:
                raise ElectraError(f"{self.info}: not JSON ({e})") from None
        raw = (self.schema.metadata or {}).get(HF_METADATA)
        if not raw:
            return {}
        try:
            return json.loads(raw).get("info", {}).get("features") or {}
        except (json.JSONDecodeError, AttributeError) as e:
            raise ElectraError(f"{self.files[0]}: unreadable 'huggingface' metadata ({e})") \
                from None

    def class_names(self, column: str) -> list[str] | None:
        """The ClassLabel names of `column` (or of its elements, for a sequence of tags)."""
        return _class_names(self.features.get(column))

    def require_columns(self, columns: Sequence[str]) -> None:
        missing = [c for c in columns if c not in self.columns]
        if missing:
            raise ElectraError(f"{self.where}: no column {', '.join(map(repr, missing))} in the "
                               f"{self.name} split (columns: {', '.join(self.columns)})")

    def rows(self, columns: Sequence[str], optional: Sequence[str] = ()
             ) -> list[tuple[str, dict[str, Any]]]:
        """("file:row N", {column: value}) for every row, in order; only `columns` (all
        required) and those of `optional` that exist are read. float32 values come back as
        the shortest decimal that reads back to them (a label 3.8 stays 3.8, as in a TSV)."""
        self.require_columns(columns)
        wanted = [*columns, *(c for c in optional if c in self.columns and c not in columns)]
        out = []
        for path in self.files:
            table = _read_table(path, wanted)
            values = {c: _pylist(table.column(c)) for c in wanted}
            for i in range(table.num_rows):
                out.append((f"{path}:row {i + 1}", {c: values[c][i] for c in wanted}))
        return out


@dataclass(frozen=True)
class HubLayout:
    """The splits of one DATA folder in one of the Hub's layouts."""

    root: Path
    kind: str
    splits: dict[str, HubSplit]

    def split(self, names: Sequence[str]) -> HubSplit:
        """The first of `names` that exists (the Hub's names for one split of a task)."""
        for name in names:
            if name in self.splits:
                return self.splits[name]
        raise ElectraError(f"{self.root}: no {' or '.join(names)} split in these {self.kind} "
                           f"(splits: {', '.join(self.splits) or 'none'})")


def split_names(split: str) -> tuple[str, ...]:
    """The Hub's names for a task's split, in the order tried: dev is `validation`
    (MNLI's dev_matched is validation_matched); the task's own name is accepted too."""
    if split.startswith("dev"):
        return ("validation" + split[3:], split)
    return (split,)


def find_layout(data_dir: str | Path, configs: Sequence[str] = ()) -> HubLayout | None:
    """The Hub layout of DATA/<config> (the first of `configs` that holds one) or of DATA;
    None when there is none, so the task reads its own files."""
    d = Path(data_dir)
    for folder in [*(d / c for c in configs if c), d]:
        if not folder.is_dir():
            continue
        layout = _saved(folder) or _shards(folder / DATA_FOLDER) or _shards(folder)
        if layout is not None:
            return layout
    return None


def label_name(value: Any, names: Sequence[str] | None, column: str, where: str) -> Any:
    """A class-label cell as its name: an integer indexes `names` (-1 is no label: None).
    Without names an integer is its own name ("0", as a CSV holds it); other values (a string
    label, a float score, None) are returned as they are."""
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    if names is None:
        return str(value)
    if value == NO_LABEL:
        return None
    if not 0 <= value < len(names):
        raise ElectraError(f"{where}: {column!r} is {value}, but there are {len(names)} label "
                           f"names ({', '.join(names)})")
    return names[value]


def parse_label_names(value: str | None) -> tuple[str, ...]:
    """--label-names: comma-separated names by class id ("O,B-PER,I-PER"), or a JSON file
    holding a list of names, an id2label object ({"0": "O", ...}) or a config.json with one."""
    if not value:
        return ()
    path = Path(value)
    if path.suffix == ".json":
        if not path.is_file():
            raise ElectraError(f"--label-names: {path} not found")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ElectraError(f"--label-names: {path} is not JSON ({e})") from None
        if isinstance(data, dict):
            data = data.get("id2label", data)
            try:
                ids = sorted(data, key=int)
            except (TypeError, ValueError):
                raise ElectraError(f"--label-names: {path}: keys must be class ids") from None
            if [int(k) for k in ids] != list(range(len(ids))):
                raise ElectraError(f"--label-names: {path}: class ids must run 0..{len(ids) - 1}")
            data = [data[k] for k in ids]
        if not isinstance(data, list) or not all(isinstance(n, str) and n for n in data):
            raise ElectraError(f"--label-names: {path} must hold a list of names or an "
                               "id2label object")
        return tuple(data)
    names = tuple(n.strip() for n in value.split(","))
    if not all(names):
        raise ElectraError(f"--label-names: an empty name in {value!r}")
    return names


# --- layouts -----------------------------------------------------------------------------------


def _kind(path: Path) -> str:
    return "Parquet" if is_parquet(path) else "Arrow"


def _saved(folder: Path) -> HubLayout | None:
    """A `save_to_disk` folder: one Dataset (state.json here) or a DatasetDict (split
    folders, listed in dataset_dict.json when it is there)."""
    kind = "`datasets` save_to_disk folders"
    if (folder / DATASET_STATE).is_file():
        split = _saved_split(folder)
        return HubLayout(folder, kind, {split.name: split})
    if (folder / DATASET_DICT).is_file():
        try:
            names = json.loads((folder / DATASET_DICT).read_text())["splits"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ElectraError(f"{folder / DATASET_DICT}: not a `datasets` DatasetDict file "
                               f"({e!r})") from None
        missing = [n for n in names if not (folder / n / DATASET_STATE).is_file()]
        if missing:
            raise ElectraError(f"{folder}: split {missing[0]!r} is listed in {DATASET_DICT} but "
                               f"{folder / missing[0] / DATASET_STATE} is missing")
    else:
        names = sorted(p.name for p in folder.iterdir() if (p / DATASET_STATE).is_file())
        if not names:
            return None
    return HubLayout(folder, kind, {n: _saved_split(folder / n, n) for n in names})


def _saved_split(folder: Path, name: str | None = None) -> HubSplit:
    if name is None:  # a single Dataset: its state names the split ("train[:100]" is train)
        try:
            name = json.loads((folder / DATASET_STATE).read_text()).get("_split")
        except (json.JSONDecodeError, AttributeError) as e:
            raise ElectraError(f"{folder / DATASET_STATE}: not a `datasets` state file "
                               f"({e!r})") from None
        if not name:
            raise ElectraError(f"{folder / DATASET_STATE}: no split name ('_split'); save a "
                               "DatasetDict, or the Dataset with its split")
        name = str(name).split("[")[0]
    files = arrow_dataset_files(folder)
    if not files:
        raise ElectraError(f"{folder / DATASET_STATE}: lists no Arrow files")
    return HubSplit(name, tuple(files), folder / DATASET_INFO)


def _shards(folder: Path) -> HubLayout | None:
    """Parquet files named SPLIT-NNNNN-of-NNNNN.parquet (or SPLIT.parquet) in `folder`."""
    if not folder.is_dir():
        return None
    found: dict[str, list[tuple[int, int, Path]]] = {}
    for path in sorted(folder.iterdir()):
        match = SHARD.fullmatch(path.name)
        if match and path.is_file():
            index, count = (int(match["index"]), int(match["count"])) if match["index"] else (0, 1)
            found.setdefault(match["split"], []).append((index, count, path))
    if not found:
        return None
    splits = {}
    for name, shards in found.items():
        shards.sort()
        count = shards[0][1]
        if [(i, c) for i, c, _ in shards] != [(i, count) for i in range(count)]:
            have = ", ".join(p.name for _, _, p in shards)
            raise ElectraError(f"{folder}: the {name} split's Parquet shards are not "
                               f"{count} files numbered 0..{count - 1} (found: {have})")
        splits[name] = HubSplit(name, tuple(p for _, _, p in shards))
    return HubLayout(folder, "Parquet files", splits)


def _class_names(feature: Any) -> list[str] | None:
    """ClassLabel names of a serialised feature; sequences (`Sequence`, `List`, or datasets'
    one-element list shorthand) are looked through."""
    if isinstance(feature, list) and len(feature) == 1:
        return _class_names(feature[0])
    if not isinstance(feature, dict):
        return None
    if feature.get("_type") == "ClassLabel":
        return [str(n) for n in feature.get("names") or []] or None
    if "feature" in feature:
        return _class_names(feature["feature"])
    return None


def _read_table(path: Path, columns: list[str]) -> Any:
    """`columns` of one file (a later shard may lack one the first has: an error)."""
    try:
        if is_parquet(path):
            pq = require("pyarrow.parquet", f"{path.name} (Parquet)")
            names = pq.read_schema(path).names
            table = None
        else:
            pa = require("pyarrow", f"{path.name} (Arrow)")
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_stream(source).read_all()
            names = table.schema.names
        missing = [c for c in columns if c not in names]
        if missing:
            raise ElectraError(f"{path}: no column {', '.join(map(repr, missing))} (columns: "
                               f"{', '.join(names)})")
        return pq.read_table(path, columns=columns) if table is None else table.select(columns)
    except ElectraError:
        raise
    except Exception as e:  # pyarrow raises its own ArrowInvalid / OSError kinds
        raise ElectraError(f"{path}: not a readable {_kind(path)} file ({e})") from None


def _pylist(column: Any) -> list[Any]:
    """Python values of a column; float32 as the shortest decimal that reads back to it
    (numpy's float32 repr), which is what a TSV of the same data holds."""
    pa = require("pyarrow", "Arrow data")
    values = column.to_pylist()
    if pa.types.is_float32(column.type):
        return [None if v is None else float(str(np.float32(v))) for v in values]
    return values

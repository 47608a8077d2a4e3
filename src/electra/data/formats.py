"""The ecosystem's corpus formats, streamed: Parquet files (FineWeb, C4, Wikipedia dumps), a
`datasets` folder written by `save_to_disk` (its Arrow files), and zstd-compressed files
(`.jsonl.zst` as The Pile, RedPajama and Dolma ship them).

Each reads one record batch, row group or block at a time, so memory stays bounded whatever
the corpus size (by its largest row group for Parquet), and keeps the file's row order. The
first bad record is an error naming the file and its row. pyarrow and zstandard are the
optional extra `corpora`; without them, a file of these formats is a one-line error
saying what to install.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from electra.errors import ElectraError, install_hint

EXTRA = install_hint("corpora")
PARQUET_SUFFIX = ".parquet"
ZSTD_SUFFIX = ".zst"
# A `datasets` save_to_disk folder: its state names the Arrow files, in order.
DATASET_STATE = "state.json"
DATASET_DICT = "dataset_dict.json"
ROWS_PER_BATCH = 1024


def require(module: str, what: str) -> Any:
    """An optional module (pyarrow, zstandard), or a one-line error saying which extra installs
    it; corpus readers and task data in the Hub's layouts (`electra.tasks.hub_layout`) ask
    here."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise ElectraError(f"reading {what} needs {module.split('.')[0]}: {EXTRA}") from None


def is_parquet(path: Path) -> bool:
    return path.name.lower().endswith(PARQUET_SUFFIX)


def is_zstd(path: Path) -> bool:
    return path.name.lower().endswith(ZSTD_SUFFIX)


def is_arrow_dataset(path: Path) -> bool:
    """A folder `datasets.Dataset.save_to_disk` wrote (one split)."""
    return path.is_dir() and (path / DATASET_STATE).is_file()


def check_arrow_folder(path: Path) -> None:
    """A folder of Arrow files that is not one split written by `datasets` (a DatasetDict's
    folder, or Arrow files of another origin): an error saying what it is instead."""
    if (path / DATASET_DICT).is_file():
        splits = json.loads((path / DATASET_DICT).read_text()).get("splits", [])
        raise ElectraError(f"{path}: a `datasets` DatasetDict; give one split's folder "
                           f"({', '.join(str(path / s) for s in splits)})")
    raise ElectraError(f"{path}: Arrow files without {DATASET_STATE}: not a folder written by "
                       "`datasets` save_to_disk")


class ZstdStream(io.RawIOBase):
    """Concatenated zstd frames, decompressed as they are read. Unlike zstandard's own stream
    reader, a file that ends inside a frame is an error, not a silent end."""

    CHUNK = 1 << 16

    def __init__(self, path: Path):
        zstandard = require("zstandard", f"{path.name} (zstd)")
        self._error = zstandard.ZstdError
        self._context = zstandard.ZstdDecompressor()
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._frame: Any = None
        self._buffer = b""
        self._offset = 0

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        """Decompress more input into the buffer; False at a clean end of the file."""
        while self._offset >= len(self._buffer):
            chunk = self._file.read(self.CHUNK)
            if not chunk:
                if self._frame is not None and not self._frame.eof:
                    raise OSError("truncated zstd frame (the file ends inside it)")
                return False
            out = []
            while chunk:
                if self._frame is None or self._frame.eof:
                    self._frame = self._context.decompressobj()
                try:
                    out.append(self._frame.decompress(chunk))
                except self._error as e:
                    raise OSError(f"corrupt zstd data ({e})") from None
                chunk = self._frame.unused_data if self._frame.eof else b""
            self._buffer, self._offset = b"".join(out), 0
        return True

    def readinto(self, target) -> int:  # type: ignore[override]
        if not self._fill():
            return 0
        n = min(len(target), len(self._buffer) - self._offset)
        target[:n] = self._buffer[self._offset:self._offset + n]
        self._offset += n
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def _texts(batches: Iterator[Any], text_field: str, where: str) -> Iterator[tuple[int, str]]:
    """(1-based row, text) of the text column of record batches; a null or a value that is not
    a string is an error naming its row."""
    row = 0
    for batch in batches:
        for value in batch.column(text_field).to_pylist():
            row += 1
            if not isinstance(value, str):
                kind = "null" if value is None else type(value).__name__
                raise ElectraError(f"{where}: row {row}: {text_field!r} is {kind}, not a string")
            yield row, value


def _check_column(schema: Any, text_field: str, where: str) -> None:
    if text_field not in schema.names:
        raise ElectraError(f"{where}: no column {text_field!r} (columns: "
                           f"{', '.join(schema.names)}); choose one with --text-field")


def read_parquet(path: Path, text_field: str) -> Iterator[tuple[int, str]]:
    """(row, text) of one Parquet file, row group by row group; only the text column is read,
    so memory grows with the largest row group, not with the file.

    One `read_row_group` at a time, not `ParquetFile.iter_batches`: with the latter, Arrow's
    memory pool grew with the file (pyarrow 26: 1.2 GB after a 1.3 GB file, against 25 MB row
    group by row group)."""
    pq = require("pyarrow.parquet", f"{path.name} (Parquet)")
    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own ArrowInvalid / OSError kinds
        raise ElectraError(f"{path}: not a readable Parquet file ({e})") from None
    _check_column(parquet.schema_arrow, text_field, str(path))
    batches = (batch for group in range(parquet.num_row_groups)
               for batch in parquet.read_row_group(group, columns=[text_field])
               .to_batches(ROWS_PER_BATCH))
    try:
        yield from _texts(batches, text_field, str(path))
    except ElectraError:
        raise
    except Exception as e:
        raise ElectraError(f"{path}: cannot read Parquet data ({e})") from None


def arrow_dataset_files(folder: Path) -> list[Path]:
    """The Arrow files of a `datasets` save_to_disk folder, in the order its state lists them."""
    try:
        state = json.loads((folder / DATASET_STATE).read_text())
        files = [folder / entry["filename"] for entry in state["_data_files"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ElectraError(f"{folder / DATASET_STATE}: not a `datasets` state file ({e!r})") \
            from None
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ElectraError(f"{folder}: {missing[0]} is listed in {DATASET_STATE} but missing")
    return files


def read_arrow_file(path: Path, text_field: str) -> Iterator[tuple[int, str]]:
    """(row, text) of one Arrow stream file as `datasets` writes them, memory-mapped and read
    record batch by record batch."""
    pa = require("pyarrow", f"{path.name} (Arrow)")
    try:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_stream(source)
            _check_column(reader.schema, text_field, str(path))
            yield from _texts(iter(reader), text_field, str(path))
    except ElectraError:
        raise
    except Exception as e:
        raise ElectraError(f"{path}: not a readable Arrow stream ({e})") from None

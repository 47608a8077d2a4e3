"""The prepared pre-training data as fixed-shape batches, and the resumable batch stream.

Shards are memory-mapped, so opening a data set is instant and costs no memory; batches are
always padded to seq_len so every step has the same shapes (no recompilation, stable memory).

Integrity: every open checks each shard file's size against the manifest (one stat per file,
so a truncated or partly copied shard is never read) and the arrays' shapes against each other.
A byte changed in place keeps the size, and only a full SHA-256 finds it; hashing every byte of a
multi-GB data set at each start, on each DDP rank, would cost tens of seconds to minutes, so
checksums are checked on request: `PretrainingDataset(..., verify=True)`, `verify_data`, or
`electra prepare --verify DIR` (worth running once after copying data to another machine).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.data.prepare import FORMAT, FORMAT_VERSION, MANIFEST, SHARD_ARRAYS
from electra.errors import ElectraError
from electra.fileutil import sha256_file


class PretrainingDataset:
    """One split of a directory written by `prepare_corpus`; `verify` also checks every shard's
    SHA-256 (reads the whole split)."""

    def __init__(self, data_dir: str | Path, split: str = "train", verify: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        self.manifest = read_manifest(self.data_dir)
        splits = self.manifest["splits"]
        if split not in splits:
            raise ElectraError(
                f"{self.data_dir / MANIFEST}: no split {split!r} (has: {', '.join(splits)})"
            )
        info = splits[split]
        self.seq_len: int = self.manifest["seq_len"]
        self.vocab_size: int = self.manifest["vocab_size"]
        self.vocab_checksum: str = self.manifest["vocab_checksum"]
        # The tokenizer's special ids by role (pad, unk, cls, sep, mask), as prepared.
        self.special_ids: dict[str, int] = dict(self.manifest.get("special_token_ids") or {})
        self.pad_id: int = int(self.special_ids.get("pad", 0))
        self.num_tokens: int = info["num_tokens"]
        self._tokens: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []
        self._sep: list[np.ndarray] = []
        for shard in info["shards"]:
            tokens, offsets, sep = self._open_shard(shard, verify)
            self._tokens.append(tokens)
            self._offsets.append(offsets)
            self._sep.append(sep)
        counts = [len(sep) for sep in self._sep]
        self._shard_end = np.cumsum(counts, dtype=np.int64)
        self._length = int(self._shard_end[-1]) if counts else 0
        if self._length != info["num_examples"]:
            raise ElectraError(
                f"{self.data_dir / MANIFEST}: split {split!r} lists {info['num_examples']} "
                f"examples but its shards hold {self._length}; the data directory is corrupt"
            )

    @property
    def tokenizer_dir(self) -> Path:
        """The data set's own copy of its tokenizer."""
        return self.data_dir / self.manifest.get("tokenizer", "tokenizer")

    def __len__(self) -> int:
        return self._length

    def example(self, index: int) -> tuple[np.ndarray, int]:
        """Token ids (unpadded) and the index of the first [SEP] of one example."""
        if not 0 <= index < self._length:
            raise IndexError(f"example {index} out of range for {self._length} examples")
        shard = int(np.searchsorted(self._shard_end, index, side="right"))
        local = index - (int(self._shard_end[shard - 1]) if shard else 0)
        offsets = self._offsets[shard]
        start, end = int(offsets[local]), int(offsets[local + 1])
        return self._tokens[shard][start:end], int(self._sep[shard][local])

    def token_counts(self) -> torch.Tensor:
        """How often each vocabulary id occurs in this split (float64 [vocab_size]), e.g. for a
        unigram generator (section 5.3.2)."""
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        for tokens in self._tokens:
            counts += np.bincount(np.asarray(tokens, dtype=np.int64), minlength=self.vocab_size)
        return torch.from_numpy(counts.astype(np.float64))

    def get_batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """input_ids, token_type_ids and attention_mask, each [len(indices), seq_len] int64,
        input_ids padded with the tokenizer's pad id (the others with 0); token type 1 starts
        after the first [SEP]."""
        size = len(indices)
        input_ids = np.full((size, self.seq_len), self.pad_id, dtype=np.int64)
        lengths = np.zeros(size, dtype=np.int64)
        seps = np.zeros(size, dtype=np.int64)
        for row, index in enumerate(indices):
            ids, sep = self.example(int(index))
            input_ids[row, : len(ids)] = ids
            lengths[row] = len(ids)
            seps[row] = sep
        positions = np.arange(self.seq_len)
        attention_mask = positions[None, :] < lengths[:, None]
        token_type_ids = (positions[None, :] > seps[:, None]) & attention_mask
        return {
            "input_ids": torch.from_numpy(input_ids),
            "token_type_ids": torch.from_numpy(token_type_ids.astype(np.int64)),
            "attention_mask": torch.from_numpy(attention_mask.astype(np.int64)),
        }

    def _open_shard(
        self, shard: dict[str, Any], verify: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        try:
            paths = [self.data_dir / shard[key] for key in SHARD_ARRAYS]
        except KeyError as err:
            raise ElectraError(f"{self.data_dir / MANIFEST}: shard entry lacks {err}; "
                               "manifest is corrupt") from None
        arrays = []
        for key, path in zip(SHARD_ARRAYS, paths, strict=True):
            _check_file(path, shard.get("bytes", {}).get(key),
                        shard.get("sha256", {}).get(key) if verify else None)
            try:
                arrays.append(np.load(path, mmap_mode="r"))
            except (OSError, ValueError) as err:
                raise ElectraError(f"{path}: cannot read shard ({err}); "
                                   "prepare the data again") from None
        tokens, offsets, sep = arrays
        dtypes = (np.dtype(self.manifest.get("token_dtype", tokens.dtype)), np.int64, np.uint16)
        for path, array, dtype in zip(paths, arrays, dtypes, strict=True):
            if array.ndim != 1 or array.dtype != dtype:
                raise ElectraError(f"{path}: holds {array.dtype} {array.shape}, expected a 1-d "
                                   f"{np.dtype(dtype)} array; the file is corrupt")
        if (len(offsets) != len(sep) + 1
                or len(sep) != shard.get("num_examples")
                or (len(offsets) and int(offsets[-1]) != len(tokens))):
            raise ElectraError(f"{paths[0]}: shard sizes do not match the manifest; "
                               "the data directory is corrupt")
        return tokens, offsets, sep


def _check_file(path: Path, size: int | None, sha256: str | None) -> None:
    """A shard file against what the manifest recorded (older manifests record neither)."""
    if not path.is_file():
        raise ElectraError(f"{path}: missing; the data directory is incomplete, prepare it again")
    actual = path.stat().st_size
    if size is not None and actual != size:
        raise ElectraError(f"{path}: {actual} bytes where the manifest says {size}; "
                           "the file is truncated or altered, prepare the data again")
    if sha256 is not None and sha256_file(path) != sha256:
        raise ElectraError(f"{path}: SHA-256 differs from the manifest; the file is corrupt, "
                           "prepare the data again")


def verify_data(data_dir: str | Path) -> dict[str, Any]:
    """Check every shard of every split against the manifest, SHA-256 included; returns the
    number of files and bytes checked, or raises naming the first bad file."""
    manifest = read_manifest(data_dir)
    files = size = 0
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            if set(shard.get("sha256", {})) != set(SHARD_ARRAYS):
                raise ElectraError(f"{Path(data_dir) / MANIFEST}: no checksums recorded (written "
                                   "by an older version); prepare the data again to verify it")
            files += len(SHARD_ARRAYS)
            size += sum(shard["bytes"].values())
        PretrainingDataset(data_dir, split, verify=True)
    return {"data": str(data_dir), "files": files, "bytes": size, "ok": True}


def read_manifest(data_dir: str | Path) -> dict[str, Any]:
    """Load and check a data directory's manifest.json."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise ElectraError(f"{path}: missing; run `electra prepare` to create the data directory")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ElectraError(f"{path}: corrupt manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ElectraError(f"{path}: not an electra data manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ElectraError(f"{path}: format version {manifest.get('format_version')} is not "
                           f"supported (expected {FORMAT_VERSION}); prepare the data again")
    missing = [key for key in ("seq_len", "vocab_size", "vocab_checksum", "splits")
               if key not in manifest]
    if missing:
        raise ElectraError(f"{path}: incomplete manifest, missing {', '.join(missing)}")
    for name, info in manifest["splits"].items():
        for key in ("num_examples", "num_tokens", "shards"):
            if not isinstance(info, dict) or key not in info:
                raise ElectraError(f"{path}: incomplete manifest, split {name!r} lacks {key!r}")
    return manifest


def check_batchable(dataset: PretrainingDataset, batch_size: int, world_size: int = 1) -> None:
    """The split holds at least one global batch of `batch_size` per process; a run checks
    this before it writes anything."""
    global_size = batch_size * world_size
    if len(dataset) < global_size:
        raise ElectraError(
            f"{dataset.data_dir}: split {dataset.split!r} has {len(dataset)} examples, fewer "
            f"than one global batch ({batch_size} x {world_size} = {global_size})"
        )


def iterate_batches(
    dataset: PretrainingDataset,
    batch_size: int,
    seed: int,
    start_batch: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[dict[str, torch.Tensor]]:
    """Endless deterministic batches; this rank's share of global batch b, b >= start_batch.

    The stream is a function of (seed, batch counter) only, so resuming a run needs nothing but
    the number of batches already consumed. Epoch e is the permutation default_rng((seed, e))
    truncated to whole global batches; rank r takes rows [r*batch_size, (r+1)*batch_size) of
    each global batch of batch_size*world_size examples.
    """
    if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
        raise ElectraError(
            f"invalid batching: batch_size={batch_size}, rank={rank}, world_size={world_size}"
        )
    if seed < 0 or start_batch < 0:
        raise ElectraError(f"seed and start_batch must be >= 0, got {seed} and {start_batch}")
    check_batchable(dataset, batch_size, world_size)
    global_size = batch_size * world_size
    per_epoch = len(dataset) // global_size
    epoch, step = divmod(start_batch, per_epoch)
    while True:
        order = np.random.default_rng((seed, epoch)).permutation(len(dataset))
        for b in range(step, per_epoch):
            start = b * global_size + rank * batch_size
            yield dataset.get_batch(order[start : start + batch_size])
        epoch, step = epoch + 1, 0

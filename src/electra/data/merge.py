"""Combine the parts of a corpus prepared on several machines (`electra prepare --num-shards N
--shard-index I` on each) into one data directory, without tokenizing again.

Part I holds the documents whose corpus index is I modulo N, each held out or not and packed
exactly as a one-machine prepare would. The combined directory lists part 0's shards, then
part 1's, and so on: the same examples as a one-machine prepare of the corpus, grouped by part
instead of in corpus order (training draws them in a random order either way). Shard files
are hard-linked where the file system allows, else copied, and keep their SHA-256.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electra.data.dataset import read_manifest
from electra.data.prepare import MANIFEST, SHARD_ARRAYS, check_out_dir
from electra.errors import ElectraError
from electra.fileutil import staged_dir

# What every part of one corpus must share: the vocabulary, the example format, and the
# settings that decide which documents are held out and how each is packed.
MUST_AGREE = ("vocab_checksum", "seq_len", "token_dtype", "special_token_ids", "corpus",
              "settings")


def _part(path: Path, manifest: dict[str, Any]) -> tuple[int, int]:
    part = manifest.get("part")
    if not part:
        raise ElectraError(f"{path}: not a part of a corpus (prepared without --num-shards)")
    return part["index"], part["count"]


def check_parts(parts: Sequence[Path], manifests: Sequence[dict[str, Any]]) -> list[int]:
    """The parts' order by index; an error naming the part that does not fit."""
    if not parts:
        raise ElectraError("--merge: give the prepared parts' directories")
    indices, counts = zip(*(_part(p, m) for p, m in zip(parts, manifests, strict=True)),
                          strict=True)
    for path, count in zip(parts, counts, strict=True):
        if count != counts[0]:
            raise ElectraError(f"{path}: prepared with --num-shards {count}, {parts[0]} with "
                               f"{counts[0]}")
    for key in MUST_AGREE:
        for path, manifest in zip(parts, manifests, strict=True):
            if manifest.get(key) != manifests[0].get(key):
                what = "a different vocabulary" if key == "vocab_checksum" else f"another {key}"
                raise ElectraError(f"{path}: prepared with {what} than {parts[0]}")
    missing = sorted(set(range(counts[0])) - set(indices))
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise ElectraError(f"--merge: part {repeated[0]} given twice")
    if missing:
        raise ElectraError(f"--merge: part {missing[0]} of {counts[0]} is missing")
    return sorted(range(len(parts)), key=lambda k: indices[k])


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def merge_parts(parts: Sequence[str | Path], out_dir: str | Path,
                overwrite: bool = False) -> dict[str, Any]:
    """Write OUT: every part's shards under one manifest; returns the manifest."""
    paths = [Path(p) for p in parts]
    manifests = [read_manifest(p) for p in paths]
    order = check_parts(paths, manifests)
    out = Path(out_dir)
    check_out_dir(out, overwrite)
    first = paths[order[0]]
    with staged_dir(out) as tmp:
        tokenizer = manifests[order[0]].get("tokenizer", "tokenizer")
        shutil.copytree(first / tokenizer, tmp / tokenizer)
        splits: dict[str, dict[str, Any]] = {}
        for k in order:
            for name, split in manifests[k]["splits"].items():
                merged = splits.setdefault(name, {"num_documents": 0, "num_examples": 0,
                                                  "num_tokens": 0, "shards": []})
                for key in ("num_documents", "num_examples", "num_tokens"):
                    merged[key] += split[key]
                for shard in split["shards"]:
                    number = len(merged["shards"])
                    renamed = dict(shard)
                    for array in SHARD_ARRAYS:
                        target = f"{name}-{number:05d}.{array}.npy"
                        _link_or_copy(paths[k] / shard[array], tmp / target)
                        renamed[array] = target
                    merged["shards"].append(renamed)
        manifest = {key: value for key, value in manifests[order[0]].items() if key != "part"}
        manifest["splits"] = splits
        manifest["merged_from"] = [{"part": manifests[k]["part"]["index"], "dir":
                                    str(paths[k].resolve())} for k in order]
        # The manifest is written last: its presence marks a complete data directory.
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest

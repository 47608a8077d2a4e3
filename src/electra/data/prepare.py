"""Turn a text corpus into packed, memory-mappable token shards plus a manifest.

The output directory is self-contained (its own copy of the tokenizer) and written atomically:
everything goes to a hidden temp dir beside it that is renamed only when complete, so a crash
or a bad line late in the corpus never leaves a directory that looks usable.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from electra import __version__
from electra.data.corpus import corpus_files, iter_documents, split_sentences
from electra.data.packing import Example, ExampleBuilder
from electra.errors import ElectraError
from electra.tokenizer import (
    copy_tokenizer_files,
    load_tokenizer,
    special_token_ids,
    vocab_checksum,
)

FORMAT = "electra-pretraining-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MIN_SEQ_LEN, MAX_SEQ_LEN = 8, 512
# Documents are tokenized in batches (parallel in Rust); these bound the memory a batch of
# very long documents can take.
MAX_BATCH_CHARS = 1 << 22
ENCODE_CHUNK = 8192


def prepare_corpus(
    corpus: Sequence[str | Path],
    tokenizer_dir: str | Path,
    seq_len: int,
    out_dir: str | Path,
    text_field: str = "text",
    seed: int = 12345,
    heldout_fraction: float = 0.0,
    shard_tokens: int = 2**24,
    batch_docs: int = 256,
    show_progress: bool = True,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Tokenize, pack and shard a corpus into `out_dir`; returns the manifest it wrote."""
    if not MIN_SEQ_LEN <= seq_len <= MAX_SEQ_LEN:
        raise ElectraError(f"seq_len must be in [{MIN_SEQ_LEN}, {MAX_SEQ_LEN}], got {seq_len}")
    if not 0.0 <= heldout_fraction < 1.0:
        raise ElectraError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    if shard_tokens < 1 or batch_docs < 1:
        raise ElectraError("shard_tokens and batch_docs must be positive")
    if isinstance(corpus, (str, Path)):
        corpus = [corpus]
    out = Path(out_dir)
    _check_out_dir(out, overwrite)
    corpus_files(corpus)  # fail on a missing path before any work
    tokenizer = load_tokenizer(tokenizer_dir)
    specials = special_token_ids(tokenizer)
    vocab_size = tokenizer.get_vocab_size()
    checksum = vocab_checksum(tokenizer_dir)
    dtype = np.uint16 if vocab_size <= 2**16 else np.uint32

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        copy_tokenizer_files(tokenizer_dir, tmp / "tokenizer")
        splits = ["train", "heldout"] if heldout_fraction > 0 else ["train"]
        writers = {name: _ShardWriter(tmp, name, shard_tokens, seq_len, dtype) for name in splits}
        builders = {
            name: ExampleBuilder(seq_len, specials["cls"], specials["sep"], seed + i)
            for i, name in enumerate(splits)
        }
        is_heldout = _heldout_selector(seed, heldout_fraction)

        def flush(batch: list[tuple[str, list[str]]]) -> None:
            ids = _encode(tokenizer, [s for _, doc_sentences in batch for s in doc_sentences])
            for split, doc_sentences in batch:
                builder, writer = builders[split], writers[split]
                for _ in doc_sentences:
                    writer.add(builder.add_sentence(next(ids)))
                writer.add(builder.end_document())
                writer.num_documents += 1

        batch: list[tuple[str, list[str]]] = []
        batch_chars = 0
        docs = iter_documents(corpus, text_field=text_field)
        with tqdm(docs, desc="preparing", unit=" docs", disable=not show_progress) as progress:
            for index, doc in enumerate(progress):
                split = "heldout" if is_heldout(index) else "train"
                batch.append((split, split_sentences(doc.text)))
                batch_chars += len(doc.text)
                if len(batch) >= batch_docs or batch_chars >= MAX_BATCH_CHARS:
                    flush(batch)
                    batch, batch_chars = [], 0
            if batch:
                flush(batch)
        for writer in writers.values():
            writer.close()
        if writers["train"].num_examples == 0:
            raise ElectraError(
                f"corpus produced no training examples: {', '.join(map(str, corpus))}"
            )

        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "electra_version": __version__,
            "seq_len": seq_len,
            "vocab_size": vocab_size,
            "vocab_checksum": checksum,
            "special_token_ids": specials,
            "token_dtype": np.dtype(dtype).name,
            "tokenizer_dir": str(Path(tokenizer_dir).resolve()),
            "tokenizer": "tokenizer",
            "corpus": [str(Path(p).resolve()) for p in corpus],
            "settings": {
                "seed": seed,
                "heldout_fraction": heldout_fraction,
                "text_field": text_field,
                "shard_tokens": shard_tokens,
            },
            "splits": {name: writer.summary() for name, writer in writers.items()},
        }
        # The manifest is written last: its presence marks a complete data directory.
        with open(tmp / MANIFEST, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2)
            handle.write("\n")
        _install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _encode(tokenizer: Tokenizer, sentences: list[str]) -> Iterator[list[int]]:
    """Token ids per sentence, tokenized in parallel chunks; Encoding objects are bulky, so only
    a bounded number is alive at a time."""
    for start in range(0, len(sentences), ENCODE_CHUNK):
        chunk = sentences[start : start + ENCODE_CHUNK]
        for encoding in tokenizer.encode_batch(chunk, add_special_tokens=False):
            yield encoding.ids


def _heldout_selector(seed: int, fraction: float) -> Callable[[int], bool]:
    """Deterministic, evenly spread held-out documents: document i is held out when the running
    count floor(i * fraction + phase) steps up, with a seeded phase. This is "every k-th
    document" generalised to any fraction, exact to within one document at any corpus size."""
    phase = random.Random(seed).random()

    def is_heldout(index: int) -> bool:
        if fraction <= 0:
            return False
        return math.floor((index + 1) * fraction + phase) > math.floor(index * fraction + phase)

    return is_heldout


def _check_out_dir(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise ElectraError(f"output path exists and is not a directory: {out}")
    if (out / MANIFEST).exists():
        if not overwrite:
            raise ElectraError(f"{out} already holds prepared data; pass overwrite to replace it")
    elif any(out.iterdir()):
        raise ElectraError(f"{out} exists and is not a prepared data directory; refusing to use it")


def _install(tmp: Path, out: Path) -> None:
    """Move the finished temp dir into place, replacing an old data dir only at the very end."""
    if not out.exists():
        os.rename(tmp, out)
        return
    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    backup.rmdir()
    os.rename(out, backup)
    os.rename(tmp, out)
    shutil.rmtree(backup, ignore_errors=True)


class _ShardWriter:
    """Buffers packed examples of one split and writes them as .npy shards of about
    `shard_tokens` tokens, so at most one shard per split is ever held in memory."""

    def __init__(
        self, root: Path, split: str, shard_tokens: int, seq_len: int, dtype: type[np.integer]
    ) -> None:
        self.root = root
        self.split = split
        self.shard_tokens = shard_tokens
        self.dtype = dtype
        self.buffer = np.empty(shard_tokens + seq_len, dtype=dtype)
        self.position = 0
        self.offsets: list[int] = [0]
        self.sep_index: list[int] = []
        self.shards: list[dict[str, Any]] = []
        self.num_documents = 0
        self.num_examples = 0
        self.num_tokens = 0

    def add(self, examples: list[Example]) -> None:
        for ids, sep in examples:
            end = self.position + len(ids)
            self.buffer[self.position : end] = ids
            self.position = end
            self.offsets.append(end)
            self.sep_index.append(sep)
            if self.position >= self.shard_tokens:
                self._write_shard()

    def close(self) -> None:
        if self.sep_index:
            self._write_shard()
        self.buffer = np.empty(0, dtype=self.dtype)

    def _write_shard(self) -> None:
        stem = f"{self.split}-{len(self.shards):05d}"
        files = {
            "tokens": f"{stem}.tokens.npy",
            "offsets": f"{stem}.offsets.npy",
            "sep_index": f"{stem}.sep_index.npy",
        }
        np.save(self.root / files["tokens"], self.buffer[: self.position])
        np.save(self.root / files["offsets"], np.asarray(self.offsets, dtype=np.int64))
        np.save(self.root / files["sep_index"], np.asarray(self.sep_index, dtype=np.uint16))
        count = len(self.sep_index)
        self.shards.append({**files, "num_examples": count, "num_tokens": self.position})
        self.num_examples += count
        self.num_tokens += self.position
        self.position = 0
        self.offsets = [0]
        self.sep_index = []

    def summary(self) -> dict[str, Any]:
        return {
            "num_documents": self.num_documents,
            "num_examples": self.num_examples,
            "num_tokens": self.num_tokens,
            "shards": self.shards,
        }

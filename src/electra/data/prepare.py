"""Turn a text corpus into packed, memory-mappable token shards plus a manifest.

Documents are read in order by the main process and tokenized and packed in chunks by a pool of
worker processes (each single-threaded), with a bounded number of chunks in flight so that
memory stays flat for corpora larger than RAM. Each document is packed with a generator of its
own (seeded by the corpus seed and its index, `electra.data.packing.pack_document`), and the
packed examples come back in order as flat arrays that the main process only copies into
shards, so the shards and the manifest are byte-for-byte the same whatever the number of
workers.

The output directory is self-contained (its own copy of the tokenizer) and written atomically:
everything goes to a hidden temp dir beside it that is renamed only when complete, so a crash
or a bad line late in the corpus never leaves a directory that looks usable; the leftovers of a
killed run are removed by the next one. The manifest records every shard file's size (checked
on every load) and SHA-256 (checked on request, see `electra.data.dataset.verify_data`).
"""

from __future__ import annotations

import json
import os
import signal
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import closing, contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from electra.data.corpus import Document, corpus_files, iter_documents, split_sentences
from electra.data.packing import document_seed, pack_document
from electra.data.split import (
    DEFAULT_HELDOUT_FRACTION,
    MAX_HELDOUT_DOCUMENTS,
    split_documents,
)
from electra.data.word_cache import WordCache
from electra.data.workers import BrokenProcessPool, SpawnedPool
from electra.errors import ElectraError
from electra.fileutil import (
    refuse_to_replace,
    reported_write_failures,
    sha256_file,
    space_advice,
    staged_dir,
)
from electra.hub import resolve_model_path, snapshot_of
from electra.presets import PRESETS
from electra.progress import CountProgress, Progress
from electra.tokenizer import copy_tokenizer_files, load_tokenizer, tokenizer_info, vocab_checksum
from electra.version import __version__

FORMAT = "electra-pretraining-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SHARD_ARRAYS = ("tokens", "offsets", "sep_index")
# Up to the longest positions of any preset (the modern ones: 8,192); `electra pretrain` then
# refuses data longer than its model's max_position_embeddings.
MIN_SEQ_LEN = 8
MAX_SEQ_LEN = max(p.model.max_position_embeddings for p in PRESETS.values())
# Documents are tokenized in chunks of at most `batch_docs` documents and MAX_BATCH_CHARS
# characters; at most CHUNKS_PER_WORKER chunks per worker are in flight at a time.
MAX_BATCH_CHARS = 1 << 22
CHUNKS_PER_WORKER = 2

TokenizedDoc = list[list[int]]
"""One document as the token ids of each of its sentences."""
Chunk = tuple[list[int], list[str], list[str]]
"""A run of documents: each one's corpus index, split and text."""


@dataclass(frozen=True)
class Packing:
    """What a worker needs to pack documents into examples."""

    seq_len: int
    cls_id: int
    sep_id: int
    seed: int
    dtype: str


@dataclass
class PackedExamples:
    """One split's examples from one chunk, in corpus order, as flat arrays."""

    tokens: np.ndarray  # every example's ids, one after the other
    lengths: np.ndarray  # int64, tokens per example
    sep_index: np.ndarray  # uint16, the index of each example's first [SEP]
    documents: int


def default_workers() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def prepare_corpus(
    corpus: Sequence[str | Path],
    tokenizer_dir: str | Path,
    seq_len: int,
    out_dir: str | Path,
    text_field: str = "text",
    seed: int = 12345,
    heldout_fraction: float = DEFAULT_HELDOUT_FRACTION,
    max_heldout_documents: int = MAX_HELDOUT_DOCUMENTS,
    shard_tokens: int = 2**24,
    batch_docs: int = 256,
    show_progress: bool | Progress = True,
    overwrite: bool = False,
    workers: int | None = None,
    num_parts: int = 1,
    part_index: int = 0,
    revision: str | None = None,
) -> dict[str, Any]:
    """Tokenize, pack and shard a corpus into `out_dir`; returns the manifest it wrote.

    `tokenizer_dir`: any tokenizer directory `electra.tokenizer.load_tokenizer` reads (ours, or
    a released model's, also by its Hub id at `revision`); examples are `cls A sep (B sep)`
    with its special tokens by role.
    `heldout_fraction` of the documents (at most `max_heldout_documents`, at least one when the
    corpus has MIN_HELDOUT_CORPUS documents or more, none in a smaller one; 0 = no held-out
    split) go to the "heldout" split, evenly spread (`electra.data.split`).
    `workers` tokenizing processes (default: the available cores; 1 tokenizes in this process).
    The output does not depend on `workers` or `batch_docs`.
    `num_parts` > 1 prepares part `part_index` of the corpus, for one of several machines: the
    documents whose corpus index is `part_index` modulo `num_parts`, each held out or not and
    packed exactly as a one-machine prepare would (both are decided by the corpus index), so
    the parts combined (`electra.data.merge`) hold the same examples.
    `show_progress`: a `Progress` (`electra.progress`; True: the bar, False: nothing); lines
    count documents and tokens every `electra.progress.LINE_INTERVAL_S` seconds and at the end.
    """
    workers = default_workers() if workers is None else workers
    _check_arguments(seq_len, heldout_fraction, max_heldout_documents, shard_tokens,
                     batch_docs, workers, num_parts, part_index)
    corpus = [corpus] if isinstance(corpus, (str, Path)) else corpus
    out = Path(out_dir)
    check_out_dir(out, overwrite)
    corpus_files(corpus)  # fail on a missing path before any work
    tokenizer_dir = resolve_model_path(tokenizer_dir, revision, "--tokenizer")  # an id's snapshot
    snapshot = snapshot_of(tokenizer_dir)
    info = tokenizer_info(load_tokenizer(tokenizer_dir))  # refuses a tokenizer lacking a role
    checksum = vocab_checksum(tokenizer_dir)
    dtype = np.uint16 if info.vocab_size <= 2**16 else np.uint32

    with staged_dir(out) as tmp:
        with writing(out, "the tokenizer files"):
            copy_tokenizer_files(tokenizer_dir, tmp / "tokenizer")
        splits = ["train", "heldout"] if heldout_fraction > 0 else ["train"]
        writers = {name: _ShardWriter(tmp, name, shard_tokens, seq_len, dtype, out)
                   for name in splits}
        packing = Packing(seq_len, info.special_ids["cls"], info.special_ids["sep"], seed,
                          np.dtype(dtype).name)
        documents = split_documents(lambda: iter_documents(corpus, text_field=text_field),
                                    seed, heldout_fraction, max_heldout_documents)
        chunks = _chunks(((index, doc, heldout) for index, (doc, heldout) in enumerate(documents)
                          if index % num_parts == part_index), batch_docs)
        _write_shards(_pack_in_order(chunks, tokenizer_dir, packing, workers), writers,
                      show_progress)
        if "heldout" in writers and writers["heldout"].num_documents == 0:
            del writers["heldout"]  # a corpus below MIN_HELDOUT_CORPUS documents
        if writers["train"].num_examples == 0 and num_parts == 1:
            raise ElectraError(f"corpus produced no training examples: "
                               f"{', '.join(map(str, corpus))}")

        manifest = _manifest(info, checksum, snapshot, tokenizer_dir, seq_len, dtype, corpus,
                             {"seed": seed, "heldout_fraction": heldout_fraction,
                              "max_heldout_documents": max_heldout_documents,
                              "text_field": text_field, "shard_tokens": shard_tokens},
                             writers)
        if num_parts > 1:
            manifest["part"] = {"index": part_index, "count": num_parts}
        # The manifest is written last: its presence marks a complete data directory.
        with writing(out, MANIFEST), open(tmp / MANIFEST, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2)
            handle.write("\n")
    return manifest


def _write_shards(packed, writers: dict[str, _ShardWriter],
                  show_progress: bool | Progress) -> None:
    """Each packed part into its split's shards, in corpus order, counting the progress."""
    with closing(packed), CountProgress(show_progress, "preparing") as progress:
        for parts in packed:
            for split, part in parts.items():
                writers[split].add(part)
                progress.update(part.documents, len(part.tokens))
        for writer in writers.values():  # the last shards: "done" once they are written
            writer.close()


def _manifest(info, checksum: str, snapshot, tokenizer_dir: str | Path, seq_len: int, dtype,
              corpus: Sequence[str | Path], settings: dict[str, Any],
              writers: dict[str, _ShardWriter]) -> dict[str, Any]:
    """manifest.json: the format, the tokenizer (its special tokens, checksum and where it came
    from), the corpus, the settings and each split's shards."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "electra_version": __version__,
        "seq_len": seq_len,
        "vocab_size": info.vocab_size,
        "vocab_checksum": checksum,
        "special_token_ids": dict(info.special_ids),
        "special_tokens": dict(info.special_tokens),
        "tokenizer_kind": info.kind,
        "token_dtype": np.dtype(dtype).name,
        "tokenizer_dir": str(Path(tokenizer_dir).resolve()),
        **({"tokenizer_hub_id": snapshot.repo_id, "tokenizer_revision": snapshot.commit}
           if snapshot else {}),
        "tokenizer": "tokenizer",
        "corpus": [str(Path(p).resolve()) for p in corpus],
        "settings": settings,
        "splits": {name: writer.summary() for name, writer in writers.items()},
    }


def _check_arguments(seq_len: int, heldout_fraction: float, max_heldout_documents: int,
                     shard_tokens: int, batch_docs: int, workers: int, num_parts: int,
                     part_index: int) -> None:
    """`prepare_corpus`'s numbers, each refused in one line before any work."""
    if not MIN_SEQ_LEN <= seq_len <= MAX_SEQ_LEN:
        raise ElectraError(f"seq_len must be in [{MIN_SEQ_LEN}, {MAX_SEQ_LEN}], got {seq_len}")
    if not 0.0 <= heldout_fraction < 1.0:
        raise ElectraError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    if max_heldout_documents < 1:
        raise ElectraError(f"max_heldout_documents must be >= 1, got {max_heldout_documents}")
    if shard_tokens < 1 or batch_docs < 1:
        raise ElectraError("shard_tokens and batch_docs must be positive")
    if workers < 1:
        raise ElectraError(f"workers must be >= 1, got {workers}")
    if num_parts < 1 or not 0 <= part_index < num_parts:
        raise ElectraError(f"--shard-index must be in [0, --num-shards) and --num-shards >= 1, "
                           f"got {part_index} of {num_parts}")


def writing(out: Path, what: str):
    """A failed write of `what` (a full disk, any OSError) as one error; the staged directory
    it was written into is deleted as the error leaves it, so OUT stays as it was."""
    return reported_write_failures(
        lambda reason: f"{out}: {reason} while writing {what} (partial files removed, {out} "
                       f"left as it was); {space_advice(reason)} and run the same command again")


def _chunks(docs: Iterator[tuple[int, Document, bool]], batch_docs: int) -> Iterator[Chunk]:
    """(corpus index, document, held out) in chunks of bounded size, in corpus order."""
    indices: list[int] = []
    splits: list[str] = []
    texts: list[str] = []
    chars = 0
    for index, doc, heldout in docs:
        indices.append(index)
        splits.append("heldout" if heldout else "train")
        texts.append(doc.text)
        chars += len(doc.text)
        if len(texts) >= batch_docs or chars >= MAX_BATCH_CHARS:
            yield indices, splits, texts
            indices, splits, texts, chars = [], [], [], 0
    if texts:
        yield indices, splits, texts


def _pack_in_order(
    chunks: Iterator[Chunk], tokenizer_dir: str | Path, packing: Packing, workers: int
) -> Iterator[dict[str, PackedExamples]]:
    """Each chunk's packed examples by split, in order.

    One worker tokenizes and packs in this process. More start a pool of processes
    (`electra.data.workers.SpawnedPool`: spawned, and never importing the caller's `__main__`,
    so an unguarded script works) with single-threaded tokenizers, since the processes are
    the parallelism. `Executor.map` and
    `Pool.imap` would read the whole corpus ahead into their task queues, so chunks are
    submitted by hand, a bounded number ahead. A worker that dies (say, killed for memory) fails
    the run instead of hanging it, which is why this is a ProcessPoolExecutor and not a
    multiprocessing.Pool.
    """
    if workers == 1:
        words = WordCache(load_tokenizer(tokenizer_dir))
        with _single_threaded_tokenizers():
            for chunk in chunks:
                yield _pack_chunk(chunk, words, packing)
        return
    with SpawnedPool(workers, _init_worker, (str(tokenizer_dir), packing)) as pool:
        pending: deque[Future[dict[str, PackedExamples]]] = deque()
        try:
            for chunk in chunks:
                pending.append(pool.submit(_pack_chunk, chunk))
                if len(pending) >= CHUNKS_PER_WORKER * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BrokenProcessPool:
            raise pool.broken("tokenizing", "try fewer --workers if it ran out of memory"
                              ) from None
        finally:
            for result in pending:
                result.cancel()


_PARALLELISM = "TOKENIZERS_PARALLELISM"  # read by `tokenizers` at every batch call
_WORKER: tuple[WordCache, Packing] | None = None


def _init_worker(tokenizer_dir: str, packing: Packing) -> None:
    """Pool initializer: one single-threaded tokenizer per process; Ctrl-C is left to the main
    process, which stops the pool."""
    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ[_PARALLELISM] = "false"
    _WORKER = WordCache(load_tokenizer(tokenizer_dir)), packing


@contextmanager
def _single_threaded_tokenizers() -> Iterator[None]:
    previous = os.environ.get(_PARALLELISM)
    os.environ[_PARALLELISM] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_PARALLELISM, None)
        else:
            os.environ[_PARALLELISM] = previous


def _pack_chunk(chunk: Chunk, words: WordCache | None = None,
                packing: Packing | None = None) -> dict[str, PackedExamples]:
    """Tokenize and pack one chunk (in a pool worker unless `words` and `packing` are given).
    The examples travel back as flat arrays: pickling them is far cheaper than pickling lists
    of Python ints, and the main process only copies them into shards."""
    if words is None or packing is None:
        assert _WORKER is not None, "not in a pool worker: pass the word cache and packing"
        words, packing = _WORKER
    indices, splits, texts = chunk
    examples: dict[str, list[list[int]]] = {}
    seps: dict[str, list[int]] = {}
    documents: dict[str, int] = {}
    for index, split, sentences in zip(indices, splits, _tokenize(texts, words), strict=True):
        packed = pack_document(sentences, packing.seq_len, packing.cls_id, packing.sep_id,
                               document_seed(packing.seed, index))
        examples.setdefault(split, []).extend(ids for ids, _ in packed)
        seps.setdefault(split, []).extend(sep for _, sep in packed)
        documents[split] = documents.get(split, 0) + 1
    parts = {}
    for split, ids in examples.items():
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        parts[split] = PackedExamples(
            np.fromiter(chain.from_iterable(ids), dtype=packing.dtype, count=int(lengths.sum())),
            lengths, np.asarray(seps[split], dtype=np.uint16), documents[split])
    return parts


def _tokenize(texts: list[str], words: WordCache) -> list[TokenizedDoc]:
    """Split each document into sentences and tokenize them (no special tokens), each distinct
    word once (`WordCache`: the same ids as tokenizing the sentences)."""
    docs = [split_sentences(text) for text in texts]
    ids = iter(words.encode([s for doc in docs for s in doc]))
    return [[next(ids) for _ in doc] for doc in docs]


def check_out_dir(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise ElectraError(f"output path exists and is not a directory: {out}")
    if (out / MANIFEST).exists():
        if not overwrite:
            raise refuse_to_replace(out, "prepared data")
    elif any(out.iterdir()):
        raise ElectraError(f"{out} exists and is not a prepared data directory; refusing to use it")


class _ShardWriter:
    """Buffers packed examples of one split and writes them as .npy shards of about
    `shard_tokens` tokens, so at most one shard per split is ever held in memory."""

    def __init__(
        self, root: Path, split: str, shard_tokens: int, seq_len: int, dtype: type[np.integer],
        out: Path | None = None,
    ) -> None:
        self.root = root
        self.out = out if out is not None else root  # what errors name
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

    def add(self, part: PackedExamples) -> None:
        """Append a chunk's examples; a shard is written as soon as it holds `shard_tokens`
        tokens (after the example that crosses the mark, so a shard never splits one)."""
        self.num_documents += part.documents
        ends = np.cumsum(part.lengths)  # end of each example within part.tokens
        first = consumed = 0
        while first < len(ends):
            room = self.shard_tokens - self.position
            # the examples up to and including the first one that fills the shard
            take = min(int(np.searchsorted(ends[first:] - consumed, room)) + 1,
                       len(ends) - first)
            ends_here = ends[first : first + take] - consumed
            size = int(ends_here[-1])
            self.buffer[self.position : self.position + size] = \
                part.tokens[consumed : consumed + size]
            self.offsets.extend((ends_here + self.position).tolist())
            self.sep_index.extend(part.sep_index[first : first + take].tolist())
            self.position += size
            consumed += size
            first += take
            if self.position >= self.shard_tokens:
                self._write_shard()

    def close(self) -> None:
        if self.sep_index:
            self._write_shard()
        self.buffer = np.empty(0, dtype=self.dtype)

    def _write_shard(self) -> None:
        stem = f"{self.split}-{len(self.shards):05d}"
        arrays = {
            "tokens": self.buffer[: self.position],
            "offsets": np.asarray(self.offsets, dtype=np.int64),
            "sep_index": np.asarray(self.sep_index, dtype=np.uint16),
        }
        entry: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        digests: dict[str, str] = {}
        for key, array in arrays.items():
            path = self.root / f"{stem}.{key}.npy"
            with writing(self.out, f"shard {path.name}"):
                np.save(path, array)
            entry[key] = path.name
            sizes[key] = path.stat().st_size
            digests[key] = sha256_file(path)  # read back from the page cache: cheap
        count = len(self.sep_index)
        self.shards.append({**entry, "num_examples": count, "num_tokens": self.position,
                            "bytes": sizes, "sha256": digests})
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

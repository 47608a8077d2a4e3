"""`electra evaluate --task retrieval|sts`: any model electra loads, as an embedding model,
on BEIR-layout retrieval (`electra.embeddings.retrieval`) or on STS pairs
(`electra.embeddings.sts`); writes OUT/results.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from electra.embeddings import EMBEDDING_TASKS
from electra.embeddings.encode import DEFAULT_MAX_SEQ_LEN, DEFAULT_POOLING, Embedder, Pooling
from electra.embeddings.retrieval import CUTOFFS, read_beir, retrieval_metrics, search
from electra.embeddings.sts import read_sts, sts_file, sts_scores
from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.hub import resolve_data_path, source_record
from electra.outputs import EVALUATION, check_writable

DEFAULT_SPLITS = {"retrieval": "test", "sts": "dev"}


@dataclass(frozen=True)
class EmbeddingEval:
    """How texts become vectors and how many are scored."""

    pooling: Pooling = DEFAULT_POOLING
    max_seq_len: int | None = None
    batch_size: int | None = None
    max_examples: int | None = None  # the first queries (retrieval) or pairs (sts)
    device: str = "auto"


def evaluate_embeddings(model: str | Path, task: str, data: str | Path, out: str | Path,
                        split: str | None = None, settings: EmbeddingEval | None = None,
                        revision: str | None = None, data_revision: str | None = None,
                        overwrite: bool = False) -> dict:
    """Score `model`'s pooled vectors on `task`'s `split` of `data`; OUT/results.json."""
    if task not in EMBEDDING_TASKS:
        raise ElectraError(f"{task!r} is not an embedding task ({', '.join(EMBEDDING_TASKS)})")
    settings = settings or EmbeddingEval()
    check_writable(out, EVALUATION, overwrite)
    split = split or DEFAULT_SPLITS[task]
    data = Path(resolve_data_path(data, revision=data_revision))
    embedder = Embedder(model, settings.pooling, settings.max_seq_len or DEFAULT_MAX_SEQ_LEN,
                        settings.batch_size or 128, settings.device, revision)
    if task == "retrieval":
        scores = _retrieval(embedder, data, split, settings.max_examples)
    else:
        pairs = read_sts(sts_file(data, split))[:settings.max_examples]
        scores = sts_scores(embedder.embed, pairs)
    results = {"task": task, "split": split, "scores": scores,
               "pooling": settings.pooling.mode, "normalize": settings.pooling.normalize,
               "max_seq_len": embedder.max_seq_len,
               **source_record(embedder.model_dir, "model"), **source_record(data, "data")}
    Path(out).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(out) / "results.json", json.dumps(results, indent=2) + "\n")
    return results


def _retrieval(embedder: Embedder, data: Path, split: str, max_queries: int | None) -> dict:
    beir = read_beir(data, split)
    if max_queries is not None:
        kept = list(beir.queries)[:max_queries]
        beir = type(beir)(beir.corpus, {q: beir.queries[q] for q in kept},
                          {q: beir.qrels[q] for q in kept})
    results = search(embedder.embed, beir, k=max(CUTOFFS))
    return retrieval_metrics(results, beir.qrels)

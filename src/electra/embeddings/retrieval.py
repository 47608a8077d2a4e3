"""Retrieval on BEIR's layout, searched exactly in bounded memory, scored as trec_eval does.

The layout (BEIR, Thakur et al. 2021): `corpus.jsonl` ({"_id", "title", "text"} per line),
`queries.jsonl` ({"_id", "text"}) and `qrels/SPLIT.tsv` (a header, then query-id, corpus-id,
score). A document is encoded as its title and text joined by a space, as BEIR's
sentence-transformers wrapper does.

Search is exact: the corpus is encoded a block at a time, each block scored against every query
(a dot product: cosine for normalised vectors), and only each query's running top k is kept,
so memory is one block of vectors plus queries x k, whatever the corpus size.

The metrics are trec_eval's (pytrec_eval's `ndcg_cut_10`, `recall_10`, `recall_100`, and
`recip_rank` of the run cut to its top 10 for MRR@10), averaged over the queries that have a
relevant document: gains are the qrels' scores, ranks are by score, ties broken by document id
descending, as trec_eval breaks them.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from electra.data.corpus import iter_json_lines
from electra.errors import ElectraError

CUTOFFS = (10, 100)  # the Recall@k reported; nDCG and MRR at the first
BLOCK = 16384  # corpus documents encoded and scored at a time


@dataclass(frozen=True)
class RetrievalData:
    corpus: dict[str, str]  # id -> the text encoded (title and text)
    queries: dict[str, str]  # id -> text, the queries judged in the split only
    qrels: dict[str, dict[str, int]]  # query id -> {document id: relevance}


def _jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise ElectraError(f"{path}: missing (BEIR layout: corpus.jsonl, queries.jsonl, "
                           "qrels/SPLIT.tsv)")
    for lineno, row in iter_json_lines(path):  # invalid JSON: an error naming FILE:LINE
        if not isinstance(row, dict) or "_id" not in row:
            raise ElectraError(f"{path}:{lineno}: expected an object with an \"_id\"")
        yield lineno, row


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise ElectraError(f"{path}: missing (BEIR layout: qrels/SPLIT.tsv)")
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for lineno, row in enumerate(csv.reader(handle, delimiter="\t"), 1):
            if lineno == 1 or not row:  # the header: query-id, corpus-id, score
                continue
            try:
                query, doc, score = row[0], row[1], int(row[2])
            except (IndexError, ValueError):
                raise ElectraError(f"{path}:{lineno}: expected query-id, corpus-id and an "
                                   f"integer score, got {row!r}") from None
            qrels.setdefault(query, {})[doc] = score
    return qrels


def read_beir(folder: str | Path, split: str = "test") -> RetrievalData:
    """A BEIR folder's corpus, the split's judged queries and their qrels."""
    folder = Path(folder)
    qrels = read_qrels(folder / "qrels" / f"{split}.tsv")
    corpus = {str(row["_id"]): f"{row.get('title') or ''} {row.get('text') or ''}".strip()
              for _, row in _jsonl(folder / "corpus.jsonl")}
    queries = {str(row["_id"]): str(row.get("text") or "")
               for _, row in _jsonl(folder / "queries.jsonl") if str(row["_id"]) in qrels}
    missing = [q for q in qrels if q not in queries]
    if missing:
        raise ElectraError(f"{folder / 'qrels' / f'{split}.tsv'}: query {missing[0]!r} is not "
                           f"in {folder / 'queries.jsonl'} ({len(missing)} missing)")
    return RetrievalData(corpus, queries, qrels)


def exact_search(queries: np.ndarray, corpus_blocks: Iterable[np.ndarray], k: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The top `k` of every query over the corpus, given as blocks of vectors in corpus order:
    (scores, corpus indices), each [queries, k], best first."""
    q = torch.from_numpy(queries)
    best_scores = torch.full((len(q), 0), -math.inf)
    best_index = torch.zeros((len(q), 0), dtype=torch.long)
    seen = 0
    for block in corpus_blocks:
        scores = q @ torch.from_numpy(block).T
        index = torch.arange(seen, seen + len(block)).expand(len(q), -1)
        scores, index = torch.cat([best_scores, scores], 1), torch.cat([best_index, index], 1)
        keep = min(k, scores.shape[1])
        best_scores, at = scores.topk(keep, dim=1)
        best_index = index.gather(1, at)
        seen += len(block)
    return best_scores.numpy(), best_index.numpy()


def search(embed: Callable[[list[str]], np.ndarray], data: RetrievalData, k: int,
           block: int = BLOCK) -> dict[str, dict[str, float]]:
    """Each query's top `k` documents and their scores, encoding the corpus a block at a time."""
    doc_ids = list(data.corpus)
    query_ids = list(data.queries)
    query_vectors = embed([data.queries[q] for q in query_ids])
    blocks = (embed([data.corpus[d] for d in doc_ids[start:start + block]])
              for start in range(0, len(doc_ids), block))
    scores, index = exact_search(query_vectors, blocks, k)
    return {q: {doc_ids[i]: float(s) for s, i in zip(scores[n], index[n], strict=True)}
            for n, q in enumerate(query_ids)}


def _ranked(run: dict[str, float]) -> list[str]:
    """Documents by score, ties by id descending (trec_eval's order)."""
    return [d for d, _ in sorted(run.items(), key=lambda item: (item[1], item[0]),
                                 reverse=True)]


def query_metrics(ranked: list[str], judged: dict[str, int], k: int = CUTOFFS[0],
                  recall_at: tuple[int, ...] = CUTOFFS) -> dict[str, float]:
    """nDCG@k, MRR@k and Recall@n of one query's ranking against its judgements."""
    relevant = {d: g for d, g in judged.items() if g > 0}
    dcg = sum(relevant.get(d, 0) / math.log2(rank + 1)
              for rank, d in enumerate(ranked[:k], 1))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, 1))
    first = next((rank for rank, d in enumerate(ranked[:k], 1) if d in relevant), None)
    metrics = {f"ndcg@{k}": dcg / idcg if idcg else 0.0,
               f"mrr@{k}": 1.0 / first if first else 0.0}
    for n in recall_at:
        metrics[f"recall@{n}"] = sum(d in relevant for d in ranked[:n]) / len(relevant)
    return metrics


def retrieval_metrics(results: dict[str, dict[str, float]],
                      qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """The metrics averaged over the queries with a relevant document."""
    judged = [q for q, docs in qrels.items() if any(g > 0 for g in docs.values())]
    if not judged:
        raise ElectraError("no query has a relevant document in the qrels")
    per_query = [query_metrics(_ranked(results.get(q, {})), qrels[q]) for q in judged]
    return {name: sum(m[name] for m in per_query) / len(per_query) for name in per_query[0]}

"""Sentence embeddings (electra.embeddings): pooling, exact search in blocks, retrieval
metrics equal to trec_eval's (pytrec_eval), BEIR files read with errors that name the file and
line, and `electra evaluate --task retrieval|sts` end to end."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from electra.cli import main
from electra.embeddings.encode import Embedder, Pooling, pool
from electra.embeddings.retrieval import (
    exact_search,
    read_beir,
    retrieval_metrics,
    search,
)
from electra.embeddings.sts import read_sts, sts_scores
from electra.errors import ElectraError


def test_pooling_follows_the_attention_mask():
    hidden = torch.tensor([[[1.0, 0.0], [3.0, 4.0], [9.0, 9.0]],
                           [[0.0, 2.0], [2.0, 0.0], [4.0, 4.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    raw = Pooling("mean", normalize=False)
    assert pool(hidden, mask, raw).tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert pool(hidden, mask, Pooling("cls", False)).tolist() == [[1.0, 0.0], [0.0, 2.0]]
    assert pool(hidden, mask, Pooling("last", False)).tolist() == [[3.0, 4.0], [4.0, 4.0]]
    unit = pool(hidden, mask, Pooling("last"))
    assert torch.allclose(unit[0], torch.tensor([0.6, 0.8]))
    with pytest.raises(ElectraError, match="max"):
        Pooling("max")


@pytest.mark.parametrize("block", [7, 50, 500])
def test_exact_search_in_blocks_is_the_full_ranking(block):
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((5, 8)).astype(np.float32)
    corpus = rng.standard_normal((103, 8)).astype(np.float32)
    blocks = (corpus[i:i + block] for i in range(0, len(corpus), block))
    scores, index = exact_search(queries, blocks, k=10)
    full = queries @ corpus.T
    assert (index == np.argsort(-full, axis=1)[:, :10]).all()
    assert np.allclose(scores, np.take_along_axis(full, index, 1), atol=1e-5)


def test_retrieval_metrics_equal_trec_evals():
    """nDCG@10, Recall@10/100 and MRR@10 as pytrec_eval computes them (graded qrels, queries
    with and without a relevant document in the top 10), within 1e-4."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(0)
    docs = [f"d{i}" for i in range(150)]
    qrels = {f"q{q}": {d: rng.choice([1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 6))}
             for q in range(25)}
    run = {q: {d: rng.random() for d in rng.sample(docs, 120)} for q in qrels}
    ours = retrieval_metrics(run, qrels)
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_10", "recall_100"})
    per_query = trec.evaluate(run)
    top10 = {q: dict(sorted(r.items(), key=lambda i: -i[1])[:10]) for q, r in run.items()}
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    expected = {"ndcg@10": "ndcg_cut_10", "recall@10": "recall_10", "recall@100": "recall_100"}
    for ours_name, trec_name in expected.items():
        reference = np.mean([m[trec_name] for m in per_query.values()])
        assert ours[ours_name] == pytest.approx(reference, abs=1e-4)
    assert ours["mrr@10"] == pytest.approx(np.mean([m["recip_rank"] for m in mrr.values()]),
                                           abs=1e-4)
    assert 0 < ours["mrr@10"] < 1 and 0 < ours["ndcg@10"] < 1


def write_beir(folder, corpus: dict[str, str], queries: dict[str, str],
               qrels: dict[str, str]) -> None:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in corpus.items()))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t1\n" for q, d in qrels.items()))


def test_beir_files_are_read_and_their_errors_name_the_place(tmp_path):
    write_beir(tmp_path / "ok", {"a": "one", "b": "two"}, {"q1": "x", "q2": "y"}, {"q1": "a"})
    data = read_beir(tmp_path / "ok")
    assert data.corpus == {"a": "one", "b": "two"} and data.queries == {"q1": "x"}
    assert data.qrels == {"q1": {"a": 1}}
    with pytest.raises(ElectraError, match=r"qrels/dev.tsv: missing"):
        read_beir(tmp_path / "ok", "dev")
    (tmp_path / "ok" / "corpus.jsonl").write_text('{"_id": "a", "text": "one"}\n{oops\n')
    with pytest.raises(ElectraError, match=r"corpus.jsonl:2: invalid JSON"):
        read_beir(tmp_path / "ok")
    write_beir(tmp_path / "lost", {"a": "one"}, {"q1": "x"}, {"q9": "a"})
    with pytest.raises(ElectraError, match=r"query 'q9' is not in .*queries.jsonl"):
        read_beir(tmp_path / "lost")


def test_evaluate_retrieval_end_to_end(tiny_model, documents, tmp_path, capsys):
    """A query that is a document's own text finds that document first (its vector is the
    document's), so every metric is 1; the command's numbers are the API's."""
    texts = [" ".join(doc[:2]) for doc in documents[:40]]
    texts = list(dict.fromkeys(texts))
    corpus = {f"d{i}": t for i, t in enumerate(texts)}
    queries = {f"q{i}": t for i, t in enumerate(texts[:10])}
    write_beir(tmp_path / "beir", corpus, queries, {f"q{i}": f"d{i}" for i in range(10)})
    out = tmp_path / "eval"
    capsys.readouterr()
    assert main(["evaluate", "--task", "retrieval", "--model", str(tiny_model), "--data",
                 str(tmp_path / "beir"), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["scores"] == {"ndcg@10": 1.0, "mrr@10": 1.0, "recall@10": 1.0,
                                 "recall@100": 1.0}
    saved = json.loads((out / "results.json").read_text())
    assert (saved["task"], saved["split"], saved["pooling"]) == ("retrieval", "test", "mean")
    embedder = Embedder(tiny_model)
    data = read_beir(tmp_path / "beir")
    found = search(embedder.embed, data, k=100, block=7)
    assert all(next(iter(found[q])) == f"d{q[1:]}" for q in data.queries)


def test_evaluate_sts_end_to_end(tiny_model, tmp_path, capsys):
    rows = [("the cat sat", "the cat sat", 5.0), ("a dog ran", "a dog ran fast", 4.0),
            ("the cat sat", "prices rose sharply today", 0.5), ("one two", "three", 1.0)]
    path = tmp_path / "dev.tsv"
    path.write_text("genre\tsentence1\tsentence2\tscore\n"
                    + "".join(f"main\t{a}\t{b}\t{s}\n" for a, b, s in rows))
    assert read_sts(path) == rows
    capsys.readouterr()
    assert main(["evaluate", "--task", "sts", "--model", str(tiny_model), "--data",
                 str(tmp_path), "--out", str(tmp_path / "eval")]) == 0
    printed = json.loads(capsys.readouterr().out)["scores"]
    assert printed == sts_scores(Embedder(tiny_model).embed, rows)
    assert set(printed) == {"spearman", "pearson"} and -1 <= printed["spearman"] <= 1
    (tmp_path / "bad.tsv").write_text("a\tb\tscore\nx\ty\t1\n")
    with pytest.raises(ElectraError, match=r"bad.tsv:1: the header lacks sentence1, sentence2"):
        read_sts(tmp_path / "bad.tsv")


@pytest.fixture(scope="module")
def st_model(tiny_model, tmp_path_factory):
    """tiny_model written as a sentence-transformers folder by `electra export`."""
    pytest.importorskip("sentence_transformers")
    out = tmp_path_factory.mktemp("st") / "model"
    assert main(["export", str(tiny_model), "--sentence-transformers", str(out)]) == 0
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(out), device="cpu")


def test_a_sentence_transformers_folder_gives_electras_vectors(tiny_model, st_model):
    texts = ["the cat sat on the mat", "a", "the of and was naive", "prices rose " * 20]
    ours = Embedder(tiny_model).embed(texts)
    theirs = st_model.encode(texts, convert_to_numpy=True)
    assert theirs.shape == ours.shape and np.abs(theirs - ours).max() < 1e-5
    # 256 tokens by default, cut to the 128 positions the model has
    assert (st_model.get_max_seq_length(), st_model.similarity_fn_name) == (128, "cosine")


def test_sts_agrees_with_sentence_transformers_evaluator(tiny_model, st_model, documents):
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    rng = random.Random(1)
    pairs = [(" ".join(a[:6]), " ".join(b[:6]), rng.uniform(0, 5))
             for a, b in zip(documents[:30], documents[30:60], strict=True)]
    ours = sts_scores(Embedder(tiny_model).embed, pairs)
    theirs = EmbeddingSimilarityEvaluator([p[0] for p in pairs], [p[1] for p in pairs],
                                          [p[2] for p in pairs], name="x")(st_model)
    assert ours["spearman"] == pytest.approx(theirs["x_spearman_cosine"], abs=1e-4)
    assert ours["pearson"] == pytest.approx(theirs["x_pearson_cosine"], abs=1e-4)


def test_retrieval_agrees_with_sentence_transformers_evaluator(tiny_model, st_model,
                                                               documents, tmp_path):
    """Queries that are a document's first words (so rankings differ from query to query),
    binary qrels: nDCG@10, MRR@10 and Recall@10/100 as InformationRetrievalEvaluator gives
    them, within 1e-4."""
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    corpus = {f"d{i}": " ".join(doc[:12]) for i, doc in enumerate(documents[:150])}
    queries = {f"q{i}": " ".join(documents[i][:3]) for i in range(0, 150, 5)}
    qrels = {f"q{i}": f"d{i}" for i in range(0, 150, 5)}
    write_beir(tmp_path / "beir", corpus, queries, qrels)
    data = read_beir(tmp_path / "beir")
    ours = retrieval_metrics(search(Embedder(tiny_model).embed, data, k=100), data.qrels)
    theirs = InformationRetrievalEvaluator(
        queries, corpus, {q: {d} for q, d in qrels.items()}, name="x", mrr_at_k=[10],
        ndcg_at_k=[10], precision_recall_at_k=[10, 100], accuracy_at_k=[1], map_at_k=[10],
        score_functions={"cosine": lambda a, b: a @ b.T})(st_model)
    for metric in ("ndcg@10", "mrr@10", "recall@10", "recall@100"):
        assert ours[metric] == pytest.approx(theirs[f"x_cosine_{metric}"], abs=1e-4), metric
    assert 0 < ours["mrr@10"] < 1  # a ranking with misses: the comparison has content

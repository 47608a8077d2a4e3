"""Sentence embeddings from any encoder electra loads: pooling (`encode`), retrieval on the
BEIR layout with exact search in bounded memory (`retrieval`), semantic similarity (`sts`),
and `electra evaluate --task retrieval|sts` (`evaluate`). docs/embeddings.md."""

# Torch-free, for the command line: the tasks `electra evaluate` scores embeddings on, and
# how token states become one vector (`encode.Pooling`).
EMBEDDING_TASKS = ("retrieval", "sts")
POOLINGS = ("mean", "cls", "last")

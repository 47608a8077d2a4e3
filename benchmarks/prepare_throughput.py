"""Corpus preparation throughput: `electra prepare` with 1 and 2 workers against the pipeline a
user would otherwise write with Hugging Face `datasets`, for each kind of vocabulary.

Both turn the same JSON-lines text into 128-token training sequences on disk, timed from reading
the file to the last output written:

- electra: `prepare_corpus` (sentence splitting, WordPiece, ELECTRA packing, .npy shards with
  checksums) with `--workers 1` and `2`;
- baseline: `load_dataset("json")`, a batched `map` that tokenizes with the same tokenizer
  (`tokenizers.Tokenizer.encode_batch`, [CLS]/[SEP] per document, input ids only) and a batched
  `map` that concatenates and cuts 128-token blocks, as transformers' run_mlm.py does, both with
  num_proc=2 and a fresh cache directory per run (its output is the cache's Arrow files). It is
  run with the environment as a user has it (`tokenizers` free to use its thread pool inside
  each map process) and with TOKENIZERS_PARALLELISM=false.

The corpus is the first `--imdb-docs` IMDB reviews of ../shared/data/corpus/aclImdb/unsup plus
all of NLTK's Reuters news (about 24 MB of text), written once as plain JSON lines; each
vocabulary of `--kinds` (8,192 tokens: WordPiece by default, also `unigram` and byte-level
`bpe`, as `electra vocab --kind` trains them) is trained on it once, untimed. A WordPiece
vocabulary takes electra's word-cache path, the others are tokenized sentence by sentence
(`electra.data.word_cache`). tokens/s counts the corpus' tokens in that vocabulary (the same
number for every system of a kind), so within a kind its ratios equal the ratios of time.
electra keeps no held-out split here (`--heldout-fraction 0`), as before that became the default,
so all of the text is packed into training examples like the baseline's.
Medians over `--repeats`, the systems interleaved within each repeat. Needs `datasets` for the
baseline (not a dependency of electra; the baseline is skipped with a note without it).

    python -m benchmarks.prepare_throughput            # ~3 min on 2 idle cores
    python -m benchmarks.prepare_throughput --quick    # smoke run (seconds)
    python -m benchmarks.prepare_throughput --quick --kinds wordpiece,unigram,bpe
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import os
import platform
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.hf_datasets_pipeline import run_hf_datasets
from electra.data.prepare import prepare_corpus
from electra.data.vocab import KINDS, train_vocab
from electra.tokenizer import load_tokenizer

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "corpus"
SOURCES = (SHARED / "aclImdb" / "unsup.jsonl.gz", SHARED / "nltk" / "reuters.jsonl.gz")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", default="runs/prepare_throughput", help="scratch directory")
    p.add_argument("--imdb-docs", type=int, default=12000)
    p.add_argument("--reuters-docs", type=int, default=None, help="default: all")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--num-proc", type=int, default=2, help="the baseline's map processes")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kinds", default="wordpiece",
                   help=f"comma-separated vocabulary kinds to time ({', '.join(KINDS)}; "
                   "default: wordpiece)")
    p.add_argument("--quick", action="store_true", help="500 + 500 documents, one repeat")
    args = p.parse_args(argv)
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown or not args.kinds:
        p.error(f"--kinds: choose from {', '.join(KINDS)} (got {args.kinds})")
    if args.quick:
        args.imdb_docs, args.reuters_docs, args.repeats = 500, 500, 1
    return args


def write_corpus(path: Path, imdb_docs: int, reuters_docs: int | None) -> dict[str, int]:
    """The benchmark text as {"text": ...} lines; returns its size."""
    docs = chars = 0
    with open(path, "w", encoding="utf-8") as out:
        for source, limit in zip(SOURCES, (imdb_docs, reuters_docs), strict=True):
            with gzip.open(source, "rt", encoding="utf-8") as handle:
                for line in itertools.islice(handle, limit):
                    text = json.loads(line)["text"].strip()
                    if text:
                        out.write(json.dumps({"text": text}) + "\n")
                        docs, chars = docs + 1, chars + len(text)
    return {"documents": docs, "characters": chars, "bytes": path.stat().st_size}


def count_tokens(path: Path, tokenizer_dir: Path) -> int:
    tokenizer = load_tokenizer(tokenizer_dir)
    with open(path, encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle]
    return sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))


def run_electra(corpus: Path, tokenizer_dir: Path, out: Path, seq_len: int,
                workers: int) -> dict[str, Any]:
    manifest = prepare_corpus([corpus], tokenizer_dir, seq_len, out, show_progress=False,
                              overwrite=True, workers=workers, heldout_fraction=0.0)
    train = manifest["splits"]["train"]
    return {"examples": train["num_examples"], "packed_tokens": train["num_tokens"]}


def tree_digest(root: Path) -> str:
    """SHA-256 over every file's name and bytes: equal digests, byte-identical outputs."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def timed(run: Callable[[], dict[str, Any]]) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def system_name(base: str, kind: str) -> str:
    """WordPiece systems keep the names of the measurements before `--kinds` existed."""
    return base if kind == "wordpiece" else f"{base}_{kind}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    size = write_corpus(corpus, args.imdb_docs, args.reuters_docs)
    tokenizers: dict[str, Path] = {}
    tokens: dict[str, int] = {}
    for kind in args.kinds:
        # the WordPiece one keeps its old place, so earlier work directories are reused
        tokenizers[kind] = work / ("tokenizer" if kind == "wordpiece" else f"tokenizer-{kind}")
        if not (tokenizers[kind] / "tokenizer.json").is_file():
            train_vocab([corpus], 8192, tokenizers[kind], show_progress=False, kind=kind,
                        overwrite=True)
        tokens[kind] = count_tokens(corpus, tokenizers[kind])

    # name -> (kind, run(repeat))
    systems: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {}
    for kind in args.kinds:
        for w in args.workers:
            systems[system_name(f"electra_workers_{w}", kind)] = (kind, lambda r, w=w, k=kind: (
                run_electra(corpus, tokenizers[k], work / f"out-{k}", args.seq_len, w)))
    notes = []
    try:
        import datasets

        def baseline(r: int, kind: str, serial: bool) -> dict[str, Any]:
            cache = work / f"hf_cache_{r}"
            shutil.rmtree(cache, ignore_errors=True)
            previous = os.environ.pop("TOKENIZERS_PARALLELISM", None)
            if serial:
                os.environ["TOKENIZERS_PARALLELISM"] = "false"
            try:
                return run_hf_datasets(corpus, tokenizers[kind], cache, args.seq_len,
                                       args.num_proc)
            finally:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
                if previous is not None:
                    os.environ["TOKENIZERS_PARALLELISM"] = previous
                shutil.rmtree(cache, ignore_errors=True)

        for kind in args.kinds:
            name = system_name(f"hf_datasets_map_num_proc_{args.num_proc}", kind)
            systems[name] = (kind, lambda r, k=kind: baseline(r, k, serial=False))
            systems[f"{name}_serial_tokenizers"] = (
                kind, lambda r, k=kind: baseline(r, k, serial=True))
        notes.append(f"datasets {datasets.__version__}")
    except ImportError:
        notes.append("baseline skipped: the `datasets` package is not installed")

    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    outputs: dict[str, dict[str, Any]] = {}
    digests: dict[str, set[str]] = {kind: set() for kind in args.kinds}
    for repeat in range(args.repeats):
        for name, (kind, run) in systems.items():
            elapsed, outputs[name] = timed(lambda run=run, r=repeat: run(r))
            seconds[name].append(round(elapsed, 3))
            if name.startswith("electra"):
                digests[kind].add(tree_digest(work / f"out-{kind}"))
    load_after = os.getloadavg()

    results = {}
    for name, times in seconds.items():
        kind = systems[name][0]
        median = statistics.median(times)
        results[name] = {"kind": kind, "seconds": times, "median_s": median,
                         "docs_per_s": round(size["documents"] / median, 1),
                         "tokens_per_s": round(tokens[kind] / median), **outputs[name]}
    for kind in args.kinds:
        baselines = [n for n in results if n.startswith("hf_") and results[n]["kind"] == kind]
        if baselines:
            best = min(baselines, key=lambda n: results[n]["median_s"])
            for name in results:
                if name.startswith("electra") and results[name]["kind"] == kind:
                    results[name]["speedup_vs_best_baseline"] = round(
                        results[best]["median_s"] / results[name]["median_s"], 2)
    print(json.dumps({
        "corpus": {"sources": [str(s) for s in SOURCES], **size},
        "tokens": tokens,
        "seq_len": args.seq_len,
        "repeats": args.repeats,
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": len(os.sched_getaffinity(0)),
                    "loadavg_before": [round(x, 2) for x in load_before],
                    "loadavg_after": [round(x, 2) for x in load_after]},
        "notes": notes,
        # per kind: every worker count wrote the same bytes
        "electra_outputs_identical": all(len(d) == 1 for d in digests.values()),
        "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()

"""The corpus pipeline a user would otherwise write with Hugging Face `datasets`, as
transformers' run_mlm.py does it: `load_dataset("json")`, a batched `map` that tokenizes with
the same tokenizer (`tokenizers.Tokenizer.encode_batch`, [CLS]/[SEP] per document, input ids
only), and a batched `map` that concatenates and cuts `--seq-len` blocks, both with
`--num-proc` processes. Its output is the cache's Arrow files under `--cache`.

The baseline of `benchmarks.prepare_throughput` (timed in process) and of
`benchmarks.corpus_formats --baseline` (run as this command, so that its processes' memory can
be sampled). Needs `datasets`, which is not a dependency of electra.

    python -m benchmarks.hf_datasets_pipeline --corpus C.jsonl --tokenizer DIR --cache DIR
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any


def run_hf_datasets(corpus: Path, tokenizer_dir: Path, cache: Path, seq_len: int,
                    num_proc: int) -> dict[str, Any]:
    """What run_mlm.py does, with the tokenizer called directly (no transformers wrapper)."""
    import datasets
    from tokenizers import Tokenizer

    datasets.disable_progress_bars()
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        return {"input_ids": [e.ids for e in tokenizer.encode_batch(batch["text"])]}

    def group_texts(batch: dict[str, list]) -> dict[str, list]:
        ids = list(itertools.chain.from_iterable(batch["input_ids"]))
        total = len(ids) // seq_len * seq_len
        return {"input_ids": [ids[i : i + seq_len] for i in range(0, total, seq_len)]}

    raw = datasets.load_dataset("json", data_files=str(corpus), split="train",
                                cache_dir=str(cache))
    tokenized = raw.map(tokenize, batched=True, num_proc=num_proc, remove_columns=raw.column_names)
    blocks = tokenized.map(group_texts, batched=True, num_proc=num_proc)
    return {"examples": len(blocks), "packed_tokens": len(blocks) * seq_len}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", type=Path, required=True, help="a JSON lines file")
    p.add_argument("--tokenizer", type=Path, required=True, help="a folder with tokenizer.json")
    p.add_argument("--cache", type=Path, required=True, help="the datasets cache (its output)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument("--result", type=Path, help="also write the JSON printed to this file")
    args = p.parse_args(argv)
    result = run_hf_datasets(args.corpus, args.tokenizer, args.cache, args.seq_len,
                             args.num_proc)
    print(json.dumps(result))
    if args.result:
        args.result.write_text(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()

"""`electra prepare` on each corpus format at several corpus sizes: seconds, tokens/s, peak
memory and bytes written, so that memory can be seen not to grow with the corpus.

The corpus is real English text from ../shared/data/corpus (IMDB's unlabelled reviews, NLTK's
corpora, WikiText-2), its documents repeated in a shuffled order (seeded) until each size of
`--sizes-mb` is reached, and written once per size in each format of `--formats`: JSON lines,
JSON lines in zstd frames, Parquet (row groups of 10,000), and a `datasets` save_to_disk
folder (Arrow stream files of 500 MB at most, as `datasets` shards them). A WordPiece
vocabulary of 8,192 tokens is trained once on the first 20 MB, untimed.

Each prepare runs as its own process (`python -m electra.cli prepare --workers W`, no held-out
split), timed from start to exit. Peak memory is the largest sum of VmRSS over that process
and its workers, sampled every 0.1 s from /proc (Linux), the largest single process's, and the
largest sum of RssAnon (VmRSS without file pages: memory-mapped input counts in VmRSS while
its pages stay cached, but the kernel can take them back).
Results are cached per (size, format) under WORK/results/, so an interrupted run resumes; the
JSON printed at the end holds every finished run. A cached result is reused whatever changed
since: delete its file under WORK/results/ to measure again.

`--baseline` also runs, on each size's JSON lines file, the pipeline a user would otherwise
write with `datasets` (`benchmarks.hf_datasets_pipeline`: run_mlm.py's load, tokenize and
group, num_proc = --workers, a fresh cache), measured the same way; its output is the cache's
Arrow files. It needs `pip install datasets`.

    python -m benchmarks.corpus_formats --sizes-mb 50,200            # about 10 min on 2 cores
    python -m benchmarks.corpus_formats --sizes-mb 2048 --formats jsonl,parquet --baseline
    python -m benchmarks.corpus_formats --quick                      # smoke run (seconds)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "corpus"
FORMATS = ("jsonl", "jsonl.zst", "parquet", "datasets")
VOCAB_MB = 20
ARROW_FILE_BYTES = 500 << 20
BASELINE = "datasets-pipeline"  # not a format: the `datasets` pipeline on the JSON lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/corpus_formats"))
    p.add_argument("--sizes-mb", default="50,200", help="corpus sizes in MB of text")
    p.add_argument("--formats", default=",".join(FORMATS), help="default: %(default)s")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--baseline", action="store_true",
                   help="also time the `datasets` pipeline (benchmarks.hf_datasets_pipeline, "
                   "num_proc = --workers) on each size's JSON lines file; needs `datasets`")
    p.add_argument("--quick", action="store_true", help="1 and 2 MB: a smoke run")
    return p.parse_args(argv)


def source_documents() -> list[str]:
    """Every document of the shared English text, in a fixed order."""
    docs: list[str] = []
    for path in sorted(SHARED.rglob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            docs.extend(t for line in f if (t := json.loads(line).get("text", "").strip()))
    for path in sorted(SHARED.glob("wikitext-2/*.tokens")):
        docs.extend(d.strip() for d in path.read_text(encoding="utf-8").split("\n \n")
                    if d.strip())
    if not docs:
        raise SystemExit(f"no text under {SHARED}")
    return docs


def documents_of_size(docs: list[str], size_bytes: int, seed: int = 0) -> Iterator[str]:
    """The documents, reshuffled on every pass, until `size_bytes` of UTF-8 text."""
    rng, written = random.Random(seed), 0
    while True:
        order = list(range(len(docs)))
        rng.shuffle(order)
        for i in order:
            if written >= size_bytes:
                return
            written += len(docs[i].encode("utf-8"))
            yield docs[i]


def write_formats(docs: list[str], size_mb: int, root: Path, formats: list[str]) -> dict:
    """The corpus of `size_mb` in each format (kept when already there); input bytes."""
    root.mkdir(parents=True, exist_ok=True)
    jsonl = root / "corpus.jsonl"
    if not jsonl.is_file():
        tmp = jsonl.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for text in documents_of_size(docs, size_mb << 20):
                f.write(json.dumps({"text": text}) + "\n")
        tmp.replace(jsonl)
    paths = {"jsonl": jsonl}
    if "jsonl.zst" in formats:
        paths["jsonl.zst"] = _write_zstd(jsonl, root / "corpus.jsonl.zst")
    if "parquet" in formats:
        paths["parquet"] = _write_parquet(jsonl, root / "corpus.parquet")
    if "datasets" in formats:
        paths["datasets"] = _write_arrow_dataset(jsonl, root / "saved")
    return {f: {"path": str(p), "bytes": _size(p)} for f, p in paths.items() if f in formats}


def _texts(jsonl: Path, batch: int = 10_000) -> Iterator[list[str]]:
    rows: list[str] = []
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line)["text"])
            if len(rows) == batch:
                yield rows
                rows = []
    if rows:
        yield rows


def _write_zstd(jsonl: Path, out: Path) -> Path:
    import zstandard

    if not out.is_file():
        tmp = out.with_suffix(".tmp")
        with open(jsonl, "rb") as src, open(tmp, "wb") as dst:
            while block := src.read(64 << 20):  # one frame per 64 MB, as dumps are cut
                dst.write(zstandard.ZstdCompressor(level=3).compress(block))
        tmp.replace(out)
    return out


def _write_parquet(jsonl: Path, out: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not out.is_file():
        tmp = out.with_suffix(".tmp")
        schema = pa.schema([("text", pa.string())])
        with pq.ParquetWriter(tmp, schema) as writer:
            for rows in _texts(jsonl):
                writer.write_table(pa.table({"text": rows}, schema=schema))
        tmp.replace(out)
    return out


def _write_arrow_dataset(jsonl: Path, folder: Path) -> Path:
    """The layout of `datasets.Dataset.save_to_disk`: Arrow stream files, state.json."""
    import pyarrow as pa

    if (folder / "state.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("text", pa.string())])
    names: list[str] = []
    writer = sink = None
    written = 0
    for rows in _texts(jsonl):
        if writer is None or written >= ARROW_FILE_BYTES:
            if writer is not None:
                writer.close()
                sink.close()
            names.append(f"data-{len(names):05d}.arrow")
            sink = pa.OSFile(str(folder / names[-1]), "wb")
            writer, written = pa.ipc.new_stream(sink, schema), 0
        batch = pa.record_batch({"text": rows}, schema=schema)
        writer.write_batch(batch)
        written += batch.nbytes
    writer.close()
    sink.close()
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n}
                                                                   for n in names]}))
    return folder


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _status(pid: int) -> dict[str, str]:
    """/proc/PID/status as {field: value}; empty once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines()
                                      if ":" in line)}


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = int(_status(int(entry)).get("PPid", "0") or 0)
            children.setdefault(ppid, []).append(int(entry))
    stack, seen = [pid], []
    while stack:
        p = stack.pop()
        seen.append(p)
        stack.extend(children.get(p, []))
    return seen


def memory_kb(pid: int, field: str = "VmRSS") -> int:
    """A /proc/PID/status memory field in kB (0 once the process is gone)."""
    value = _status(pid).get(field)
    return int(value.split()[0]) if value else 0


def _tree_rss_kb(pid: int) -> tuple[int, int, int]:
    """VmRSS in kB of `pid` and its descendants: sum and largest; and the sum of their RssAnon
    (private memory, without the file pages of memory-mapped input that VmRSS counts)."""
    processes = descendants(pid)
    values = [memory_kb(p) for p in processes]
    return sum(values), max(values, default=0), sum(memory_kb(p, "RssAnon") for p in processes)


def run_logged(cmd: list[str], log: Path, env: dict[str, str], sample) -> float:
    """Run `cmd` with its output in `log` (a pipe left unread could fill and block it), calling
    `sample(pid)` every 0.1 s until it exits; its seconds. Exits with the log's last lines if
    the command fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        while proc.poll() is None:
            sample(proc.pid)
            time.sleep(0.1)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed: "
                         f"{log.read_text().strip().splitlines()[-3:]}")
    return seconds


def ensure_vocab(work: Path, docs: list[str], sample_mb: int) -> Path:
    """WORK/vocab: 8,192 WordPiece tokens trained (untimed) on the first `sample_mb` of the
    corpus, kept when already there."""
    vocab = work / "vocab"
    if not (vocab / "vocab.txt").is_file():
        from electra.data.vocab import train_vocab

        sample = work / "vocab-sample.jsonl"
        sample.parent.mkdir(parents=True, exist_ok=True)
        sample.write_text("".join(json.dumps({"text": t}) + "\n"
                                  for t in documents_of_size(docs, sample_mb << 20)))
        train_vocab([sample], 8192, vocab, show_progress=False, overwrite=True)
    return vocab


def run_measured(cmd: list[str], log: Path) -> dict[str, float]:
    """`cmd` run to its end: seconds, and the peaks of its process tree's VmRSS (sum, largest
    process) and RssAnon (sum)."""
    peaks = [0, 0, 0]

    def sample(pid: int) -> None:
        peaks[:] = map(max, peaks, _tree_rss_kb(pid))

    seconds = run_logged(cmd, log, {**os.environ, "TQDM_DISABLE": "1"}, sample)
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(peaks[0] / 1024, 1),
            "peak_rss_largest_process_mb": round(peaks[1] / 1024, 1),
            "peak_rss_anon_mb": round(peaks[2] / 1024, 1)}


def run_prepare(corpus: str, vocab: Path, out: Path, workers: int, seq_len: int) -> dict:
    cmd = [sys.executable, "-m", "electra.cli", "prepare", "--corpus", corpus, "--tokenizer",
           str(vocab), "--seq-len", str(seq_len), "--out", str(out), "--heldout-fraction", "0",
           "--workers", str(workers), "--overwrite"]
    measured = run_measured(cmd, out.parent / f"{out.name}-prepare.log")
    manifest = json.loads((out / "manifest.json").read_text())
    tokens = manifest["splits"]["train"]["num_tokens"]
    return {**measured, "tokens": tokens, "tokens_per_s": round(tokens / measured["seconds"]),
            "bytes_written": _size(out), "examples": manifest["splits"]["train"]["num_examples"],
            "shards_sha256": [s["sha256"]["tokens"] for s in
                              manifest["splits"]["train"]["shards"]]}


def run_baseline(jsonl: str, vocab: Path, cache: Path, workers: int, seq_len: int) -> dict:
    """The `datasets` pipeline on the same JSON lines file, from a fresh cache (its output),
    removed afterwards. Its tokens are its packed blocks' (no sentence packing, one
    [CLS]/[SEP] pair per document), so compare seconds, not tokens."""
    shutil.rmtree(cache, ignore_errors=True)
    result = cache.parent / f"{cache.name}.json"
    result.unlink(missing_ok=True)  # never read a previous run's
    cmd = [sys.executable, str(Path(__file__).with_name("hf_datasets_pipeline.py")),
           "--corpus", jsonl, "--tokenizer", str(vocab), "--cache", str(cache),
           "--seq-len", str(seq_len), "--num-proc", str(workers), "--result", str(result)]
    try:
        measured = run_measured(cmd, cache.parent / f"{cache.name}.log")
        written = _size(cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    output = json.loads(result.read_text())
    tokens = output["packed_tokens"]
    return {**measured, "tokens": tokens, "tokens_per_s": round(tokens / measured["seconds"]),
            "bytes_written": written, "examples": output["examples"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    sizes = [1, 2] if args.quick else [int(s) for s in args.sizes_mb.split(",") if s]
    formats = [f for f in args.formats.split(",") if f]
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise SystemExit(f"unknown formats {sorted(unknown)}; choose from {FORMATS}")
    work = args.work / ("quick" if args.quick else "full")
    docs = source_documents()
    vocab = ensure_vocab(work, docs, min(VOCAB_MB, sizes[0]))
    runs = {}
    for size in sizes:
        inputs = write_formats(docs, size, work / f"corpus-{size}mb", formats)
        for fmt in formats:
            cached = work / "results" / f"{size}mb-{fmt}.json"
            if not cached.is_file():
                result = run_prepare(inputs[fmt]["path"], vocab, work / "out", args.workers,
                                     args.seq_len)
                result.update(size_mb=size, format=fmt, input_bytes=inputs[fmt]["bytes"])
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(json.dumps(result, indent=1) + "\n")
            runs[f"{size}mb/{fmt}"] = json.loads(cached.read_text())
        cached = work / "results" / f"{size}mb-{BASELINE}.json"
        if args.baseline and not cached.is_file():
            jsonl = work / f"corpus-{size}mb" / "corpus.jsonl"  # written by write_formats
            result = run_baseline(str(jsonl), vocab, work / "hf-cache", args.workers,
                                  args.seq_len)
            result.update(size_mb=size, format=BASELINE, input_bytes=_size(jsonl))
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(result, indent=1) + "\n")
        if args.baseline:
            runs[f"{size}mb/{BASELINE}"] = json.loads(cached.read_text())
    prepared = {k: r for k, r in runs.items() if r["format"] != BASELINE}
    identical = {size: len({json.dumps(r["shards_sha256"]) for r in prepared.values()
                            if r["size_mb"] == size}) == 1 for size in sizes}
    report = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
              "workers": args.workers, "seq_len": args.seq_len, "runs": runs,
              "same_shards_in_every_format": identical,
              "baseline_seconds_over_electra_jsonl": {
                  size: round(runs[f"{size}mb/{BASELINE}"]["seconds"]
                              / runs[f"{size}mb/jsonl"]["seconds"], 2)
                  for size in sizes if f"{size}mb/{BASELINE}" in runs
                  and f"{size}mb/jsonl" in runs}}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()

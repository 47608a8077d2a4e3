"""Memory of each rank of `electra pretrain` under `torchrun`, at two corpus sizes: the shards are
memory-mapped, so no rank should hold a copy of the data, and a rank's private memory should not
grow with the corpus.

The corpora are `corpus_formats`' (the shared English text repeated in reshuffled order up to
each size of `--sizes-mb`, its WordPiece vocabulary of 8,192 tokens), prepared once with
`electra prepare` (no held-out split) and cached under WORK. For each size, `torchrun
--standalone --nproc-per-node N -m electra.cli pretrain` (gloo on CPUs) runs `--steps` steps of
`--preset`; every 0.1 s the script reads each rank's /proc/PID/status (Linux) and keeps the
peaks of:
- RssAnon: the rank's private memory (model, optimizer, batches, torch's allocator);
- RssFile: file pages mapped and resident (the shards, libraries), shared through the page
  cache by every rank and reclaimable by the kernel;
- VmRSS: their sum (with RssShmem).

Prints JSON: per size, the shard bytes on disk and each rank's peaks in MB.

    python -m benchmarks.ddp_memory                       # 50 MB and 2 GB corpora
    python -m benchmarks.ddp_memory --quick               # smoke run: 1 and 2 MB
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks.corpus_formats import (
    VOCAB_MB,
    _size,
    descendants,
    ensure_vocab,
    memory_kb,
    run_logged,
    run_prepare,
    source_documents,
    write_formats,
)

FIELDS = ("VmRSS", "RssAnon", "RssFile")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/corpus_formats"),
                   help="shared with corpus_formats: its corpora and vocabulary are reused")
    p.add_argument("--sizes-mb", default="50,2048", help="corpus sizes in MB of text")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="1 and 2 MB, 4 steps: a smoke run")
    return p.parse_args(argv)


def _local_rank(pid: int) -> int | None:
    """The LOCAL_RANK torchrun gave process `pid`, if it is one of its workers."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    env = dict(item.split(b"=", 1) for item in environ if b"=" in item)
    return int(env[b"LOCAL_RANK"]) if b"LOCAL_RANK" in env else None


def run_ranks(data: Path, out: Path, ranks: int, preset: str, steps: int) -> dict[str, Any]:
    """`steps` of pre-training under torchrun; each rank's peak memory, found among the
    launcher's own descendants (other runs on the machine are not measured)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={ranks}", "-m", "electra.cli", "pretrain", "--preset", preset,
           "--data", str(data), "--out", str(out), "--steps", str(steps), "--log-every",
           str(steps), "--eval-every", "0", "--save-every", str(steps), "--warmup-steps", "1"]
    shutil.rmtree(out, ignore_errors=True)  # a fresh run each time, not a resume
    peaks: dict[int, dict[str, int]] = {}

    def sample(launcher: int) -> None:
        for pid in descendants(launcher)[1:]:
            rank = _local_rank(pid)
            if rank is not None:
                peak = peaks.setdefault(rank, dict.fromkeys(FIELDS, 0))
                for key in FIELDS:
                    peak[key] = max(peak[key], memory_kb(pid, key))

    seconds = run_logged(cmd, out.parent / f"{out.name}.log",
                         {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}, sample)
    if len(peaks) != ranks:
        raise SystemExit(f"saw {len(peaks)} ranks' memory, expected {ranks}")
    return {"seconds": round(seconds, 1),
            "ranks": {str(rank): {f"peak_{k}_mb": round(v / 1024, 1) for k, v in p.items()}
                      for rank, p in sorted(peaks.items())}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    sizes = [1, 2] if args.quick else [int(s) for s in args.sizes_mb.split(",") if s]
    steps = 4 if args.quick else args.steps
    work = args.work / ("quick" if args.quick else "full")
    docs = source_documents()
    vocab = ensure_vocab(work, docs, min(VOCAB_MB, sizes[0]))
    runs = {}
    for size in sizes:
        data = work / f"prepared-{size}mb"
        if not (data / "manifest.json").is_file():
            corpus = write_formats(docs, size, work / f"corpus-{size}mb", ["jsonl"])["jsonl"]
            run_prepare(corpus["path"], vocab, data, workers=2, seq_len=128)
        manifest = json.loads((data / "manifest.json").read_text())
        result = run_ranks(data, work / "ddp-run", args.ranks, args.preset, steps)
        runs[f"{size}mb"] = {"tokens": manifest["splits"]["train"]["num_tokens"],
                             "shard_mb": round(_size(data) / 1e6, 1), **result}
    report = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
              "preset": args.preset, "ranks": args.ranks, "steps": steps, "runs": runs}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()

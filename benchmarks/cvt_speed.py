"""Seconds per training step of `electra cvt` (the `small` preset), supervised and CVT.

Times the real training loop (`electra.cvt.run.run_train`) on CoNLL-2000 chunking (1,000
labeled sentences) with NLTK Reuters as the unlabeled text. The loop logs cumulative training
seconds every 25 steps; the first 25 steps are warm-up, and what is reported is the median of
the later 25-step intervals, divided by 25. A supervised step is one labeled minibatch; a CVT
step adds an unlabeled one (teacher pass, student pass, backward, update).

The script only calls `run_train`, so it runs against older code too, for a side-by-side
comparison on one machine: `PYTHONPATH=OTHER_CHECKOUT/src python -m benchmarks.cvt_speed`.

    OMP_NUM_THREADS=1 python -m benchmarks.cvt_speed            # ~3 min on one core
    OMP_NUM_THREADS=1 python -m benchmarks.cvt_speed --steps 50  # quicker, one interval

Older code logs the seconds rounded to 0.1 s (0.004 s per step over 25 steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from benchmarks.shared_data import SHARED
from electra.cvt.run import TrainSettings, run_train
from electra.device import cpu_name

LOG_EVERY = 25  # electra.cvt.train logs every 25 steps


def time_run(cvt: bool, steps: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as out:
        run_train(TrainSettings(
            tasks=["chunk"], data=[str(args.data)], out=out, preset=args.preset,
            unlabeled=[str(args.unlabeled)], max_unlabeled=args.max_unlabeled, steps=steps,
            cvt=cvt, seed=0, train_sentences=args.train_sentences, save_every=0),
            progress=False)
        log = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    seconds = {r["step"]: r["seconds"] for r in log if r["step"] % LOG_EVERY == 0}
    per_step = [(seconds[s] - seconds[s - LOG_EVERY]) / LOG_EVERY
                for s in sorted(seconds) if s - LOG_EVERY in seconds]
    return {"seconds_per_step": round(statistics.median(per_step), 3),
            "intervals": [round(x, 3) for x in per_step]}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100, help="steps per run (multiple of 25, "
                   "at least 50: the first 25 are not timed)")
    p.add_argument("--preset", default="small")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", type=Path, default=SHARED / "conll2000")
    p.add_argument("--unlabeled", type=Path, default=SHARED / "corpus/nltk/reuters.jsonl.gz")
    p.add_argument("--max-unlabeled", type=int, default=100_000)
    p.add_argument("--train-sentences", type=int, default=1000)
    args = p.parse_args(argv)
    if args.steps < 2 * LOG_EVERY or args.steps % LOG_EVERY:
        p.error(f"--steps must be a multiple of {LOG_EVERY}, at least {2 * LOG_EVERY}")
    torch.set_num_threads(args.threads)
    result = {"preset": args.preset, "threads": args.threads, "steps": args.steps,
              "cpu": cpu_name(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "torch": torch.__version__,
              "supervised": time_run(False, args.steps, args),
              "cvt": time_run(True, args.steps, args)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

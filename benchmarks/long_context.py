"""Memory of a pre-training step against sequence length: the modern architecture's windowed
attention against dense attention (docs/modern.md).

Each (variant, length) runs in a fresh process: an ELECTRA objective of the preset (vocabulary
`--vocab-size`), one sequence of that length per step, AdamW; one warm-up step, then `--steps`
timed. Reported per run: the step's peak memory (the process' peak RSS during the steps minus
its RSS before the first one: activations, gradients, optimizer state and the allocator's
slack) and the median step time. Variants:

- `modern`: `tiny-modern` as it trains: windowed layers blockwise, SDPA (fused, no S x S
  matrix) in the global ones when nothing is padded;
- `modern-dense`: `tiny-modern` with every attention as one S x S matrix (the windowed layers
  dense and masked, the eager kernel everywhere): what the windows save;
- `tiny`: the BERT architecture (`tiny`, positions raised to the length), full attention.

Runs are cached under WORK/results (delete a file to rerun it). Prints JSON: per variant and
length the peak MB and step seconds, and per doubling of the length the ratio of the peaks'
growth (about 2 when memory is linear in length, 4 when quadratic).

    python -m benchmarks.long_context                       # 512 .. 8192 tokens
    python -m benchmarks.long_context --lengths 256,512 --variants modern --steps 1
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("modern", "modern-dense", "tiny")
# The dense variants stop where their S x S matrices would take most of a 24 GiB machine.
MAX_DENSE_LENGTH = 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/long_context"))
    p.add_argument("--lengths", default="512,1024,2048,4096,8192")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads per run (default 1: memory is the measurement, and "
                   "one thread keeps the times steady beside other work)")
    p.add_argument("--child", nargs=2, metavar=("VARIANT", "LENGTH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.length_list = [int(n) for n in args.lengths.split(",")]
    args.variant_list = args.variants.split(",")
    unknown = set(args.variant_list) - set(VARIANTS)
    if unknown:
        p.error(f"--variants: unknown {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    return args


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(variant: str, length: int, vocab_size: int, steps: int, threads: int) -> dict:
    """One run, in this process: the step's peak memory and time."""
    import torch

    torch.set_num_threads(threads)
    from electra.config import PretrainConfig
    from electra.model.modern import ModernEncoder
    from electra.objectives import build_objective
    from electra.objectives.masking import SpecialIds

    cfg = PretrainConfig.from_preset("tiny" if variant == "tiny" else "tiny-modern")
    cfg.model.vocab_size = vocab_size
    cfg.model.max_position_embeddings = max(cfg.model.max_position_embeddings, length)
    cfg.validate()
    torch.manual_seed(0)
    special = SpecialIds()
    model = build_objective(cfg.model, cfg.objective, special)
    if variant == "modern-dense":
        for encoder in (m for m in model.modules() if isinstance(m, ModernEncoder)):
            encoder.blockwise = False
            encoder.set_attention_impl("eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
    ids[0, 0], ids[0, -1] = special.cls, special.sep
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
             "attention_mask": torch.ones_like(ids)}

    def step() -> None:
        model(batch).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    before = rss_mb()
    step()  # warm-up: optimizer state allocated, kernels chosen
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": variant, "length": length, "tokens_per_step": length,
            "step_peak_mb": round(peak - before, 1), "rss_before_mb": round(before, 1),
            "median_step_s": round(statistics.median(times), 3),
            "threads": torch.get_num_threads()}


def run(variant: str, length: int, args: argparse.Namespace) -> dict | None:
    out = args.work / "results" / f"{variant}-{length}.json"
    if out.is_file():
        return json.loads(out.read_text())
    if variant != "modern" and length > MAX_DENSE_LENGTH:
        return None
    done = subprocess.run([sys.executable, "-m", "benchmarks.long_context", "--child", variant,
                           str(length), "--vocab-size", str(args.vocab_size), "--steps",
                           str(args.steps), "--threads", str(args.threads)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return {"variant": variant, "length": length, "error": done.stderr[-500:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["step_peak_mb_per_1k_tokens"] = round(1000 * result["step_peak_mb"] / length, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result) + "\n")
    return result


def growth(rows: list[dict]) -> list[dict]:
    """For each doubling of the length, how much more the step's peak grew than the previous
    doubling did (2: linear in length, 4: quadratic)."""
    out = []
    ok = [r for r in rows if "step_peak_mb" in r]
    for a, b, c in zip(ok, ok[1:], ok[2:], strict=False):
        if b["length"] == 2 * a["length"] and c["length"] == 2 * b["length"]:
            first = b["step_peak_mb"] - a["step_peak_mb"]
            second = c["step_peak_mb"] - b["step_peak_mb"]
            if first > 0:
                out.append({"lengths": [a["length"], b["length"], c["length"]],
                            "growth_ratio": round(second / first, 2)})
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.child:
        variant, length = args.child[0], int(args.child[1])
        result = child(variant, length, args.vocab_size, args.steps, args.threads)
        print(json.dumps(result))
        return result
    report: dict = {"variants": {}}
    for variant in args.variant_list:
        rows = [r for n in args.length_list if (r := run(variant, n, args)) is not None]
        report["variants"][variant] = {"runs": rows, "growth": growth(rows)}
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()

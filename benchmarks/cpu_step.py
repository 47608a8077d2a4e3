"""Where a CPU pre-training step goes: our ELECTRA training step against the matmul peak at its
own shapes, measured in the same run, plus the profiler's largest costs.

Times `--steps` training steps of our objective (preset `--preset`, batch `--batch` x
`--seq-len`, AdamW) in fp32 and, where the CPU has native bf16 (AVX-512 BF16 or AMX), under bf16
autocast, and reports

- achieved GFLOP/s: the step's training FLOPs (`electra.flops`, the paper's counting) over the
  median step time;
- the matmul peak at the step's shapes: `torch.nn.functional.linear` on the encoder's
  projection shapes (tokens x hidden -> 3 x hidden, hidden -> FFN, FFN -> hidden, hidden ->
  hidden, for the discriminator and the generator), FLOP-weighted, in the same dtype;
- utilisation = achieved / peak, and the top `--top` operators by self CPU time (torch.profiler).

`--samplers gumbel,categorical` times the generator's replacement sampling both ways,
alternating, in one process: the official Gumbel-max (`masking.gumbel_sample`, patched in for
the measurement) against our inverse-CDF `categorical_sample`.

    python -m benchmarks.cpu_step                        # ELECTRA-Small, 32 x 128
    python -m benchmarks.cpu_step --samplers gumbel,categorical
    python -m benchmarks.cpu_step --quick                # smoke run (tiny, seconds)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from benchmarks import pretrain_throughput as pt
from electra.device import cpu_has_fast_bf16
from electra.objectives import generators, objective_step_flops
from electra.objectives.masking import categorical_sample, gumbel_sample
from electra.runtime.speed import configure_process_for_speed

SAMPLERS = {"gumbel": gumbel_sample, "categorical": categorical_sample}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--steps", type=int, default=8, help="timed steps per mode and sampler")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="default: torch's")
    p.add_argument("--samplers", default="categorical",
                   help="comma list of gumbel, categorical; several alternate step by step")
    p.add_argument("--top", type=int, default=12, help="operators listed from the profile")
    p.add_argument("--quick", action="store_true", help="tiny preset, 2 steps")
    args = p.parse_args(argv)
    if args.quick:
        args.preset, args.batch, args.seq_len, args.vocab_size = "tiny", 8, 64, 1000
        args.steps, args.warmup, args.top = 2, 1, 5
    args.samplers = [s for s in args.samplers.split(",") if s]
    unknown = set(args.samplers) - set(SAMPLERS)
    if unknown or not args.samplers:
        p.error(f"--samplers: choose from {', '.join(SAMPLERS)}")
    return args


def matmul_peak(shapes: list[tuple[int, int, int]], dtype: torch.dtype, reps: int) -> dict:
    """GFLOP/s of F.linear at each (tokens, in, out) shape, and their FLOP-weighted mean (total
    FLOPs over total time, as a step that runs each shape once would see)."""
    per_shape, flops, seconds = {}, 0.0, 0.0
    for m, k, n in shapes:
        x, w = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
        for _ in range(2):
            F.linear(x, w)
        start = time.perf_counter()
        for _ in range(reps):
            F.linear(x, w)
        elapsed = (time.perf_counter() - start) / reps
        per_shape[f"{m}x{k}->{n}"] = round(2 * m * k * n / elapsed / 1e9, 1)
        flops, seconds = flops + 2 * m * k * n, seconds + elapsed
    return {"per_shape_gflops": per_shape, "weighted_gflops": round(flops / seconds / 1e9, 1)}


def step_shapes(cfg, gen_cfg, tokens: int) -> list[tuple[int, int, int]]:
    shapes = []
    for model in (cfg.model, gen_cfg):
        h, i = model.hidden_size, model.intermediate_size
        shapes += [(tokens, h, 3 * h), (tokens, h, h), (tokens, h, i), (tokens, i, h)]
    return sorted(set(shapes))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    configure_process_for_speed()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg, gen_cfg = pt.configs(args.seq_len, args.vocab_size, args.preset)
    batches = pt.make_batches(args.warmup + args.steps, args.batch, args.seq_len,
                              args.vocab_size, seed=0)
    step_flops = sum(objective_step_flops(cfg.model, cfg.objective, args.batch,
                                          args.seq_len).values())
    modes = ["fp32"] + (["bf16"] if cpu_has_fast_bf16() else [])
    report: dict = {"preset": args.preset, "batch": args.batch, "seq_len": args.seq_len,
                    "threads": torch.get_num_threads(), "cpu_capability":
                    torch.backends.cpu.get_cpu_capability(), "step_gflop": step_flops / 1e9,
                    "modes": {}}
    if "bf16" not in modes:
        report["skipped"] = {"bf16": "no native bf16 on this CPU (AVX-512 BF16 or AMX)"}
    original = generators.categorical_sample
    try:
        for mode in modes:
            dtype = torch.bfloat16 if mode == "bf16" else torch.float32
            model = pt.build("ours", cfg, gen_cfg, seed=0)
            step = pt.make_step(model, "ours", bf16=mode == "bf16")
            for batch in batches[: args.warmup]:
                step(batch)
            times: dict[str, list[float]] = {s: [] for s in args.samplers}
            for batch in batches[args.warmup :]:
                for sampler in args.samplers:  # alternating, the same batch for each
                    generators.categorical_sample = SAMPLERS[sampler]
                    start = time.perf_counter()
                    step(batch)
                    times[sampler].append(time.perf_counter() - start)
            generators.categorical_sample = original
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step(batches[-1])
            top = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total,
                         reverse=True)
            total = sum(e.self_cpu_time_total for e in prof.key_averages())
            peak = matmul_peak(step_shapes(cfg, gen_cfg, args.batch * args.seq_len), dtype,
                               reps=max(3, args.steps))
            entry: dict = {"matmul_peak": peak, "samplers": {}, "profile_top_self_cpu_share": {
                e.key: round(e.self_cpu_time_total / total, 4) for e in top[: args.top]}}
            for sampler, ts in times.items():
                median = statistics.median(ts)
                achieved = step_flops / median / 1e9
                entry["samplers"][sampler] = {
                    "median_step_s": round(median, 4), "steps_s": [round(t, 4) for t in ts],
                    "tokens_per_s": round(args.batch * args.seq_len / median, 1),
                    "achieved_gflops": round(achieved, 1),
                    "utilisation_of_matmul_peak": round(achieved / peak["weighted_gflops"], 3)}
            if len(times) > 1:
                base = statistics.median(times[args.samplers[0]])
                entry["speedup_vs_" + args.samplers[0]] = {
                    s: round(base / statistics.median(ts), 3) for s, ts in times.items()}
            report["modes"][mode] = entry
    finally:
        generators.categorical_sample = original
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()

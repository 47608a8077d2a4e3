"""Where a GPU pre-training step spends its time: host overhead or device work.

On an H100 (2026-11-26, `benchmarks.gpu_check`), our bf16 step took 60-70 ms for ELECTRA-Small
and -Base alike, at lengths 128 and 512: the same time for 14M and 110M parameters means the
GPU waits on the host. This script measures what a fix has to move, in one short run:

1. launch: microseconds per kernel launch of a trivial op (the floor of eager execution);
2. profile: for our step and the `transformers` recipe, Small and Base at 128 x 128, bf16:
   wall time per step, GPU busy time (sum of kernel durations), kernels per step, and the ops
   and kernels that cost most;
3. profile_compiled: the same profile of our Base step with `--compile`'s layers;
4. batch_scaling: our Base step at batch 64 to 512 (length 128): tokens/s rises with the batch
   while the host is the bound, and stops once the GPU is;
5. graphed: our Base discriminator's forward + backward captured in one CUDA graph and
   replayed, against the same work eager: the device-side floor of that part with no launch
   overhead at all.

Each part is written to OUT/gpu_profile.json when it ends; a part that fails is recorded and
the next runs. `--cpu-dry-run` runs every part at toy sizes on a CPU (the tests do), so the
GPU run cannot fail on a typo:

    PYTHONPATH=src:. python3 -m benchmarks.gpu_profile --out $OUT     # on the GPU machine
    python -m benchmarks.gpu_profile --cpu-dry-run --out runs/gpu_profile_dry
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.pretrain_throughput import build, build_on, configs, make_batches, make_step
from electra.fileutil import write_atomic
from electra.model.encoder import known_padding


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="where gpu_profile.json goes")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="every part at toy sizes on a CPU, fp32")
    p.add_argument("--parts", default="launch,profile,profile_compiled,batch_scaling,graphed")
    return p.parse_args(argv)


class Sizes:
    """What each part runs: paper sizes on the GPU, toy ones for the dry run."""

    def __init__(self, toy: bool):
        self.toy = toy
        self.device = torch.device("cpu" if toy else "cuda")
        self.presets = ["tiny"] if toy else ["small", "base"]
        self.big = "tiny" if toy else "base"
        self.seq_len = 16 if toy else 128
        self.batch = 4 if toy else 128
        self.batches = [2, 4] if toy else [64, 128, 256, 512]
        self.vocab = 1000 if toy else 30522
        self.bf16 = not toy
        self.warmup, self.rounds = (1, 2) if toy else (3, 10)
        self.launches = 50 if toy else 2000


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_steps(step: Callable[[], object], sizes: Sizes) -> list[float]:
    times = []
    for r in range(sizes.warmup + sizes.rounds):
        sync(sizes.device)
        start = time.perf_counter()
        step()
        sync(sizes.device)
        if r >= sizes.warmup:
            times.append(time.perf_counter() - start)
    return times


def launch_overhead(sizes: Sizes) -> dict:
    """Host time per launch of a one-element add, queued back to back (no sync between)."""
    x = torch.zeros(1, device=sizes.device)
    out = {}
    for name, op in (("add_", lambda: x.add_(1.0)), ("mul", lambda: x * 2.0)):
        for _ in range(10):
            op()
        sync(sizes.device)
        start = time.perf_counter()
        for _ in range(sizes.launches):
            op()
        queued = time.perf_counter() - start
        sync(sizes.device)
        total = time.perf_counter() - start
        out[name] = {"us_per_launch_queued": round(1e6 * queued / sizes.launches, 2),
                     "us_per_launch_done": round(1e6 * total / sizes.launches, 2)}
    return out


def step_for(side: str, preset: str, batch_size: int, sizes: Sizes
             ) -> tuple[Callable[[], object], float]:
    """A closure running one optimiser step of `side` ("ours", "ours_compiled" or "ref") on a
    fixed batch, and its tokens."""
    cfg, gen_cfg = configs(sizes.seq_len, sizes.vocab, preset)
    model = build_on(side, cfg, gen_cfg, sizes.device)
    step = make_step(model, "ref" if side == "ref" else "ours", sizes.bf16, device=sizes.device)
    batch = make_batches(1, batch_size, sizes.seq_len, sizes.vocab, seed=1)[0]
    return (lambda: step(batch)), batch_size * sizes.seq_len


def profile_step(side: str, preset: str, sizes: Sizes) -> dict:
    run, tokens = step_for(side, preset, sizes.batch, sizes)
    times = timed_steps(run, sizes)
    steps = 3
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if sizes.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            run()
        sync(sizes.device)
    events = list(prof.events())
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernel_us: dict[str, float] = defaultdict(float)
    for e in kernels:
        kernel_us[e.name[:90]] += e.device_time / steps
    ops = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU
           and e.name.startswith("aten::")
           and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    cpu_self_us: dict[str, float] = defaultdict(float)
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CPU:
            cpu_self_us[e.name[:90]] += e.self_cpu_time_total / steps
    med = statistics.median(times)
    top = sorted(cpu_self_us.items(), key=lambda kv: -kv[1])[:15]
    return {
        "step_ms": round(1e3 * med, 2), "tokens_per_s": round(tokens / med, 1),
        "gpu_busy_ms": round(sum(kernel_us.values()) / 1e3, 2),
        "kernels_per_step": round(len(kernels) / steps, 1),
        "top_level_ops_per_step": round(len(ops) / steps, 1),
        "top_op_counts": Counter(e.name for e in ops).most_common(12),
        "top_cpu_self_ms": [(name, round(us / 1e3, 3)) for name, us in top],
        "top_kernels_ms": [(name, round(us / 1e3, 3)) for name, us in
                           sorted(kernel_us.items(), key=lambda kv: -kv[1])[:12]],
    }


def profiles(sizes: Sizes) -> dict:
    out = {}
    for preset in sizes.presets:
        for side in ("ours", "ref"):
            out[f"{preset}/{side}"] = profile_step(side, preset, sizes)
    return out


def profile_compiled(sizes: Sizes) -> dict:
    """Our largest step with every Transformer layer under torch.compile (`--compile`)."""
    return {f"{sizes.big}/ours_compiled": profile_step("ours_compiled", sizes.big, sizes)}


def batch_scaling(sizes: Sizes) -> dict:
    out = {}
    for batch_size in sizes.batches:
        run, tokens = step_for("ours", sizes.big, batch_size, sizes)
        med = statistics.median(timed_steps(run, sizes))
        out[str(batch_size)] = {"step_ms": round(1e3 * med, 2),
                                "tokens_per_s": round(tokens / med, 1)}
        del run
    return out


def graphed(sizes: Sizes) -> dict:
    """The Base discriminator's forward + backward (a mean of its logits as the loss; no
    optimizer) eager, and captured once in a CUDA graph and replayed."""
    cfg, gen_cfg = configs(sizes.seq_len, sizes.vocab, sizes.big)
    disc = build("ours", cfg, gen_cfg, seed=0).discriminator.to(sizes.device)
    batch = make_batches(1, sizes.batch, sizes.seq_len, sizes.vocab, seed=1)[0]
    ids, types, mask = (batch[k].to(sizes.device) for k in
                        ("input_ids", "token_type_ids", "attention_mask"))

    def fwd_bwd() -> None:
        ctx = (torch.autocast(sizes.device.type, dtype=torch.bfloat16, cache_enabled=False)
               if sizes.bf16 else nullcontext())
        with ctx, known_padding(True):  # no host sync (none may happen inside a capture)
            loss = disc(ids, types, mask).float().mean()
        loss.backward()

    eager = statistics.median(timed_steps(fwd_bwd, sizes))
    result = {"eager_ms": round(1e3 * eager, 2)}
    if sizes.device.type != "cuda":
        return {**result, "graph_ms": None, "note": "CUDA graphs need a GPU"}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fwd_bwd()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fwd_bwd()
    replay = statistics.median(timed_steps(graph.replay, sizes))
    return {**result, "graph_ms": round(1e3 * replay, 2),
            "eager_over_graph": round(eager / replay, 2)}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    sizes = Sizes(args.cpu_dry_run)
    if not sizes.toy and not torch.cuda.is_available():
        raise SystemExit("gpu_profile: no CUDA device here (use --cpu-dry-run on a CPU)")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"dry_run": sizes.toy, "torch": torch.__version__,
                    "device": torch.cuda.get_device_name() if not sizes.toy else "cpu",
                    "date": time.strftime("%Y-%m-%d"), "parts": {}}
    parts = {"launch": launch_overhead, "profile": profiles,
             "profile_compiled": profile_compiled, "batch_scaling": batch_scaling,
             "graphed": graphed}
    for name in args.parts.split(","):
        start = time.perf_counter()
        try:
            report["parts"][name] = {"ok": True, **parts[name](sizes)}
        except Exception as e:  # record it and go on: the next part may still run
            report["parts"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                     "traceback": traceback.format_exc()[-2000:]}
        report["parts"][name]["seconds"] = round(time.perf_counter() - start, 1)
        write_atomic(args.out / "gpu_profile.json", json.dumps(report, indent=1) + "\n")
        print(f"gpu_profile: {name} {'ok' if report['parts'][name]['ok'] else 'FAILED'}",
              file=sys.stderr)
    return report


if __name__ == "__main__":
    main()

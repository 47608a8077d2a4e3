"""The compiled whole step (`--compile-step`) against the eager step, as `electra pretrain`
runs them: is compiling worth it, and after how many steps?

Both sides train our ELECTRA objective from the same initial weights on the same batches, in
one process, alternating step by step (the order flips every round), with the run's own
schedule (warm-up, then linear decay) so that every step has a new learning rate:
- "eager": forward and backward module by module, `clip_grad_norm_`, torch's AdamW, the
  schedule step (the loop's `_eager_step`);
- "compiled": `electra.pretraining.step.WholeStep` compiled by inductor (`train.compile_step`).

The compiled side's first call (tracing and compiling) is timed apart, as "compile_s"; each
side's first `--warmup` steps after it are not timed. "compilations" counts the graphs dynamo
built over the whole run (1 when the learning rate enters as data). "break_even_steps" is
compile_s over the per-step saving: a run longer than that is faster compiled. Prints one JSON
object.

    python -m benchmarks.compile_step                      # tiny-local and small, fp32, 32 x 128
    python -m benchmarks.compile_step --presets tiny-local --rounds 20 --warmup 2   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

from benchmarks.pretrain_throughput import (
    Batch,
    adamw,
    build,
    configs,
    load_avg,
    make_batches,
    timed,
)
from electra.device import cpu_name, resolve_device, to_device
from electra.model.encoder import known_padding, mask_has_padding
from electra.pretraining.loop import _window_values
from electra.pretraining.step import WholeStep
from electra.runtime.optim import lr_multiplier

VOCAB = {"tiny-local": 8192, "tiny-modern": 8192, "tiny": 8192}  # the demo's; others BERT's


def schedule(optimizer: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The run's schedule over this benchmark's steps: a new learning rate every step."""
    warmup = max(1, steps // 10)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, warmup, steps + 1))


def eager_step(model: torch.nn.Module, steps: int, device: torch.device
               ) -> Callable[[Batch], None]:
    opt = adamw(model, 5e-4)
    sched = schedule(opt, steps)
    params = list(model.parameters())

    def step(batch: Batch) -> None:
        padded = mask_has_padding(batch["attention_mask"])
        with known_padding(padded):
            out = model(to_device(batch, device))
        out.loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if bool(torch.isfinite(norm) & torch.isfinite(out.loss)):  # the loop's guard
            opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)

    return step


def compiled_step(model: torch.nn.Module, steps: int, device: torch.device
                  ) -> Callable[[Batch], None]:
    opt = adamw(model, 5e-4)
    sched = schedule(opt, steps)
    whole = WholeStep(model, opt, 1.0, False, _window_values, compile=True, device=device)

    def step(batch: Batch) -> None:
        padded = mask_has_padding(batch["attention_mask"])
        whole([to_device(batch, device)], padded)
        sched.step()

    return step


def measure(preset: str, args: argparse.Namespace, device: torch.device) -> dict:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    vocab = VOCAB.get(preset, 30522)
    cfg, gen_cfg = configs(args.seq_len, vocab, preset)
    batches = make_batches(8, args.batch_size, args.seq_len, vocab, seed=0)
    total = 1 + args.warmup + args.rounds
    sides = {"eager": eager_step(build("ours", cfg, gen_cfg, 0).to(device).train(), total,
                                 device),
             "compiled": compiled_step(build("ours", cfg, gen_cfg, 0).to(device).train(),
                                       total, device)}
    first = {side: timed(step, batches[0], device) for side, step in sides.items()}
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    before = load_avg()
    for r in range(args.warmup + args.rounds):
        batch = batches[(r + 1) % len(batches)]
        for side in (("eager", "compiled") if r % 2 == 0 else ("compiled", "eager")):
            dt = timed(sides[side], batch, device)
            if r >= args.warmup:
                times[side].append(dt)
    med = {side: statistics.median(t) for side, t in times.items()}
    saving = med["eager"] - med["compiled"]
    compile_s = first["compiled"] - med["compiled"]
    tokens = args.batch_size * args.seq_len
    return {
        "vocab_size": vocab,
        "compile_s": round(compile_s, 1),
        "compilations": int(counters["stats"]["unique_graphs"]),
        "eager": {"step_s": round(med["eager"], 4), "min_s": round(min(times["eager"]), 4),
                  "tokens_per_s": round(tokens / med["eager"], 1)},
        "compiled": {"step_s": round(med["compiled"], 4),
                     "min_s": round(min(times["compiled"]), 4),
                     "tokens_per_s": round(tokens / med["compiled"], 1)},
        "compiled_over_eager": round(med["eager"] / med["compiled"], 3),
        "break_even_steps": round(compile_s / saving) if saving > 0 else None,
        "load_avg_1min_before_after": [before, load_avg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="tiny-local,small")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=200, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps after compiling")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    from electra.runtime.speed import configure_process_for_speed

    configure_process_for_speed()
    device = resolve_device(args.device)
    report = {"benchmark": "compile_step", "torch": torch.__version__,
              "cpu": cpu_name(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "threads": torch.get_num_threads(), "machine": platform.machine(),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "precision": "fp32",
              "batch": [args.batch_size, args.seq_len], "rounds": args.rounds,
              "warmup": args.warmup, "date": time.strftime("%Y-%m-%d"), "presets": {}}
    for preset in args.presets.split(","):
        report["presets"][preset] = measure(preset, args, device)
        print(json.dumps({preset: report["presets"][preset]}), flush=True, file=sys.stderr)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

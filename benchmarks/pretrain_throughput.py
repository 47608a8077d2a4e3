"""Training tokens/s of our ELECTRA-Small step against the common `transformers` recipe.

One training step = objective forward + backward + AdamW step, train mode, dropout 0.1. Ours is
`ElectraObjective` (masked-only generator head, fast dropout, eager/SDPA choice per dtype).
The reference is how ELECTRA pre-training is usually written with `transformers`: an
`ElectraForMaskedLM` generator (1/4 width) and an `ElectraForPreTraining` discriminator sharing
one embeddings module, generator logits and cross-entropy over all positions, 15% masking with
85% [MASK], sampling from the softmax at masked positions, discriminator loss weight 50.

Both run in one process on the same batches, alternating step by step (the order flips every
round) after a warm-up, so machine noise hits both alike; medians are reported. The process
settings of `electra.train.speed` are process-wide, so the in-process comparison runs both
under the same settings, and their effect on each side is measured separately, in fresh
subprocesses with and without them. Prints one JSON object.

    python -m benchmarks.pretrain_throughput            # default, ~8-9 min on 2 CPU cores
    python -m benchmarks.pretrain_throughput --quick    # smoke run, tiny sizes
    python -m benchmarks.pretrain_throughput --device cuda --presets small,base --seq-len 128,512

On a CPU without native bf16 (AVX2 only) the bf16 modes and the fp32/bf16 accuracy check are
skipped, and the JSON says why under "skipped" (ELECTRA_ALLOW_SLOW_BF16=1 runs them anyway).

With `--device cuda` (bf16 autocast by default) each preset and length is timed side by side,
one after the other on the same GPU (so each side's peak memory is its own): tokens/s,
sequences/s, model FLOPs utilisation (training FLOPs of `electra.flops` per second over
`--peak-tflops`, default 989: an H100 SXM's dense bf16 peak) and peak memory; the reference
when `transformers` is installed, our step under torch.compile with `--compile`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig, ObjectiveConfig, PretrainConfig
from electra.device import ALLOW_SLOW_BF16, cpu_name, slow_bf16_reason, to_device
from electra.model.encoder import (
    compile_layers,
    known_padding,
    mask_has_padding,
    resolve_attention_impl,
)
from electra.objectives import build_objective, metrics_from_counts, objective_step_flops
from electra.objectives.electra import ElectraObjective
from electra.objectives.masking import SpecialIds
from electra.train.optim import adamw_impl
from electra.train.speed import configure_process_for_speed

SPECIAL = SpecialIds()
Batch = dict[str, torch.Tensor]
NOISY = 1.15  # a side whose median step exceeds its fastest by this factor was disturbed
H100_BF16_DENSE_TFLOPS = 989.0  # H100 SXM, bf16 tensor cores without sparsity
CUDA_TOKENS_PER_STEP = 16384  # default CUDA batch: 128 x 128, 32 x 512


# ----------------------------------------------------------------------------- data
def make_batches(n: int, batch_size: int, seq_len: int, vocab_size: int, seed: int,
                 padded: bool = True) -> list[Batch]:
    """Sentence pairs `[CLS] A [SEP] B [SEP]` of Zipf-distributed tokens with bigram structure
    (half the tokens follow a fixed successor of the previous one, so context is learnable);
    one row in eight is shorter and padded (none with `padded=False`)."""
    g = torch.Generator().manual_seed(seed)
    first = max(SPECIAL.__dict__.values()) + 1
    ranks = torch.arange(1, vocab_size - first + 1, dtype=torch.float64)
    zipf = (1.0 / ranks) / (1.0 / ranks).sum()
    ids_by_rank = torch.randperm(vocab_size - first, generator=torch.Generator().manual_seed(0))
    successor = torch.randperm(vocab_size - first, generator=torch.Generator().manual_seed(1))
    batches = []
    for _ in range(n):
        draws = torch.multinomial(zipf, batch_size * seq_len, replacement=True, generator=g)
        tokens = ids_by_rank[draws].view(batch_size, seq_len)
        follow = torch.rand(batch_size, seq_len, generator=g) < 0.5
        for j in range(1, seq_len):  # bigram structure: successor of the previous token
            tokens[:, j] = torch.where(follow[:, j], successor[tokens[:, j - 1]], tokens[:, j])
        tokens += first
        input_ids = torch.full((batch_size, seq_len), SPECIAL.pad, dtype=torch.long)
        token_type_ids = torch.zeros_like(input_ids)
        attention_mask = torch.zeros_like(input_ids)
        for i in range(batch_size):
            length = seq_len if i % 8 or not padded else int(
                torch.randint(seq_len // 4, seq_len, (1,), generator=g))
            split = max(2, int(length * float(torch.rand(1, generator=g)) * 0.5 + length * 0.25))
            input_ids[i, :length] = tokens[i, :length]
            input_ids[i, 0] = SPECIAL.cls
            input_ids[i, split - 1] = SPECIAL.sep
            input_ids[i, length - 1] = SPECIAL.sep
            token_type_ids[i, split:length] = 1
            attention_mask[i, :length] = 1
        batches.append({"input_ids": input_ids, "token_type_ids": token_type_ids,
                        "attention_mask": attention_mask})
    return batches


# ------------------------------------------------------------------------ reference
class ReferenceElectra(nn.Module):
    """ELECTRA pre-training written the common way with `transformers`."""

    def __init__(self, disc_cfg: ModelConfig, gen_cfg: ModelConfig,
                 mask_prob: float = 0.15, mask_token_prob: float = 0.85,
                 disc_weight: float = 50.0):
        super().__init__()
        from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

        def hf(cfg: ModelConfig) -> ElectraConfig:
            return ElectraConfig(**{k: getattr(cfg, k) for k in (
                "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size", "max_position_embeddings",
                "type_vocab_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
                "layer_norm_eps", "initializer_range", "pad_token_id")})

        self.generator = ElectraForMaskedLM(hf(gen_cfg))
        self.discriminator = ElectraForPreTraining(hf(disc_cfg))
        # Tie word/position/type embeddings and the embedding LayerNorm.
        self.discriminator.electra.embeddings = self.generator.electra.embeddings
        assert (self.generator.generator_lm_head.weight
                is self.discriminator.electra.embeddings.word_embeddings.weight)
        self.mask_prob, self.mask_token_prob, self.disc_weight = (
            mask_prob, mask_token_prob, disc_weight)

    @property
    def attn_implementation(self) -> str:
        return str(self.discriminator.config._attn_implementation)

    def forward(self, batch: Batch) -> torch.Tensor:
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        token_type_ids = batch["token_type_ids"]
        special = ((input_ids == SPECIAL.cls) | (input_ids == SPECIAL.sep)
                   | (input_ids == SPECIAL.pad))
        device = input_ids.device
        probs = torch.full(input_ids.shape, self.mask_prob, device=device).masked_fill(special,
                                                                                       0.0)
        masked = torch.bernoulli(probs).bool()
        to_mask = masked & torch.bernoulli(torch.full(input_ids.shape, self.mask_token_prob,
                                                      device=device)).bool()
        gen_input = input_ids.masked_fill(to_mask, SPECIAL.mask)
        labels = input_ids.masked_fill(~masked, -100)
        gen = self.generator(input_ids=gen_input, attention_mask=attention_mask,
                             token_type_ids=token_type_ids, labels=labels)
        with torch.no_grad():
            sampled = torch.multinomial(F.softmax(gen.logits[masked].float(), dim=-1), 1)
        disc_input = input_ids.clone()
        disc_input[masked] = sampled.squeeze(1)
        is_replaced = (disc_input != input_ids).long()
        disc = self.discriminator(input_ids=disc_input, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids, labels=is_replaced)
        return gen.loss + self.disc_weight * disc.loss


# ---------------------------------------------------------------------------- steps
def configs(seq_len: int, vocab_size: int, preset: str = "small"
            ) -> tuple[PretrainConfig, ModelConfig]:
    cfg = PretrainConfig.from_preset(preset)
    cfg.model.vocab_size = vocab_size
    cfg.model.max_position_embeddings = max(cfg.model.max_position_embeddings, seq_len)
    cfg.validate()
    return cfg, cfg.model.scaled(cfg.objective.generator_multiplier)


def build(side: str, cfg: PretrainConfig, gen_cfg: ModelConfig, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if side == "ours":
        return build_objective(cfg.model, cfg.objective, SPECIAL)
    obj: ObjectiveConfig = cfg.objective
    return ReferenceElectra(cfg.model, gen_cfg, obj.mask_prob, obj.mask_token_prob,
                            obj.disc_weight)


def build_on(side: str, cfg: PretrainConfig, gen_cfg: ModelConfig, device: torch.device
             ) -> nn.Module:
    """`build` on `device` for a timed side: "ours", "ours_compiled" (every layer under
    torch.compile, `--compile`) or "ref"."""
    model = build("ref" if side == "ref" else "ours", cfg, gen_cfg, seed=0).to(device)
    if side == "ours_compiled":
        torch._dynamo.reset()  # graphs of earlier presets and lengths neither help nor count
        compile_layers(model)
    return model


def make_step(model: nn.Module, side: str, bf16: bool, lr: float = 5e-4,
              device: torch.device | None = None) -> Callable[[Batch], dict]:
    """One optimiser step on a host batch, as the training loop takes it (copied to `device`,
    pinned on CUDA; for ours, padding decided on the host); returns the objective's output
    (ours) for metrics. On CUDA both sides get fused AdamW (`adamw_impl`)."""
    device = device or torch.device("cpu")
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, eps=1e-6, **adamw_impl(params))
    model.train()

    def step(batch: Batch) -> dict:
        padded = mask_has_padding(batch["attention_mask"]) if side == "ours" else None
        batch = to_device(batch, device)
        ctx = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
        with ctx, known_padding(padded):
            out = model(batch)
        loss = out.loss if side == "ours" else out
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"out": out}

    return step


def timed(step: Callable[[Batch], dict], batch: Batch) -> float:
    start = time.perf_counter()
    step(batch)
    return time.perf_counter() - start


def compare(mode: str, batches: list[Batch], cfg: PretrainConfig, gen_cfg: ModelConfig,
            rounds: int, warmup: int) -> dict:
    """Alternate ours and the reference on the same batches; medians of step times."""
    bf16 = mode == "bf16"
    steps = {side: make_step(build(side, cfg, gen_cfg, seed=0), side, bf16)
             for side in ("ours", "ref")}
    times: dict[str, list[float]] = {"ours": [], "ref": []}
    load_before = load_avg()
    for r in range(warmup + rounds):
        batch = batches[r % len(batches)]
        order = ("ours", "ref") if r % 2 == 0 else ("ref", "ours")
        for side in order:
            dt = timed(steps[side], batch)
            if r >= warmup:
                times[side].append(dt)
    tokens = batches[0]["input_ids"].numel()
    med = {side: statistics.median(t) for side, t in times.items()}
    low = {side: min(t) for side, t in times.items()}
    return {
        "ours_tokens_per_s": round(tokens / med["ours"], 1),
        "ref_tokens_per_s": round(tokens / med["ref"], 1),
        "ours_over_ref": round(med["ref"] / med["ours"], 3),
        "ours_over_ref_from_min": round(low["ref"] / low["ours"], 3),
        # Other processes on the machine stretch some steps: median well above min.
        "noisy": any(med[side] > NOISY * low[side] for side in med),
        "ours_step_s": {"median": round(med["ours"], 4), "min": round(low["ours"], 4),
                        "all": [round(t, 3) for t in times["ours"]]},
        "ref_step_s": {"median": round(med["ref"], 4), "min": round(low["ref"], 4),
                       "all": [round(t, 3) for t in times["ref"]]},
        "load_avg_1min_before_after": [load_before, load_avg()],
    }


# ------------------------------------------------------- process settings, separately
def solo(side: str, mode: str, settings: bool, batch_size: int, seq_len: int, vocab_size: int,
         rounds: int, warmup: int) -> dict:
    """One side alone in this (fresh) process, with or without the process settings."""
    applied = configure_process_for_speed() if settings else {}
    cfg, gen_cfg = configs(seq_len, vocab_size)
    batches = make_batches(min(4, warmup + rounds), batch_size, seq_len, vocab_size, seed=1)
    step = make_step(build(side, cfg, gen_cfg, seed=0), side, mode == "bf16")
    times = [timed(step, batches[r % len(batches)]) for r in range(warmup + rounds)][warmup:]
    return {"step_s": statistics.median(times), "all": times, "applied": applied}


def load_avg() -> float | None:
    """1-minute load average: other work on the machine shows up here (2 = both cores busy)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def settings_effect(args: argparse.Namespace, sides: list[str], mode: str) -> dict:
    """Each side alone in fresh subprocesses, without and with the process settings, in the
    order (off: every side, on: every side) x repeats, so that machine noise favours no one."""
    runs: dict[str, dict[str, list[float]]] = {s: {"off": [], "on": []} for s in sides}
    applied: dict = {}
    load_before = load_avg()
    for _ in range(args.settings_repeats):
        for state in ("off", "on"):
            for side in sides:
                cmd = [sys.executable, str(Path(__file__).resolve()), "--_solo", side,
                       "--_mode", mode, "--_settings", state, "--batch-size",
                       str(args.batch_size), "--seq-len", str(args.seq_len), "--vocab-size",
                       str(args.vocab_size), "--rounds", str(args.settings_rounds),
                       "--warmup", str(args.warmup)]
                res = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                                text=True).stdout)
                runs[side][state] += res["all"]
                applied = res["applied"] or applied
    tokens = args.batch_size * args.seq_len
    out: dict = {"mode": mode, "settings": applied,
                 "how": (f"each side alone in fresh subprocesses, {args.settings_repeats} x "
                         f"(off, on) x {args.settings_rounds} steps after {args.warmup} "
                         "warm-up; median step time (min in brackets)"),
                 "load_avg_1min_before_after": [load_before, load_avg()]}
    for side in sides:
        off, on = runs[side]["off"], runs[side]["on"]
        out[side] = {
            "tokens_per_s_without": round(tokens / statistics.median(off), 1),
            "tokens_per_s_with": round(tokens / statistics.median(on), 1),
            "speedup_from_settings": round(statistics.median(off) / statistics.median(on), 3),
            "step_s_without": f"{statistics.median(off):.3f} [{min(off):.3f}]",
            "step_s_with": f"{statistics.median(on):.3f} [{min(on):.3f}]"}
    return out


# --------------------------------------------------------------------- accuracy check
@torch.no_grad()
def evaluate(model: ElectraObjective, batches: list[Batch], seed: int) -> dict:
    """Loss and accuracies in fp32 eval mode, same masking/sampling randomness for all."""
    model.eval()
    torch.manual_seed(seed)
    counts: dict[str, float] = {}
    losses = []
    for batch in batches:
        out = model(batch)
        losses.append(float(out.loss))
        for k, v in out.counts.items():
            counts[k] = counts.get(k, 0.0) + float(v)
    m = metrics_from_counts(counts)
    return {"loss": round(statistics.mean(losses), 4), "gen_acc": round(m["gen_acc"], 4),
            "disc_acc": round(m["disc_acc"], 4)}


def accuracy_check(cfg: PretrainConfig, gen_cfg: ModelConfig, train: list[Batch],
                   held_out: list[Batch], steps: int) -> dict:
    """Train identical copies of our model for `steps` steps in fp32 and in bf16 autocast, with
    the same batches and the same seed per step (so masking, dropout and sampling draw the
    same random numbers); compare the training curves, the weights, and both models evaluated
    in fp32 on held-out batches."""
    init = build("ours", cfg, gen_cfg, seed=0)
    result: dict = {"how": (
        f"two copies of one initialisation trained {steps} AdamW steps (lr 1e-3) in fp32 and "
        f"in bf16 autocast on the same batches with the same per-step seed; both then "
        f"evaluated in fp32 eval mode on {len(held_out)} held-out batches (one seed). "
        "'comparable' = held-out |loss diff| <= 5% of the fp32 loss, |acc diffs| <= 0.02, and "
        "every training step's loss within 5%. 'weight_divergence' = |w_bf16 - w_fp32| / "
        "|w_fp32 - w_init| (0 = identical training, 1 = as far apart as the training moved).")}
    result["initial"] = evaluate(copy.deepcopy(init), held_out, seed=123)
    curves, models = {}, {}
    for mode in ("fp32", "bf16"):
        model = copy.deepcopy(init)
        step = make_step(model, "ours", mode == "bf16", lr=1e-3)
        curves[mode] = []
        for i in range(steps):
            torch.manual_seed(1000 + i)
            curves[mode].append(float(step(train[i % len(train)])["out"].loss.detach()))
        result[mode] = evaluate(model, held_out, seed=123)
        result[mode]["train_loss_first_last"] = [round(curves[mode][0], 4),
                                                 round(curves[mode][-1], 4)]
        models[mode] = model
    with torch.no_grad():
        params = [list(m.parameters()) for m in (models["fp32"], models["bf16"], init)]
        apart = sum(float((a - b).pow(2).sum()) for a, b, _ in zip(*params, strict=True)) ** 0.5
        moved = sum(float((a - c).pow(2).sum()) for a, _, c in zip(*params, strict=True)) ** 0.5
    rel = max(abs(a - b) / abs(a) for a, b in zip(curves["fp32"], curves["bf16"], strict=True))
    result["train_loss_max_rel_diff"] = round(rel, 5)
    result["weight_divergence"] = round(apart / max(moved, 1e-12), 4)
    f, b = result["fp32"], result["bf16"]
    result["comparable"] = bool(abs(f["loss"] - b["loss"]) <= 0.05 * f["loss"]
                                and abs(f["gen_acc"] - b["gen_acc"]) <= 0.02
                                and abs(f["disc_acc"] - b["disc_acc"]) <= 0.02
                                and rel <= 0.05)
    return result


# ----------------------------------------------------------------------------- CUDA
def device_side(side: str, cfg: PretrainConfig, gen_cfg: ModelConfig, batches: list[Batch],
                args: argparse.Namespace, bf16: bool, step_flops: float,
                device: torch.device) -> dict:
    """One side alone on the GPU: `args.warmup` untimed steps (compilation included), then
    `args.rounds` timed ones, each between two synchronisations (our loop syncs once per step
    too). Peak memory counts from this side's model construction on. (`device` is CUDA but
    for tests of this code on CPU.)"""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build_on(side, cfg, gen_cfg, device)
    step = make_step(model, "ref" if side == "ref" else "ours", bf16, device=device)
    times = []
    for r in range(args.warmup + args.rounds):
        sync()
        start = time.perf_counter()
        step(batches[r % len(batches)])
        sync()
        if r >= args.warmup:
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    del step, model
    med = statistics.median(times)
    batch_size, seq_len = batches[0]["input_ids"].shape
    mfu = step_flops / med / (args.peak_tflops * 1e12)
    return {"tokens_per_s": round(batch_size * seq_len / med, 1),
            "sequences_per_s": round(batch_size / med, 2),
            "mfu": float(f"{mfu:.4g}"), "mfu_backward_2x": float(f"{1.5 * mfu:.4g}"),
            "peak_memory_gib": None if peak is None else round(peak / 2**30, 3),
            "step_s": {"median": round(med, 5), "min": round(min(times), 5),
                       "all": [round(t, 5) for t in times]}}


def device_report(args: argparse.Namespace, presets: list[str], seq_lens: list[int],
                  modes: list[str], device: torch.device) -> dict:
    """Every preset x length x mode: ours, the reference (if transformers is installed) and,
    with --compile, ours under torch.compile."""
    try:
        import transformers
        ref_version, ref_skipped = transformers.__version__, None
    except ImportError:
        ref_version, ref_skipped = None, "transformers is not installed"
    sides = ["ours"] + (["ours_compiled"] if args.compile else []) + (
        [] if ref_skipped else ["ref"])
    report: dict = {
        "benchmark": "pretrain_throughput", "device": device.type,
        "env": {"torch": torch.__version__, "transformers": ref_version,
                "cuda": torch.version.cuda, "python": platform.python_version(),
                "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
        "settings": {
            "sides": sides, "rounds": args.rounds, "warmup": args.warmup,
            "padding": ("one row in eight shorter and padded (boolean key mask)" if
                        not args.no_padding else "none (no mask: flash attention may run)"),
            "peak_tflops": args.peak_tflops,
            "peak_tflops_is": ("the default, an H100 SXM's dense bf16 peak (989); pass "
                               "--peak-tflops for another GPU or fp32"
                               if args.peak_tflops == H100_BF16_DENSE_TFLOPS else "as given"),
            "mfu": ("training FLOPs per step from electra.flops (the dissertation's rules: "
                    "backward = forward, generator output only at masked positions) / step "
                    "time / peak; mfu_backward_2x charges the backward twice the forward, the "
                    "usual MFU convention (6N per token). The same model FLOPs for both sides: "
                    "the reference computes more (logits at every position) for the same step"),
            "step": "host batch -> device (pinned, non-blocking) + forward + backward + "
                    "AdamW (fused on CUDA, both sides)",
        },
        "runs": [],
    }
    if ref_skipped:
        report["skipped"] = {"ref": ref_skipped}
    for preset in presets:
        for seq_len in seq_lens:
            batch_size = args.batch_size or max(1, CUDA_TOKENS_PER_STEP // seq_len)
            cfg, gen_cfg = configs(seq_len, args.vocab_size, preset)
            batches = make_batches(4, batch_size, seq_len, args.vocab_size, seed=1,
                                   padded=not args.no_padding)
            step_flops = sum(objective_step_flops(cfg.model, cfg.objective, batch_size,
                                                  seq_len).values())
            for mode in modes:
                run: dict = {"preset": preset, "seq_len": seq_len, "batch_size": batch_size,
                             "mode": mode, "step_flops": step_flops}
                for side in sides:
                    run[side] = device_side(side, cfg, gen_cfg, batches, args, mode == "bf16",
                                            step_flops, device)
                if "ref" in run:
                    run["ours_over_ref"] = round(run["ours"]["tokens_per_s"]
                                                 / run["ref"]["tokens_per_s"], 3)
                report["runs"].append(run)
    return report


# ----------------------------------------------------------------------------- main
def to_json(report: dict) -> str:
    """Indented JSON with flat lists on one line, so step-time lists stay readable."""
    text = json.dumps(report, indent=1)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]",
                  lambda m: "[" + " ".join(m.group(1).split()) + "]", text)


def runnable_modes(modes: list[str]) -> tuple[list[str], dict[str, str]]:
    """The modes to run and what is skipped, with why: on a CPU without native bf16 the bf16
    mode and the fp32/bf16 accuracy check would take hours and measure a fallback kernel."""
    slow = slow_bf16_reason(torch.device("cpu"))
    if slow is None:
        return modes, {}
    why = f"{slow}; {ALLOW_SLOW_BF16}=1 runs it anyway"
    skipped = {"accuracy_check": f"compares fp32 with bf16, and {why}"}
    if "bf16" in modes:
        skipped["bf16"] = why
    return [m for m in modes if m != "bf16"], skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--batch-size", type=int,
                    help=f"default: 32 on CPU, {CUDA_TOKENS_PER_STEP} tokens / length on CUDA")
    ap.add_argument("--seq-len", default="128",
                    help="sequence length; on CUDA a comma-separated list (e.g. 128,512)")
    ap.add_argument("--presets", default="small,base", help="CUDA only: model presets")
    ap.add_argument("--vocab-size", type=int, default=30522)
    ap.add_argument("--rounds", type=int, default=10, help="timed rounds per mode")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds per mode")
    ap.add_argument("--modes", help="fp32 and/or bf16 (default: fp32,bf16 on CPU, bf16 on "
                    "CUDA)")
    ap.add_argument("--peak-tflops", type=float, default=H100_BF16_DENSE_TFLOPS,
                    help="CUDA: the GPU's peak for MFU (default: H100 SXM dense bf16)")
    ap.add_argument("--compile", action="store_true",
                    help="CUDA: also time our step with torch.compile'd layers")
    ap.add_argument("--no-padding", action="store_true",
                    help="CUDA: no padded rows (no attention mask: the flash kernel may run)")
    ap.add_argument("--accuracy-steps", type=int, default=20)
    ap.add_argument("--settings-rounds", type=int, default=4,
                    help="timed steps per subprocess when measuring the process settings")
    ap.add_argument("--settings-repeats", type=int, default=2)
    ap.add_argument("--no-process-settings", action="store_true",
                    help="run the in-process comparison without electra.train.speed")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    ap.add_argument("--_solo", choices=("ours", "ref"), help=argparse.SUPPRESS)
    ap.add_argument("--_mode", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--_settings", choices=("on", "off"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        seq_lens = [int(x) for x in args.seq_len.split(",") if x]
    except ValueError:
        ap.error(f"--seq-len takes integers, got {args.seq_len!r}")
    if not seq_lens or min(seq_lens) < 4:
        ap.error(f"--seq-len must be at least 4, got {args.seq_len!r}")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: CUDA is not available here")
        modes = [m for m in (args.modes or "bf16").split(",") if m]
        if not modes or not set(modes) <= {"fp32", "bf16"} or args.rounds < 1 or args.warmup < 0:
            ap.error("--modes takes fp32 and/or bf16, --rounds >= 1, --warmup >= 0")
        started = time.perf_counter()
        report = device_report(args, [p for p in args.presets.split(",") if p], seq_lens,
                               modes, torch.device("cuda"))
        report["wall_s"] = round(time.perf_counter() - started, 1)
        print(to_json(report))
        return
    if len(seq_lens) != 1:
        ap.error("--seq-len: one length on CPU (a list is for --device cuda)")
    args.seq_len = seq_lens[0]
    args.batch_size = args.batch_size or 32
    args.modes = args.modes or "fp32,bf16"
    if args._solo:
        print(json.dumps(solo(args._solo, args._mode, args._settings == "on", args.batch_size,
                              args.seq_len, args.vocab_size, args.rounds, args.warmup)))
        return
    if args.quick:
        args.batch_size, args.seq_len, args.rounds, args.warmup = 2, 32, 2, 1
        args.accuracy_steps, args.settings_rounds, args.settings_repeats = 2, 1, 1
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"fp32", "bf16"}:
        ap.error(f"--modes takes fp32 and/or bf16, got {args.modes!r}")
    for name in ("rounds", "settings_rounds", "settings_repeats", "accuracy_steps"):
        if getattr(args, name) < 1:  # each is a median (or a curve) over that many
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {args.warmup}")
    modes, skipped = runnable_modes(modes)

    started = time.perf_counter()
    applied = {} if args.no_process_settings else configure_process_for_speed()
    cfg, gen_cfg = configs(args.seq_len, args.vocab_size)
    batches = make_batches(4, args.batch_size, args.seq_len, args.vocab_size, seed=1)

    import transformers
    report: dict = {
        "benchmark": "pretrain_throughput",
        "settings": {
            "model": "ELECTRA-Small (preset 'small'), generator 1/4 width",
            "discriminator": {k: getattr(cfg.model, k) for k in (
                "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size", "hidden_dropout_prob",
                "attention_probs_dropout_prob")},
            "generator": {k: getattr(gen_cfg, k) for k in (
                "hidden_size", "num_attention_heads", "intermediate_size")},
            "batch_size": args.batch_size, "seq_len": args.seq_len,
            "tokens_per_step": args.batch_size * args.seq_len,
            "tokens_counted": "batch_size * seq_len positions (padding included), same for both",
            "padded_rows_per_batch": int(sum((b["attention_mask"] == 0).any(1).sum()
                                   for b in batches)) / len(batches),
            "rounds": args.rounds, "warmup": args.warmup, "quick": args.quick,
            "step": "objective forward + backward + AdamW step (lr 5e-4), train mode",
            "bf16": "torch.autocast('cpu', dtype=torch.bfloat16) around the forward",
            "reference": "transformers ElectraForMaskedLM + ElectraForPreTraining, shared "
                         "embeddings module, logits over all positions, multinomial sampling",
        },
        "env": {"torch": torch.__version__, "transformers": transformers.__version__,
                "python": platform.python_version(), "threads": torch.get_num_threads(),
                "cpu": cpu_name(),
                "process_settings_in_comparison": applied or "none"},
        "modes": {},
    }
    if skipped:
        report["skipped"] = skipped
    ref_probe = build("ref", cfg, gen_cfg, seed=0)
    report["settings"]["ref_attn_implementation"] = ref_probe.attn_implementation
    del ref_probe
    probe, p = torch.zeros(1), cfg.model.attention_probs_dropout_prob
    chosen = {"fp32_train": resolve_attention_impl("auto", probe, p)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chosen["bf16_train"] = resolve_attention_impl("auto", probe, p)
    report["settings"]["ours_attention"] = chosen

    for mode in modes:
        report["modes"][mode] = compare(mode, batches, cfg, gen_cfg, args.rounds, args.warmup)
    m = report["modes"]
    ratios: dict = {}
    if "fp32" in m:
        ratios["ours_fp32_vs_ref_fp32"] = m["fp32"]["ours_over_ref"]
        ratios["ours_fp32_vs_ref_fp32_from_min"] = m["fp32"]["ours_over_ref_from_min"]
    if "bf16" in m:
        ratios["ours_bf16_vs_ref_bf16"] = m["bf16"]["ours_over_ref"]
    if "fp32" in m and "bf16" in m:
        ratios["ours_bf16_vs_ref_fp32"] = round(
            m["bf16"]["ours_tokens_per_s"] / m["fp32"]["ref_tokens_per_s"], 3)
        ratios["ours_bf16_vs_ref_fp32_from_min"] = round(
            m["fp32"]["ref_step_s"]["min"] / m["bf16"]["ours_step_s"]["min"], 3)
        ratios["ours_bf16_vs_ours_fp32"] = round(
            m["bf16"]["ours_tokens_per_s"] / m["fp32"]["ours_tokens_per_s"], 3)
    report["ratios"] = ratios
    report["targets"] = {  # null: that mode was not run
        f"{name}>={goal}": (ratios[name] >= goal) if name in ratios else None
        for name, goal in (("ours_fp32_vs_ref_fp32", 1.5), ("ours_bf16_vs_ref_fp32", 2.5))}

    effect = settings_effect(args, ["ref"] if args.quick else ["ref", "ours"], "fp32")
    report["process_settings_effect"] = effect
    if "ours" in effect:
        # A user who runs the reference as usual gets no such settings; our trainer applies them.
        report["ratios"]["solo_ours_fp32_with_settings_vs_ref_fp32_without"] = round(
            effect["ours"]["tokens_per_s_with"] / effect["ref"]["tokens_per_s_without"], 3)
    report["notes"] = [
        "ratios ours_*_vs_ref_* are from the in-process comparison: both sides under the same "
        "process settings (env.process_settings_in_comparison), same batches, alternating.",
        "solo_* ratio: from process_settings_effect (each side alone in its own subprocess), "
        "ours with electra.train.speed settings vs the reference without them.",
        "noisy / load_avg_1min_before_after: other processes sharing the cores stretch some "
        "steps (this benchmark alone keeps the load near its thread count); when 'noisy', the "
        "medians mix disturbed steps, ours_over_ref_from_min is the ratio of the fastest "
        "steps, and a re-run on a quiet machine is the better number.",
        "the reference keeps transformers' default attention (ref_attn_implementation); in bf16 "
        "on this CPU SDPA is slow, which is why ours_bf16_vs_ref_bf16 is large; the headline "
        "bf16 ratio is against the reference in fp32.",
    ]

    held_out = make_batches(2, args.batch_size, args.seq_len, args.vocab_size, seed=2)
    report["accuracy_check"] = ({"skipped": True} if "accuracy_check" in skipped else
                                accuracy_check(cfg, gen_cfg, batches, held_out,
                                               args.accuracy_steps))
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(to_json(report))


if __name__ == "__main__":
    main()

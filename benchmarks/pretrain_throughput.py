"""Training tokens/s of our ELECTRA step against the common `transformers` recipe (on CUDA,
also against transformers' BERT and ModernBERT masked LMs).

One training step = objective forward + backward + AdamW step, train mode, dropout 0.1. Ours is
`ElectraObjective` (masked-only generator head, fast dropout, eager/SDPA choice per dtype).
The reference is how ELECTRA pre-training is usually written with `transformers`: an
`ElectraForMaskedLM` generator (1/4 width) and an `ElectraForPreTraining` discriminator sharing
one embeddings module, generator logits and cross-entropy over all positions, 15% masking with
85% [MASK], sampling from the softmax at masked positions, discriminator loss weight 50.

Both run in one process on the same batches, alternating step by step (the order flips every
round) after a warm-up, so machine noise hits both alike; medians are reported. The process
settings of `electra.runtime.speed` are process-wide, so the in-process comparison runs both
under the same settings, and their effect on each side is measured separately, in fresh
subprocesses with and without them. Prints one JSON object.

    python -m benchmarks.pretrain_throughput            # default, ~8-9 min on 2 CPU cores
    python -m benchmarks.pretrain_throughput --quick    # smoke run, tiny sizes
    python -m benchmarks.pretrain_throughput --device cuda --presets small,base --seq-len 128,512
    python -m benchmarks.pretrain_throughput --device cuda --presets small,base \
        --seq-len 128,512 --compile --compile-step --peers      # every side (gpu_check's set)

On a CPU without native bf16 (AVX2 only) the bf16 modes and the fp32/bf16 accuracy check are
skipped, and the JSON says why under "skipped" (ELECTRA_ALLOW_SLOW_BF16=1 runs them anyway).

With `--device cuda` (bf16 autocast by default) each preset and length is timed side by side,
one after the other on the same GPU (so each side's peak memory is its own). The sides: "ours"
(our eager step), "ref" (the recipe above, when `transformers` is installed), "ours_compiled"
(every layer under torch.compile, `--compile`), "ours_step" (the whole step, forward to AdamW,
as one compiled graph replayed as a CUDA graph: `electra.pretraining.step.WholeStep`,
`--compile-step`), and with `--peers` transformers' BERT-Base ("bert_mlm") and ModernBERT-base
("modernbert_mlm") masked LMs at the same tokens per step. Each side reports tokens/s,
sequences/s, peak memory, model FLOPs utilisation in two conventions (training FLOPs per second
over `--peak-tflops`, default 989, an H100 SXM's dense bf16 peak: "mfu" counts the backward as
the forward, as `electra.flops` does, "mfu_backward_2x" twice, the usual 6N) and, from three
profiled steps, the share of the time the GPU is busy and the kernels and launches per step.
Each run adds "vs_ours" (our sides' tokens/s over the others') and "matmul_ceiling" (torch.matmul
at the step's own shapes, in TFLOP/s, and their FLOP-weighted harmonic mean: what a step of
these matmuls alone would reach). A side that fails records {"error": ...}; the others still
run. The same code runs on CPU at toy sizes in the tests (`benchmarks.gpu_check --cpu-dry-run`).
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
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
from electra.objectives.generators import generator_config
from electra.objectives.masking import SpecialIds, max_predictions
from electra.pretraining.loop import _window_values
from electra.pretraining.step import WholeStep
from electra.runtime.optim import adamw_impl
from electra.runtime.speed import configure_process_for_speed

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
def mlm_masking(input_ids: torch.Tensor, mask_prob: float, mask_token_prob: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption as `transformers` recipes write it: each non-special token is a
    target with probability `mask_prob`, and `mask_token_prob` of the targets read [MASK] in
    the input (the others stay). Returns the targets and the corrupted input ids."""
    special = ((input_ids == SPECIAL.cls) | (input_ids == SPECIAL.sep)
               | (input_ids == SPECIAL.pad))
    device = input_ids.device
    probs = torch.full(input_ids.shape, mask_prob, device=device).masked_fill(special, 0.0)
    targets = torch.bernoulli(probs).bool()
    to_mask = targets & torch.bernoulli(torch.full(input_ids.shape, mask_token_prob,
                                                   device=device)).bool()
    return targets, input_ids.masked_fill(to_mask, SPECIAL.mask)


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
        masked, gen_input = mlm_masking(input_ids, self.mask_prob, self.mask_token_prob)
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


# ---------------------------------------------------------------------------- peers
@dataclass(frozen=True)
class Peer:
    """A `transformers` masked LM timed beside ours at the same tokens per step."""

    model_class: str  # the transformers classes
    config_class: str
    shape: dict  # the released base model's shape
    tiny: dict  # its stand-in for the `tiny` preset (the CPU dry run)
    fixed: dict = field(default_factory=dict)  # other config fields, at the real and tiny shape
    token_types: bool = True  # whether it takes token_type_ids


PEERS = {
    "bert_mlm": Peer(
        "BertForMaskedLM", "BertConfig",
        shape={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
               "intermediate_size": 3072},
        tiny={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 256}),
    "modernbert_mlm": Peer(
        "ModernBertForMaskedLM", "ModernBertConfig",
        shape={"hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
               "intermediate_size": 1152},
        tiny={"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
              "intermediate_size": 96},
        fixed={"global_attn_every_n_layers": 3, "local_attention": 128,
               "bos_token_id": SPECIAL.cls, "cls_token_id": SPECIAL.cls,
               "eos_token_id": SPECIAL.sep, "sep_token_id": SPECIAL.sep,
               # eager, as every other side: transformers 4.x compiles its MLP and head by
               # default (later versions ignore the field)
               "reference_compile": False},
        token_types=False),
}


class MaskedLMPeer(nn.Module):
    """A `transformers` masked LM trained as its recipes train it: `mlm_masking`'s targets
    are the labels, -100 elsewhere; `batch -> loss`."""

    def __init__(self, model: nn.Module, token_types: bool, mask_prob: float = 0.15,
                 mask_token_prob: float = 0.85):
        super().__init__()
        self.model, self.token_types = model, token_types
        self.mask_prob, self.mask_token_prob = mask_prob, mask_token_prob

    @property
    def attn_implementation(self) -> str:
        return str(self.model.config._attn_implementation)

    def step_flops(self, batch_size: int, seq_len: int) -> float:
        """Training FLOPs of one step with the backward counted as the forward, as
        `electra.flops` counts ours: 2 x (2N + 4LHS) per token (N the parameters outside the
        embeddings, L layers of width H attending over S positions): 2/3 of the usual
        6N + 12LHS. The MLM head's vocabulary projection is tied to the embeddings, so it is
        not counted; ModernBERT's local layers are counted as global (SDPA masks the window,
        it computes every position)."""
        cfg = self.model.config
        n = self.model.num_parameters(exclude_embeddings=True)
        per_token = 2 * n + 4 * cfg.num_hidden_layers * cfg.hidden_size * seq_len
        return 2.0 * per_token * batch_size * seq_len

    def forward(self, batch: Batch) -> torch.Tensor:
        input_ids = batch["input_ids"]
        targets, inputs = mlm_masking(input_ids, self.mask_prob, self.mask_token_prob)
        extra = {"token_type_ids": batch["token_type_ids"]} if self.token_types else {}
        return self.model(input_ids=inputs, attention_mask=batch["attention_mask"],
                          labels=input_ids.masked_fill(~targets, -100), **extra).loss


def build_peer(name: str, cfg: PretrainConfig, tiny: bool) -> MaskedLMPeer:
    """PEERS[name] with the run's vocabulary and SDPA attention, at the real shape or the tiny
    one."""
    import transformers

    peer = PEERS[name]
    config = getattr(transformers, peer.config_class)(
        vocab_size=cfg.model.vocab_size, pad_token_id=SPECIAL.pad,
        max_position_embeddings=cfg.model.max_position_embeddings, attn_implementation="sdpa",
        **(peer.tiny if tiny else peer.shape), **peer.fixed)
    return MaskedLMPeer(getattr(transformers, peer.model_class)(config), peer.token_types,
                        cfg.objective.mask_prob, cfg.objective.mask_token_prob)


def unavailable(side: str) -> str | None:
    """Why `side` cannot run here (None: it can): the reference and the peers need
    `transformers` and their classes in it."""
    needs = {"ref": "ElectraForPreTraining",
             **{name: peer.model_class for name, peer in PEERS.items()}}.get(side)
    if needs is None:
        return None
    try:
        import transformers
    except ImportError:
        return "transformers is not installed"
    if not hasattr(transformers, needs):
        return f"transformers {transformers.__version__} has no {needs}"
    return None


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


def build_on(side: str, cfg: PretrainConfig, gen_cfg: ModelConfig, device: torch.device,
             tiny_peers: bool = False) -> nn.Module:
    """The model of a timed side on `device`: "ours" (also what "ours_step" trains),
    "ours_compiled" (every layer under torch.compile, `--compile`), "ref", or a peer of PEERS
    (its tiny shape with `tiny_peers`)."""
    if side in PEERS:
        torch.manual_seed(0)
        return build_peer(side, cfg, tiny_peers).to(device)
    model = build("ref" if side == "ref" else "ours", cfg, gen_cfg, seed=0).to(device)
    if side == "ours_compiled":
        torch._dynamo.reset()  # graphs of earlier presets and lengths neither help nor count
        compile_layers(model)
    return model


def adamw(model: nn.Module, lr: float) -> torch.optim.AdamW:
    """Every side's optimizer: fused on CUDA (`adamw_impl`)."""
    params = list(model.parameters())
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, eps=1e-6, **adamw_impl(params))


def make_step(model: nn.Module, side: str, bf16: bool, lr: float = 5e-4,
              device: torch.device | None = None) -> Callable[[Batch], dict]:
    """One optimiser step on a host batch, as the training loop takes it (copied to `device`,
    pinned on CUDA; for our objective, padding decided on the host); returns the model's output
    (ours: the objective's, for metrics; the others': the loss). `side`: "ours" (or
    "ours_compiled") for our objective, anything else for a model whose forward returns its
    loss (the reference, the peers)."""
    device = device or torch.device("cpu")
    opt = adamw(model, lr)
    model.train()
    ours = side in ("ours", "ours_compiled")

    def step(batch: Batch) -> dict:
        padded = mask_has_padding(batch["attention_mask"]) if ours else None
        batch = to_device(batch, device)
        ctx = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
        with ctx, known_padding(padded):
            out = model(batch)
        (out.loss if ours else out).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"out": out}

    return step


def make_whole_step(model: nn.Module, bf16: bool, compile: bool, lr: float = 5e-4,
                    device: torch.device | None = None) -> Callable[[Batch], dict]:
    """Our step as `train.compile_step` runs it: one `WholeStep` (forward, backward, clipping
    at 1.0, AdamW guarded on the device, in one function; with `compile`, one compiled graph,
    on CUDA replayed as a CUDA graph) on the host batch copied to `device`, padding decided on
    the host. Returns the `StepResult`."""
    device = device or torch.device("cpu")
    model.train()
    whole = WholeStep(model, adamw(model, lr), max_grad_norm=1.0,
                      precision="bf16" if bf16 else "fp32",
                      window_values=_window_values, compile=compile, device=device)

    def step(batch: Batch) -> dict:
        padded = mask_has_padding(batch["attention_mask"])
        return {"out": whole([to_device(batch, device)], padded)}

    return step


def sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Callable[[Batch], dict], batch: Batch, device: torch.device | None = None
          ) -> float:
    """Seconds of one step; on CUDA between two synchronisations (our loop syncs once per step
    too)."""
    sync(device)
    start = time.perf_counter()
    step(batch)
    sync(device)
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
OURS = ("ours", "ours_compiled", "ours_step")  # our sides, in the order they are timed
PROFILED_STEPS = 3
# The host's calls that start work on the GPU: one per kernel, one per CUDA graph replay.
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaGraphLaunch", "cuGraphLaunch")


def recorded(fn: Callable[..., dict | None], *args: object) -> dict | None:
    """`fn(*args)`, or {"error": ...} where it raises: one failing measurement (a compile
    error, an out-of-memory) leaves the others to run."""
    try:
        return fn(*args)
    except Exception as e:  # recorded in the JSON; the run goes on
        return {"error": f"{type(e).__name__}: {e}"[:2000]}


def compiles(side: str, device: torch.device) -> bool:
    """Whether `side` runs compiled code: our compiled layers anywhere, our whole step on CUDA
    (elsewhere it runs eagerly: the code path the CPU tests cover)."""
    return side == "ours_compiled" or (side == "ours_step" and device.type == "cuda")


@contextmanager
def own_compiler_state(compiled: bool) -> Iterator[None]:
    """A compiled side starts from an empty compiler cache (graphs of earlier sides and lengths
    neither help nor count) and leaves the sides after it neither its graphs, nor its CUDA
    graphs' memory pool, nor the process-wide flag the whole step sets."""
    if not compiled:
        yield
        return
    import torch._dynamo

    torch._dynamo.reset()
    saved = getattr(torch._dynamo.config, "trace_autograd_ops", None)
    try:
        yield
    finally:
        if saved is not None:
            torch._dynamo.config.trace_autograd_ops = saved
        torch._dynamo.reset()


def side_step(side: str, model: nn.Module, bf16: bool, device: torch.device
              ) -> Callable[[Batch], dict]:
    if side == "ours_step":
        return make_whole_step(model, bf16, compile=compiles(side, device), device=device)
    return make_step(model, side, bf16, device=device)


def speed(times: list[float], batch_size: int, seq_len: int, step_flops: float,
          peak_tflops: float) -> dict:
    """Median rates of a side's timed steps, and its MFU in both conventions: "mfu" with the
    backward counted as the forward (the dissertation's), "mfu_backward_2x" with it counted
    twice (the usual 6N)."""
    med = statistics.median(times)
    mfu = step_flops / med / (peak_tflops * 1e12)
    return {"tokens_per_s": round(batch_size * seq_len / med, 1),
            "sequences_per_s": round(batch_size / med, 2),
            "mfu": float(f"{mfu:.4g}"), "mfu_backward_2x": float(f"{1.5 * mfu:.4g}"),
            "step_s": {"median": round(med, 5), "min": round(min(times), 5),
                       "all": [round(t, 5) for t in times]}}


def gpu_busy(step: Callable[[Batch], dict], batch: Batch, device: torch.device,
             step_s: float) -> dict | None:
    """PROFILED_STEPS more steps under torch.profiler: the share of their wall time the GPU
    spent in kernels ("fraction"; the profiler slows the host, so also the share of the
    unprofiled median step, "fraction_of_timed_step"), kernels per step, and the host's launch
    calls per step (a CUDA graph's replay is one). None off CUDA."""
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(PROFILED_STEPS):
            step(batch)
        sync(device)
        wall = time.perf_counter() - start
    events = prof.events()
    kernels = [e for e in events if e.device_type == DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    launches = [e for e in events if e.device_type == DeviceType.CPU
                and e.name in LAUNCH_CALLS]
    kernel_s = sum(e.device_time_total for e in kernels) / 1e6
    return {"fraction": round(kernel_s / wall, 4),
            "fraction_of_timed_step": round(kernel_s / PROFILED_STEPS / step_s, 4),
            "kernel_ms_per_step": round(1e3 * kernel_s / PROFILED_STEPS, 3),
            "kernels_per_step": round(len(kernels) / PROFILED_STEPS, 1),
            "launch_calls_per_step": round(len(launches) / PROFILED_STEPS, 1)}


def device_side(side: str, cfg: PretrainConfig, gen_cfg: ModelConfig, batches: list[Batch],
                args: argparse.Namespace, bf16: bool, step_flops: float,
                device: torch.device, tiny_peers: bool = False) -> dict:
    """One side alone on the GPU: `args.warmup` untimed steps (compilation included), then
    `args.rounds` timed ones (`timed`), then the profiled ones (`gpu_busy`). Peak memory counts
    from this side's model construction on. A side that raises is recorded as {"error": ...}.
    (`device` is CUDA but for tests of this code on CPU.)"""
    def run() -> dict:
        with own_compiler_state(compiles(side, device)):
            return time_side(side, cfg, gen_cfg, batches, args, bf16, step_flops, device,
                             tiny_peers)

    result = recorded(run)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def time_side(side: str, cfg: PretrainConfig, gen_cfg: ModelConfig, batches: list[Batch],
              args: argparse.Namespace, bf16: bool, step_flops: float, device: torch.device,
              tiny_peers: bool) -> dict:
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    batch_size, seq_len = batches[0]["input_ids"].shape
    model = build_on(side, cfg, gen_cfg, device, tiny_peers)
    step = side_step(side, model, bf16, device)
    times = [timed(step, batches[r % len(batches)], device)
             for r in range(args.warmup + args.rounds)][args.warmup:]
    peak = torch.cuda.max_memory_allocated() if cuda else None
    about: dict = {}
    if side == "ours_step":
        about["compiled"] = compiles(side, device)
    if isinstance(model, MaskedLMPeer):
        step_flops = model.step_flops(batch_size, seq_len)
        about = {"step_flops": step_flops,
                 "params_non_embedding": model.model.num_parameters(exclude_embeddings=True),
                 "attn_implementation": model.attn_implementation}
    result = {**speed(times, batch_size, seq_len, step_flops, args.peak_tflops), **about,
              "peak_memory_gib": None if peak is None else round(peak / 2**30, 3)}
    result["gpu_busy"] = recorded(gpu_busy, step, batches[0], device,
                                  result["step_s"]["median"])
    return result


def step_matmuls(cfg: PretrainConfig, batch_size: int, seq_len: int
                 ) -> dict[str, tuple[int, int, int, int]]:
    """The step's matmuls as (M, K, N, times per forward): per layer of the discriminator and
    the generator over every token, QKV, attention output, FFN in and out; once, the
    generator's vocabulary projection at its masked slots (`max_predictions` per row)."""
    tokens = batch_size * seq_len
    shapes = {}
    gen = generator_config(cfg.model, cfg.objective)
    for name, m in (("disc", cfg.model), ("gen", gen)):
        h, inner, layers = m.hidden_size, m.intermediate_size, m.num_hidden_layers
        shapes |= {f"{name}_qkv": (tokens, h, 3 * h, layers),
                   f"{name}_attn_out": (tokens, h, h, layers),
                   f"{name}_ffn_in": (tokens, h, inner, layers),
                   f"{name}_ffn_out": (tokens, inner, h, layers)}
    slots = batch_size * max_predictions(seq_len, cfg.objective.mask_prob)
    shapes["gen_vocab"] = (slots, gen.embedding_size, gen.vocab_size, 1)
    return shapes


def matmul_tflops(m: int, k: int, n: int, dtype: torch.dtype, device: torch.device,
                  reps: int) -> float:
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    for _ in range(2):
        torch.matmul(a, b)
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    sync(device)
    return 2.0 * m * k * n * reps / (time.perf_counter() - start) / 1e12


def matmul_ceiling(cfg: PretrainConfig, batch_size: int, seq_len: int, dtype: torch.dtype,
                   device: torch.device, peak_tflops: float) -> dict:
    """torch.matmul at the step's own shapes (`step_matmuls`) in the run's dtype on its device:
    TFLOP/s per shape, and the ceiling of a step made of these matmuls alone, their harmonic
    mean weighted by each shape's FLOPs in the forward (total FLOPs / total time at the
    measured speeds). Backward shapes (the transposes) are not timed."""
    reps = 20 if device.type == "cuda" else 2
    shapes, flops, seconds = {}, 0.0, 0.0
    for name, (m, k, n, count) in step_matmuls(cfg, batch_size, seq_len).items():
        tflops = matmul_tflops(m, k, n, dtype, device, reps)
        flops += 2.0 * m * k * n * count
        seconds += 2.0 * m * k * n * count / (tflops * 1e12)
        shapes[name] = {"mkn": [m, k, n], "per_forward": count,
                        "tflops": float(f"{tflops:.4g}")}
    ceiling = flops / seconds / 1e12
    return {"dtype": str(dtype).removeprefix("torch."), "shapes": shapes,
            "ceiling_tflops": float(f"{ceiling:.4g}"),
            "ceiling_over_peak": float(f"{ceiling / peak_tflops:.4g}")}


def vs_ours(run: dict, sides: list[str]) -> dict:
    """tokens/s of each of our sides over each other side timed: the peers, the reference, and
    our sides listed before it (ours_step over ours and ours_compiled)."""
    rate = {s: run[s]["tokens_per_s"] for s in sides if "tokens_per_s" in (run.get(s) or {})}
    return {f"{a}_over_{b}": round(rate[a] / rate[b], 3)
            for a in OURS if a in rate for b in sides
            if b in rate and b != a and (b not in OURS or OURS.index(b) < OURS.index(a))}


def device_settings(args: argparse.Namespace, sides: list[str]) -> dict:
    """What the report measured, in words (the JSON's "settings")."""
    settings = {
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
                "usual MFU convention (6N per token). The same model FLOPs for all our sides "
                "and the reference: the reference computes more (logits at every position) "
                "for the same step"),
        "step": "host batch -> device (pinned, non-blocking) + forward + backward + "
                "AdamW (fused on CUDA; ours_step's is written out in its graph)",
        "gpu_busy": (f"{PROFILED_STEPS} steps after the timed ones under torch.profiler (CPU "
                     "+ CUDA): kernel time / their wall time, kernels and host launch calls "
                     "per step; null off CUDA"),
        "vs_ours": "tokens/s of one of our sides over another side's, same run",
    }
    if "ours_step" in sides:
        settings["ours_step"] = (
            "our objective through electra.pretraining.step.WholeStep: forward, backward "
            "(torch.autograd.grad), clipping at 1.0 and AdamW guarded on the device as one "
            "function; torch.compile(fullgraph=True, mode='reduce-overhead') on CUDA (one CUDA "
            "graph per step), eager elsewhere (its 'compiled' says which)")
    if any(side in PEERS for side in sides):
        settings["peers"] = {
            "how": ("transformers masked LMs at the run's tokens per step and vocabulary, "
                    "SDPA attention, the same step as the reference (bf16 autocast, fused "
                    "AdamW on CUDA), 15% of the non-special tokens as labels (85% of them "
                    "[MASK]), -100 elsewhere; at the tiny shape for the 'tiny' preset"),
            "mfu": ("their own step_flops: 2 x (2N + 4LHS) per token with the backward "
                    "counted as the forward (mfu), 6N + 12LHS per token (mfu_backward_2x); "
                    "N = parameters outside the embeddings, L layers, width H, length S"),
            **{name: {"class": peer.model_class, "shape": {**peer.shape, **peer.fixed},
                      "tiny": peer.tiny} for name, peer in PEERS.items() if name in sides}}
    return settings


def device_report(args: argparse.Namespace, presets: list[str], seq_lens: list[int],
                  modes: list[str], device: torch.device) -> dict:
    """Every preset x length x mode: our eager step, the reference (if transformers is
    installed), with `args.compile` our compiled layers, with `args.compile_step` our whole step
    as one graph, with `args.peers` the transformers masked LMs; the matmul ceiling at the
    step's shapes; and the ratios of our sides to the others."""
    requested = (["ours"] + (["ours_compiled"] if args.compile else [])
                 + (["ours_step"] if args.compile_step else []) + ["ref"]
                 + (list(PEERS) if args.peers else []))
    skipped = {side: why for side in requested if (why := unavailable(side))}
    sides = [side for side in requested if side not in skipped]
    try:
        import transformers
        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
    report: dict = {
        "benchmark": "pretrain_throughput", "device": device.type,
        "env": {"torch": torch.__version__, "transformers": hf_version,
                "cuda": torch.version.cuda, "python": platform.python_version(),
                "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
        "settings": device_settings(args, sides),
        "runs": [],
    }
    if skipped:
        report["skipped"] = skipped
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
                                            step_flops, device, tiny_peers=preset == "tiny")
                run |= {side: {"skipped": why} for side, why in skipped.items()}
                run["vs_ours"] = vs_ours(run, sides)
                if "ours_over_ref" in run["vs_ours"]:
                    run["ours_over_ref"] = run["vs_ours"]["ours_over_ref"]
                dtype = torch.bfloat16 if mode == "bf16" else torch.float32
                run["matmul_ceiling"] = recorded(matmul_ceiling, cfg, batch_size, seq_len,
                                                 dtype, device, args.peak_tflops)
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
                    help="CUDA: the GPU's peak for MFU and the matmul ceiling's share of it "
                    "(default: H100 SXM dense bf16, 989)")
    ap.add_argument("--compile", action="store_true",
                    help="CUDA: also time our step with torch.compile'd layers (ours_compiled)")
    ap.add_argument("--compile-step", action="store_true",
                    help="CUDA: also time our whole step (forward, backward, clipping, AdamW) "
                    "as one compiled function replayed as a CUDA graph (ours_step, "
                    "electra.pretraining.step.WholeStep)")
    ap.add_argument("--peers", action="store_true",
                    help="CUDA: also time transformers' BERT-Base and ModernBERT-base masked "
                    "LMs at the same tokens per step (bert_mlm, modernbert_mlm)")
    ap.add_argument("--no-padding", action="store_true",
                    help="CUDA: no padded rows (no attention mask: the flash kernel may run)")
    ap.add_argument("--accuracy-steps", type=int, default=20)
    ap.add_argument("--settings-rounds", type=int, default=4,
                    help="timed steps per subprocess when measuring the process settings")
    ap.add_argument("--settings-repeats", type=int, default=2)
    ap.add_argument("--no-process-settings", action="store_true",
                    help="run the in-process comparison without electra.runtime.speed")
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
        "ours with electra.runtime.speed settings vs the reference without them.",
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

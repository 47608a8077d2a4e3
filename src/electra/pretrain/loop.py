"""The pre-training loop: `losses = objective(batch)`, AdamW, checkpoints, metrics, export.

One loop for one process or many (`torchrun`): `train.batch_size` is the number of examples
per optimizer step over all processes and accumulation steps, so hyper-parameters and FLOPs
do not depend on the hardware.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from electra.config import PretrainConfig
from electra.data.dataset import PretrainingDataset, iterate_batches
from electra.device import bf16_note, default_bf16, to_device
from electra.errors import ElectraError
from electra.model.encoder import compile_layers, known_padding, mask_has_padding
from electra.model.hf import save_pretrained
from electra.objectives import (
    ObjectiveContext,
    SpecialIds,
    build_objective,
    metrics_from_counts,
    objective_step_flops,
)
from electra.pretrain.heldout import HeldoutProbe
from electra.pretrain.init_from import InitSource, check_vocabulary, load_weights
from electra.pretrain.step import WholeStep
from electra.runtime import checkpoint
from electra.runtime.distributed import (
    DistInfo,
    barrier,
    cleanup,
    init_distributed,
)
from electra.runtime.metrics_log import MetricsLogger, require_tensorboard
from electra.runtime.optim import build_optimizer, build_scheduler
from electra.runtime.skeleton import LogWindow, StepLoop, Update
from electra.tokenizer import load_tokenizer, special_token_ids

RUN_CONFIG = "config.json"


def special_ids_for(data_dir: Path) -> SpecialIds:
    ids = special_token_ids(load_tokenizer(data_dir / "tokenizer"))
    return SpecialIds(pad=ids["pad"], unk=ids["unk"], cls=ids["cls"], sep=ids["sep"],
                      mask=ids["mask"])


def _check_run_dir(out: Path, cfg: PretrainConfig, data: PretrainingDataset, data_dir: Path,
                   resume: bool) -> None:
    """A new run needs an empty OUT; a resumed one needs the same model and vocabulary."""
    saved_path = out / RUN_CONFIG
    if not resume:
        if saved_path.exists():
            raise ElectraError(f"{out} already holds a run; pass --resume to continue it or "
                               "choose another --out")
        return
    if not saved_path.exists():
        raise ElectraError(f"{out}: nothing to resume (no {RUN_CONFIG})")
    try:
        saved = json.loads(saved_path.read_text())
        saved_model = saved["config"]["model"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        raise ElectraError(f"{saved_path}: unreadable run configuration; cannot resume") from None
    if saved.get("vocab_checksum") != data.vocab_checksum:
        raise ElectraError(f"{data_dir}: built with another vocabulary than the run in {out} "
                           "(vocab checksum differs)")
    if saved_model != cfg.to_dict()["model"]:
        raise ElectraError(f"{out}: the model configuration differs from the run being resumed")


def pretrain(cfg: PretrainConfig, data_dir: str | Path, out_dir: str | Path,
             resume: bool = False, device: str = "auto", show_progress: bool = True,
             tensorboard: bool = False, init: InitSource | None = None) -> dict[str, Any]:
    """Pre-train, checkpoint, export OUT/final/{discriminator,generator}; return a summary.
    `tensorboard`: also write the metrics as TensorBoard scalars under OUT/tensorboard/.
    `init`: start from these weights (`electra.pretrain.init_from`; `cfg.model` must already be
    the checkpoint's, see `adopt_checkpoint`) instead of random ones.

    On SIGTERM or SIGUSR1 the current step is finished, a checkpoint written and `Preempted`
    raised (the CLI exits with EXIT_PREEMPTED); `resume=True` then continues exactly."""
    from electra.runtime.speed import configure_process_for_speed

    if tensorboard:
        require_tensorboard()
    configure_process_for_speed()
    info = init_distributed(device, bf16=bool(cfg.train.bf16))
    if cfg.train.bf16 is None:
        cfg.train.bf16 = default_bf16(info.device)
    try:
        return _pretrain(cfg, Path(data_dir), Path(out_dir), resume, info, show_progress,
                         tensorboard, init)
    finally:
        cleanup(info)


@dataclass
class _Run:
    """What set-up hands to the steps and the export: one run's data, networks and state."""

    cfg: PretrainConfig
    data_dir: Path
    out: Path
    info: DistInfo
    data: PretrainingDataset
    context: ObjectiveContext
    objective: torch.nn.Module
    model: torch.nn.Module  # the objective, or its DDP wrapper
    update: Update
    step: int
    skipped: int
    latest: Path | None
    step_flops: int
    init: InitSource | None = None
    whole_step: WholeStep | None = None  # train.compile_step


def _pretrain(cfg: PretrainConfig, data_dir: Path, out: Path, resume: bool, info: DistInfo,
              show_progress: bool, tensorboard: bool = False,
              init: InitSource | None = None) -> dict[str, Any]:
    run = _set_up(cfg, data_dir, out, resume, info, init)
    if info.rank == 0 and not cfg.train.bf16 and (note := bf16_note(info.device)):
        print(note, file=sys.stderr)  # after set-up: nothing is refused any more
    summary = _train_steps(run, show_progress, tensorboard)
    summary["final"] = _export(run)
    barrier(info)
    return summary


def _set_up(cfg: PretrainConfig, data_dir: Path, out: Path, resume: bool, info: DistInfo,
            init: InitSource | None = None) -> _Run:
    """Check data, config and OUT; build the objective (from `init`'s weights when given) and
    its optimizer; restore a checkpoint when resuming; write OUT/config.json (only once nothing
    can be refused any more)."""
    data = PretrainingDataset(data_dir)
    cfg.model.vocab_size = data.vocab_size
    cfg.model.pad_token_id = data.pad_id  # config.json's pad_token_id: the tokenizer's
    if data.seq_len > cfg.model.max_position_embeddings:
        raise ElectraError(f"{data_dir}: sequence length {data.seq_len} exceeds "
                           f"model.max_position_embeddings ({cfg.model.max_position_embeddings}"
                           f", preset {cfg.preset}); prepare shorter sequences or use a preset "
                           f"with more positions (the modern ones have 8192)")
    if init is not None:
        check_vocabulary(init, data_dir, data.vocab_checksum, data.vocab_size)
    cfg.validate()
    tc = cfg.train
    per_step = info.world_size * tc.grad_accum
    if tc.batch_size % per_step:
        raise ElectraError(f"train.batch_size {tc.batch_size} is not divisible by processes x "
                           f"grad_accum = {per_step}")
    _check_run_dir(out, cfg, data, data_dir, resume)

    torch.manual_seed(tc.seed)  # identical initial weights on every rank
    context = ObjectiveContext(special=special_ids_for(data_dir), token_counts=data.token_counts)
    objective = build_objective(cfg.model, cfg.objective, context=context)
    latest = checkpoint.find_latest(out) if resume else None
    if init is not None and latest is None:  # a resumed run's weights are in its checkpoint
        load_weights(objective, init)
    objective.to(info.device)
    if tc.compile_step and info.enabled:
        raise ElectraError("train.compile_step compiles one process's whole step; under "
                           "torchrun use train.compile (the layers) instead")
    if tc.compile and not tc.compile_step:
        compile_layers(objective)
    optimizer = build_optimizer(objective, tc)  # fused on CUDA (adamw_impl)
    scheduler = build_scheduler(optimizer, tc)
    torch.manual_seed(tc.seed * 1000 + info.rank)  # masking/dropout streams differ per rank

    step = skipped = 0
    if latest is not None:
        step = checkpoint.load(latest, objective, optimizer, scheduler, info.rank,
                               world_size=info.world_size)
        skipped = int(checkpoint.read_meta(latest).get("skipped_nonfinite", 0))
    # A run stopped after its last checkpoint but before its export resumes to export only.
    exported = all((out / "final" / name / "model.safetensors").is_file()
                   for name in objective.exportable())
    if resume and (step > tc.steps or (step == tc.steps and exported)):
        raise ElectraError(f"{out}: already trained {step} steps (>= --steps {tc.steps})")
    # Written only now, so that a resume refused above leaves OUT as it was.
    barrier(info)  # every rank checks OUT before rank 0 writes into it
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_CONFIG).write_text(json.dumps(
            {"config": cfg.to_dict(), "data": str(data_dir),
             "vocab_checksum": data.vocab_checksum,
             "init": init.describe() if init is not None else None}, indent=2) + "\n")
        for note in init.notes if init is not None else ():
            print(f"note: {note}", file=sys.stderr)

    # An objective whose phases leave some networks idle (two-stage) asks DDP to allow it.
    # gradient_as_bucket_view: the gradients are views into DDP's all-reduce buckets, which
    # saves a gradient-sized copy (memory and time) every step.
    model = (DistributedDataParallel(objective, device_ids=[info.device.index]
                                     if info.device.type == "cuda" else None,
                                     find_unused_parameters=getattr(
                                         objective, "find_unused_parameters", False),
                                     gradient_as_bucket_view=True)
             if info.enabled else objective)
    step_flops = sum(objective_step_flops(cfg.model, cfg.objective, tc.batch_size,
                                          data.seq_len).values())
    update = Update(optimizer, scheduler, [p for p in objective.parameters() if p.requires_grad],
                    tc.max_grad_norm, tc.skip_nonfinite)
    whole_step = None
    if tc.compile_step:
        whole_step = WholeStep(objective, optimizer, tc.max_grad_norm, tc.bf16, _window_values,
                               compile=True, device=info.device)
    return _Run(cfg, data_dir, out, info, data, context, objective, model, update, step,
                skipped, latest, step_flops, init, whole_step)


def _train_steps(run: _Run, show_progress: bool, tensorboard: bool) -> dict[str, Any]:
    """Train from `run.step` to `train.steps`: log, probe and checkpoint on their cadences."""
    tc, info, objective = run.cfg.train, run.info, run.objective
    batches = iterate_batches(run.data, tc.batch_size // (info.world_size * tc.grad_accum),
                              tc.seed, start_batch=run.step * tc.grad_accum, rank=info.rank,
                              world_size=info.world_size)
    logger = MetricsLogger(run.out, resume_step=run.step, tensorboard=tensorboard,
                           active=info.is_main)
    autocast = torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=tc.bf16)
    probe = HeldoutProbe.for_run(run.data_dir, run.data, run.context, tc, info)
    if probe is not None and run.step == 0:
        logger.log(probe.record(objective, 0, 0.0))

    def hint() -> str:
        where = (f"the last good checkpoint is {run.latest} (continue from it with --resume, "
                 "e.g. with a lower --lr)" if run.latest is not None
                 else "no checkpoint written yet")
        return f"{where}; --skip-nonfinite skips such steps instead"

    window = LogWindow()
    last_record: dict[str, Any] = {}
    start_time = time.perf_counter()
    run.model.train()
    with logger, StepLoop(tc.steps, run.step, "pretrain", show_progress and info.is_main, info,
                          nonfinite_hint=hint, skip_nonfinite=tc.skip_nonfinite) as loop:
        loop.skipped = run.skipped
        while loop.running:
            objective.on_step_start(loop.step, tc.steps)
            lr = run.update.lr
            if run.whole_step is not None:
                finite = _whole_step(run, batches, window, loop)
            else:
                finite = _eager_step(run, batches, window, loop, autocast)
            window.end_step(keep=finite)
            step = loop.end_step()
            if (loop.due(tc.log_every) or loop.due(tc.save_every) or loop.stopping
                    or (probe is not None and probe.due(step, tc.steps))):
                loop.settle()  # the device is read here anyway

            if loop.due(tc.log_every):
                record = {"step": step, **_record(*window.flush(info)), "lr": lr,
                          "flops": step * run.step_flops}
                if tc.skip_nonfinite:
                    record["skipped_nonfinite"] = loop.skipped
                logger.log(record)
                if info.is_main:
                    loop.set_postfix({k: f"{record[k]:.3f}" for k in
                                      ("loss", "disc_acc", "gen_acc", "mlm_acc") if k in record})
                last_record = record
            if probe is not None and probe.due(step, tc.steps):
                logger.log(probe.record(objective, step, step * run.step_flops))
            if loop.due(tc.save_every) or loop.stopping:
                run.latest = _save_checkpoint(run.out, objective, run.update.optimizer,
                                              run.update.scheduler, step, run.cfg, run.data,
                                              info, loop.skipped)
            if loop.stopping:
                loop.preempt(f"; checkpoint {run.latest} written; continue with the same "
                             "command plus --resume")
    run.step = loop.step
    examples = run.step * tc.batch_size
    # data_passes: how often the run read its training text; at small scale transfer fell
    # where this was large (docs/experiments/cpu-recipe.md).
    # train_seconds times this call only: a resumed run's earlier steps are not in it.
    return {"steps": run.step, "flops": run.step * run.step_flops,
            "train_seconds": time.perf_counter() - start_time,
            "timed_steps": run.step - loop.first_step, "examples": examples,
            "data_passes": examples / len(run.data), "last": last_record, "final": {},
            "out": str(run.out), "world_size": info.world_size}


def _eager_step(run: _Run, batches, window: LogWindow, loop: StepLoop,
                autocast) -> bool | torch.Tensor:
    """One optimizer step, module by module: each micro-batch's forward and backward, then
    `loop.update`. Returns whether the update was applied (a device flag where it was
    decided on the device)."""
    tc, info = run.cfg.train, run.info
    step_loss = torch.zeros((), device=info.device)
    for micro in range(tc.grad_accum):
        host = next(batches)
        # Padding is decided on the host batch, where it is free: asked of the device copy it
        # would be a sync per encoder call on CUDA (see `known_padding`).
        padded = mask_has_padding(host["attention_mask"])
        batch = to_device(host, info.device)  # pinned + non-blocking on CUDA
        sync = micro == tc.grad_accum - 1 or not info.enabled
        with (contextlib.nullcontext() if sync else run.model.no_sync()), autocast, \
                known_padding(padded):
            output = run.model(batch)
            (output.loss / tc.grad_accum).backward()
        step_loss += output.loss.detach().float()
        window.add(_window_values(output, batch["attention_mask"]))
    return loop.update(run.update, step_loss)


def _whole_step(run: _Run, batches, window: LogWindow, loop: StepLoop) -> torch.Tensor:
    """One optimizer step as one compiled function (`train.compile_step`, see
    `electra.pretrain.step`); the schedule advances on the host."""
    hosts = [next(batches) for _ in range(run.cfg.train.grad_accum)]
    padded = any(mask_has_padding(h["attention_mask"]) for h in hosts)
    result = run.whole_step([to_device(h, run.info.device) for h in hosts], padded)
    for values in result.values:
        window.add(values)
    with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": the
        warnings.simplefilter("ignore")  # update was the compiled step's, not optimizer.step
        run.update.scheduler.step()
    return loop.count_update(result.finite)


def _export(run: _Run) -> dict[str, str]:
    """OUT/final/<network>: each exportable network in Hugging Face format (main rank)."""
    if not run.info.is_main:
        return {}
    extra = {"steps": run.step, "train_flops": run.step * run.step_flops,
             "vocab_checksum": run.data.vocab_checksum, "objective": run.cfg.objective.name}
    if run.init is not None:  # train_flops counts this run; the starting point's are here
        extra["init"] = run.init.describe()
    return {name: str(export_module(module, run.out / "final" / name,
                                    run.data_dir / "tokenizer", extra))
            for name, module in run.objective.exportable().items()}


def _window_values(output, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    values = {"loss": output.loss.detach(), **output.losses, **output.counts,
              "_tokens": attention_mask.sum()}
    return {k: v.detach().float() for k, v in values.items()}


def _record(total: dict[str, float], n: int, elapsed: float) -> dict[str, float]:
    """A log line from a window's totals: mean losses over its micro-batches, the objective's
    metrics from its counts, tokens/s."""
    if not n:  # every step since the last line was skipped (on all ranks)
        return {}
    record = {"loss": total["loss"] / n}
    for k in sorted(total):
        if k.endswith("_loss"):  # every named loss of the objective
            record[k] = total[k] / n
    record.update(metrics_from_counts(total))
    record["tokens_per_s"] = total["_tokens"] / elapsed if elapsed > 0 else 0.0
    return record


def export_module(module: torch.nn.Module, path: Path, tokenizer_dir: Path,
                  extra: dict[str, Any]) -> Path:
    """Hugging Face format for Discriminator/Generator modules; a module with its own format
    (e.g. the two-tower generator) provides `save_pretrained(path, tokenizer_dir, extra)`."""
    own = getattr(module, "save_pretrained", None)
    if callable(own):
        return Path(own(path, tokenizer_dir, extra))
    return save_pretrained(module, path, tokenizer_dir, extra)


def _save_checkpoint(out, objective, optimizer, scheduler, step, cfg, data, info,
                     skipped: int = 0) -> Path:
    """Write the checkpoint of `step` on every rank together; return its final path."""
    tmp = checkpoint.begin(out, step) if info.is_main else None
    barrier(info)
    if tmp is None:
        tmp = checkpoint.checkpoint_root(out) / f".step_{step:08d}.tmp"
    checkpoint.write_rng(tmp, info.rank)
    barrier(info)
    if info.is_main:
        checkpoint.write_main(tmp, objective, optimizer, scheduler, step)
        checkpoint.commit(tmp, out, step, {"config": cfg.to_dict(),
                                           "vocab_checksum": data.vocab_checksum,
                                           "world_size": info.world_size,
                                           "skipped_nonfinite": skipped},
                          keep=cfg.train.keep_checkpoints)
    barrier(info)
    return checkpoint.checkpoint_root(out) / f"step_{step:08d}"

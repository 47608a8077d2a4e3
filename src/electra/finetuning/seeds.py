"""The seed loop `finetune` and `multitask` share: N fine-tunings from one checkpoint, each a
fresh model trained, evaluated and logged, the best one kept under OUT/model. A command takes
part by being a `SeedJob`: what differs between commands (the model, what it trains on, how it
is scored, what the kept model records) is the job's; the rest is the `SeedRunner`'s.

The same command run again continues (`electra.finetuning.resume`): finished seeds are read back
from their records instead of trained, the seed that was training continues from its last
checkpoint, and the results and OUT/model are those of a run that never stopped."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from electra.errors import ElectraError
from electra.finetuning.model_io import load_source, read_finetune_info, save_finetuned
from electra.finetuning.resume import (
    SeedCheckpoints,
    metrics_after_resume,
    read_seed_record,
    seed_dir,
    write_seed_record,
)
from electra.finetuning.settings import FinetuneSettings
from electra.finetuning.training import TrainPlan, train_model
from electra.model.card import RunFacts, write_model_card
from electra.progress import Progress
from electra.runtime.metrics_log import METRICS, MetricsLogger


@dataclass
class SeedScores:
    """One seed's evaluation, as the seed runner records it."""

    scores: dict  # per seed in results.json, and in the kept model's record
    predictions: dict  # the prediction files written
    logged: dict  # the metrics-log record at the last step
    rank: float  # what `KeepBest` ranks seeds by
    extra: dict = dataclasses.field(default_factory=dict)  # more fields of the seed's entry


class SeedJob(Protocol):
    """A command's part of the seed loop."""

    def new_model(self, encoder: torch.nn.Module) -> torch.nn.Module:
        """A fresh model around the pre-trained `encoder` (the seed is already set)."""

    def plan(self) -> TrainPlan:
        """What the next seed trains on."""

    def evaluate(self, model: torch.nn.Module, seed: int) -> SeedScores:
        """The trained model's scores and prediction files."""

    def model_info(self, seed: int, scores: dict) -> dict:
        """What a kept model directory records about its training (its finetune.json)."""


def seed_models(model_dir, encoder, settings: FinetuneSettings, device: torch.device,
                make_model: Callable[[torch.nn.Module], torch.nn.Module],
                skip: Container[int] = ()) -> Iterator[tuple[int, torch.nn.Module]]:
    """Yield (seed, a fresh model on `device`) for each of `settings.seeds` fine-tunings but
    those in `skip`: the seed set before the head is made, the pre-trained encoder reloaded for
    every seed after the first, the model moved off the device once the caller is done with it.
    What a seed gets does not depend on the seeds before it, so skipping some changes nothing
    for the others."""
    for k in range(settings.seeds):
        seed = settings.seed + k
        if seed in skip:
            continue
        torch.manual_seed(seed)
        if k > 0:
            encoder, _, _ = load_source(model_dir)
        model = make_model(encoder)
        model.to(device)
        yield seed, model
        model.to("cpu")


def seed_logger(out: Path, seed: int, settings: FinetuneSettings,
                resume_step: int = 0) -> MetricsLogger:
    """OUT/seed<k>/metrics.jsonl (and TensorBoard under OUT/tensorboard/seed<k>/); a seed
    continuing from its checkpoint at `resume_step` keeps the lines written up to it."""
    if resume_step:
        metrics_after_resume(seed_dir(out, seed) / METRICS, resume_step)
    logger = MetricsLogger(seed_dir(out, seed), resume_step=resume_step,
                           report_to=settings.sinks, run_name=f"{out.name}/seed{seed}",
                           tensorboard_dir=out / "tensorboard" / f"seed{seed}")
    logger.hyperparameters({"finetune": {**dataclasses.asdict(settings), "seed": seed}})
    return logger


class KeepBest:
    """OUT/model is the best seed's model so far (by `score`); with `save_all`, every seed's
    is kept too, as OUT/seed<k>/model."""

    def __init__(self, out: Path, model_dir, save_all: bool) -> None:
        self.out, self.model_dir, self.save_all = out, model_dir, save_all
        self.best: float | None = None
        self.best_seed: int | None = None

    def restore(self, ranks: dict[int, float]) -> None:
        """Rank the seeds a rerun reads back (seed -> score) as `offer` ranked them; OUT/model
        must hold the best of them, the model a run that never stopped would have kept."""
        for seed in sorted(ranks):
            if self.best is None or ranks[seed] > self.best:
                self.best, self.best_seed = ranks[seed], seed
        if self.best_seed is None:
            return
        model = self.out / "model"
        kept = read_finetune_info(model).get("seed") if (model / "config.json").is_file() \
            else None
        if kept != self.best_seed:
            raise ElectraError(f"{model} does not hold seed {self.best_seed}'s model, the best of "
                               f"the finished seeds {sorted(ranks)} (it holds "
                               f"{'seed ' + str(kept) if kept is not None else 'none'}); rerun "
                               "with as many --seeds as before, or choose another --out")

    def offer(self, model, seed: int, score: float, info: dict) -> dict[str, str]:
        """Save as needed; returns {"model": path} when this seed's model was kept."""
        kept = {}
        if self.save_all:
            kept["model"] = str(save_finetuned(model, self.out / f"seed{seed}" / "model",
                                               self.model_dir, info))
        if self.best is None or score > self.best:
            self.best, self.best_seed = score, seed
            save_finetuned(model, self.out / "model", self.model_dir, info)
        return kept


@dataclass
class SeedRunner:
    """For each seed: a fresh model from the job, its training, its evaluation, its metrics
    log, and the best model kept under OUT/model; `run` returns one entry per seed. `run_key`:
    the run's fingerprint (`electra.finetuning.resume.fingerprint`), which every seed record and
    checkpoint carries."""

    model_dir: str | Path
    encoder: torch.nn.Module
    settings: FinetuneSettings
    device: torch.device
    out: Path
    lr: float
    decay: float
    epochs: float
    show_progress: bool | Progress
    run_key: dict = dataclasses.field(default_factory=dict)

    def run(self, job: SeedJob) -> list[dict]:
        seeds = [self.settings.seed + k for k in range(self.settings.seeds)]
        records = {seed: record for seed in seeds
                   if (record := read_seed_record(seed_dir(self.out, seed))) is not None}
        if records:  # a rerun: say so, rather than return the old scores silently
            done = ", ".join(str(seed) for seed in sorted(records))
            print(f"note: {self.out} holds this run's finished seed{'s' * (len(records) > 1)} "
                  f"{done}: read back, not trained again (another --out trains anew)",
                  file=sys.stderr)
        keep = KeepBest(self.out, self.model_dir, self.settings.save_all_seeds)
        keep.restore({seed: record["rank"] for seed, record in records.items()})
        entries = {seed: record["entry"] for seed, record in records.items()}
        for seed, model in seed_models(self.model_dir, self.encoder, self.settings, self.device,
                                       job.new_model, skip=records):
            entries[seed] = self._train_seed(job, seed, model, keep)
        per_seed = [entries[seed] for seed in seeds]
        write_model_card(self.out / "model", RunFacts(seeds=per_seed))  # the seeds' scores
        return per_seed

    def _train_seed(self, job: SeedJob, seed: int, model: torch.nn.Module,
                    keep: KeepBest) -> dict:
        """Train (from the seed's last checkpoint, if it has one), evaluate, offer the model,
        then record the seed as done."""
        plan = job.plan()
        start = time.perf_counter()
        checkpoints = SeedCheckpoints.open(seed_dir(self.out, seed), self.settings.save_every,
                                           self.run_key, start)
        with seed_logger(self.out, seed, self.settings, checkpoints.step) as logger:
            loss, steps = train_model(model, plan, self.settings, self.lr, self.decay,
                                      self.epochs, seed, self.device, self.show_progress,
                                      logger, checkpoints)
            seconds = checkpoints.seconds()
            result = job.evaluate(model, seed)
            logger.log_at(steps, result.logged)
            logger.finish(result.scores)
        entry = {"seed": seed, "scores": result.scores, **result.extra,
                 "predictions": result.predictions, "final_train_loss": loss,
                 "train_seconds": round(seconds, 2), "steps": steps}
        entry.update(keep.offer(model, seed, result.rank, job.model_info(seed, result.scores)))
        write_seed_record(seed_dir(self.out, seed), self.run_key, result.rank, entry)
        return entry

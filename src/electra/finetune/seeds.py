"""The seed loop `finetune` and `multitask` share: N fine-tunings from one checkpoint, each a
fresh model trained, evaluated and logged, the best one kept under OUT/model. A command takes
part by being a `SeedJob`: what differs between commands (the model, what it trains on, how it
is scored, what the kept model records) is the job's; the rest is the `SeedRunner`'s."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from electra.finetune.model_io import load_source, save_finetuned
from electra.finetune.settings import FinetuneSettings
from electra.finetune.training import TrainPlan, train_model
from electra.model.card import RunFacts, write_model_card
from electra.progress import Progress
from electra.runtime.metrics_log import MetricsLogger


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
                make_model: Callable[[torch.nn.Module], torch.nn.Module]
                ) -> Iterator[tuple[int, torch.nn.Module]]:
    """Yield (seed, a fresh model on `device`) for each of `settings.seeds` fine-tunings: the
    seed set before the head is made, the pre-trained encoder reloaded for every seed after the
    first, the model moved off the device once the caller is done with it."""
    for k in range(settings.seeds):
        seed = settings.seed + k
        torch.manual_seed(seed)
        if k > 0:
            encoder, _, _ = load_source(model_dir)
        model = make_model(encoder)
        model.to(device)
        yield seed, model
        model.to("cpu")


def seed_logger(out: Path, seed: int, settings: FinetuneSettings) -> MetricsLogger:
    """OUT/seed<k>/metrics.jsonl (and TensorBoard under OUT/tensorboard/seed<k>/)."""
    return MetricsLogger(out / f"seed{seed}", tensorboard=settings.tensorboard,
                         tensorboard_dir=out / "tensorboard" / f"seed{seed}")


class KeepBest:
    """OUT/model is the best seed's model so far (by `score`); with `save_all`, every seed's
    is kept too, as OUT/seed<k>/model."""

    def __init__(self, out: Path, model_dir, save_all: bool) -> None:
        self.out, self.model_dir, self.save_all = out, model_dir, save_all
        self.best: float | None = None

    def offer(self, model, seed: int, score: float, info: dict) -> dict[str, str]:
        """Save as needed; returns {"model": path} when this seed's model was kept."""
        kept = {}
        if self.save_all:
            kept["model"] = str(save_finetuned(model, self.out / f"seed{seed}" / "model",
                                               self.model_dir, info))
        if self.best is None or score > self.best:
            self.best = score
            save_finetuned(model, self.out / "model", self.model_dir, info)
        return kept


@dataclass
class SeedRunner:
    """For each seed: a fresh model from the job, its training, its evaluation, its metrics
    log, and the best model kept under OUT/model; `run` returns one entry per seed."""

    model_dir: str | Path
    encoder: torch.nn.Module
    settings: FinetuneSettings
    device: torch.device
    out: Path
    lr: float
    decay: float
    epochs: float
    show_progress: bool | Progress

    def run(self, job: SeedJob) -> list[dict]:
        keep = KeepBest(self.out, self.model_dir, self.settings.save_all_seeds)
        per_seed = []
        for seed, model in seed_models(self.model_dir, self.encoder, self.settings, self.device,
                                       job.new_model):
            plan = job.plan()
            start = time.perf_counter()
            with seed_logger(self.out, seed, self.settings) as logger:
                loss, steps = train_model(model, plan, self.settings, self.lr, self.decay,
                                          self.epochs, seed, self.device, self.show_progress,
                                          logger)
                seconds = time.perf_counter() - start
                result = job.evaluate(model, seed)
                logger.log_at(steps, result.logged)
            entry = {"seed": seed, "scores": result.scores, **result.extra,
                     "predictions": result.predictions, "final_train_loss": loss,
                     "train_seconds": round(seconds, 2), "steps": steps}
            entry.update(keep.offer(model, seed, result.rank,
                                    job.model_info(seed, result.scores)))
            per_seed.append(entry)
        write_model_card(self.out / "model", RunFacts(seeds=per_seed))  # the seeds' scores
        return per_seed

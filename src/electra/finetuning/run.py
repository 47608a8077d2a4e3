"""Fine-tune and evaluate: N seeds from one checkpoint, medians reported (dissertation section
5.2.4: "the median of 10 fine-tuning runs from the same pre-trained checkpoint"), with the
hyper-parameters of Table 5.2 as defaults.

OUT/results.json: task, metric names, per-seed dev scores, their median/mean/std, settings and
each seed's dev predictions file (JSON lines, one per dev example in input order:
{"index", "prediction", "label"}; SQuAD: the official {qid: answer} JSON, and for v2.0 the na_prob
file under "dev_na_probs"). OUT/model: the best seed's fine-tuned model.
OUT/seed<k>/metrics.jsonl: the training curve (window-mean loss, accuracy, lr every `log_every`
steps) and the dev scores at the last step; with `tensorboard`, the same under
OUT/tensorboard/seed<k>/. OUT/seed<k>/checkpoints while seed k trains, OUT/seed<k>/seed.json
once it is done: the same command run again continues (`electra.finetuning.resume`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.fileutil import write_atomic
from electra.finetuning.evaluation import evaluate_splits, primary_key
from electra.finetuning.examples import data_folder, eval_sets_of, train_examples_of
from electra.finetuning.heads import FinetuneModel, check_head
from electra.finetuning.model_io import load_source, source_dir
from electra.finetuning.results import task_results
from electra.finetuning.resume import check_same_run, data_digest, fingerprint, model_digest
from electra.finetuning.seeds import SeedRunner, SeedScores
from electra.finetuning.settings import FinetuneSettings, learning_rates
from electra.finetuning.training import TrainPlan, single_task_plan
from electra.hub import source_record
from electra.precision import device_and_precision
from electra.presets import finetune_defaults
from electra.progress import Progress
from electra.runtime.sinks import require_sinks
from electra.settings import SETTINGS_FILE, Sources, write_run_record, write_settings
from electra.tasks import Task, get_task
from electra.tasks.base import Example
from electra.tokenizer import special_token_ids

# Distillation hook: (task, training examples, their features) -> targets(batch, idx, progress)
# that adds annealed teacher targets to a training batch (electra.multitask.distill).
TargetsFactory = Callable[[Task, list[Example], list[dict]],
                          Callable[[dict, list[int], float], dict]]


@dataclass
class SingleTaskJob:
    """`finetune`'s part of the seed loop (a `SeedJob`): one task, one head, the same plan for
    every seed, ranked by the task's primary metric."""

    task: Task
    train_plan: TrainPlan
    eval_sets: dict[str, list[Example]]
    tokenizer: object
    settings: FinetuneSettings
    device: torch.device
    out: Path
    model_dir: str | Path
    resolved: dict  # the settings recorded with each kept model

    def new_model(self, encoder: torch.nn.Module) -> FinetuneModel:
        return FinetuneModel(encoder, self.task.head_kind, self.task.num_outputs,
                             self.settings.dropout)

    def plan(self) -> TrainPlan:
        return self.train_plan

    def evaluate(self, model: torch.nn.Module, seed: int) -> SeedScores:
        scores, paths = evaluate_splits(model, self.task, self.eval_sets, self.tokenizer,
                                        self.settings, self.device, self.out / f"seed{seed}")
        return SeedScores(scores, paths, {f"dev_{k}": v for k, v in scores.items()},
                          rank=scores[primary_key(self.task)])

    def model_info(self, seed: int, scores: dict) -> dict:
        return {"task": self.task.state(), "head_kind": self.task.head_kind,
                "num_outputs": self.task.num_outputs,
                **source_record(self.model_dir, "source_model"),
                "settings": self.resolved, "seed": seed, "scores": scores}


def finetune(model_dir: str | Path, task_name: str, data_dir: str | Path, out_dir: str | Path,
             settings: FinetuneSettings | None = None,
             show_progress: bool | Progress = False,
             task: Task | None = None, teacher: TargetsFactory | None = None,
             extra_info: dict | None = None, sources: Sources | None = None,
             revision: str | None = None, data_config: str | None = None,
             data_revision: str | None = None) -> dict:
    """Fine-tune `settings.seeds` times from `model_dir`; write and return results.json. With
    `teacher`, the targets are annealed mixtures of gold labels and a teacher's predictions
    (Single->Single distillation); `extra_info` is recorded in results.json and the model.
    `sources`: where each setting came from (`electra.settings.resolve`), for OUT/run.json.
    `model_dir`: a folder, a pre-training checkpoint or a Hub id (at `revision`); `data_dir`: a
    folder or a Hub dataset id (at `data_revision`), `data_config` its config folder."""
    from electra.runtime.speed import configure_process_for_speed

    settings = settings or FinetuneSettings()
    settings.validate()
    require_sinks(settings.sinks)
    configure_process_for_speed()  # malloc keeps freed blocks: faster CPU steps, same results
    task = task or get_task(task_name)
    out = Path(out_dir)
    device, precision = device_and_precision(settings.device, settings.precision)
    settings = dataclasses.replace(settings, precision=precision)

    model_dir = source_dir(model_dir, revision)  # a checkpoint's discriminator, an id's snapshot
    encoder, tokenizer, _ = load_source(model_dir)  # checks the directory before reading data
    settings.check_model(encoder.config)
    check_head(encoder.config, task.head_kind, task.num_outputs, single_task=True)
    # Table 5.2, from the size's preset
    size, lr, decay = learning_rates(settings, encoder.config.hidden_size, finetune_defaults)
    epochs = settings.epochs if settings.epochs is not None else task.default_epochs
    settings = dataclasses.replace(settings,
                                   max_seq_len=settings.max_seq_len or task.default_max_seq_len)

    data_dir = data_folder(data_dir, [task], data_config, data_revision)
    train = train_examples_of(task, data_dir, settings)
    eval_sets = eval_sets_of(task, data_dir, settings)
    features = task.featurize(train, tokenizer, settings.max_seq_len)
    pad_id = special_token_ids(tokenizer)["pad"]
    plan = single_task_plan(task, features, settings, pad_id,
                            teacher(task, train, features) if teacher else None)
    used = dataclasses.replace(settings, lr=lr, layerwise_decay=decay, epochs=epochs, size=size)
    resolved = {**dataclasses.asdict(used), **(extra_info or {})}
    run_key = fingerprint(resolved, model=model_digest(model_dir), task=task.state(),
                          data={"sha256": data_digest(train, eval_sets)})
    # a rerun continues; another configuration (or other data) is refused
    check_same_run(out, run_key, str(Path(data_dir).resolve()))
    out.mkdir(parents=True, exist_ok=True)  # only once the data (and teacher) checked out

    write_settings(out, {"finetune": used})
    write_run_record(out, {**source_record(model_dir, "model"), "task": task.name,
                           **source_record(data_dir, "data"),
                           "settings": SETTINGS_FILE,
                           "sources": sources.to_json() if sources is not None else None})

    job = SingleTaskJob(task, plan, eval_sets, tokenizer, settings, device, out, model_dir,
                        resolved)
    runner = SeedRunner(model_dir, encoder, settings, device, out, lr, decay, epochs,
                        show_progress, run_key)
    results = task_results(task, runner.run(job), resolved, model_dir, data_dir, train,
                           eval_sets, out)
    write_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    return results

"""Fine-tune and evaluate: N seeds from one checkpoint, medians reported (dissertation section
5.2.4: "the median of 10 fine-tuning runs from the same pre-trained checkpoint"), with the
hyper-parameters of Table 5.2 as defaults.

OUT/results.json: task, metric names, per-seed dev scores, their median/mean/std, settings and
each seed's dev predictions file (JSON lines, one per dev example in input order:
{"index", "prediction", "label"}; SQuAD: the official {qid: answer} JSON, and for v2.0 the na_prob
file under "dev_na_probs"). OUT/model: the best seed's fine-tuned model.
OUT/seed<k>/metrics.jsonl: the training curve (window-mean loss, accuracy, lr every `log_every`
steps) and the dev scores at the last step; with `tensorboard`, the same under
OUT/tensorboard/seed<k>/.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.config import ModelConfig
from electra.device import to_device
from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.finetune.data import eval_batches, feature_lengths, train_batches
from electra.finetune.heads import FinetuneModel, check_head
from electra.finetune.model_io import load_source, save_finetuned
from electra.finetune.optim import LR_DECAY_STYLES, build_optimizer
from electra.precision import PRECISIONS, autocast, device_and_precision, make_scaler
from electra.presets import SIZES, finetune_defaults, infer_size
from electra.runtime.metrics_log import MetricsLogger, require_tensorboard
from electra.runtime.skeleton import LogWindow, StepLoop, Update, batches_forever
from electra.settings import write_settings
from electra.tasks import Task, get_task
from electra.tasks.base import Example
from electra.tokenizer import special_token_ids


@dataclass
class FinetuneSettings:
    lr: float | None = None  # None: from the model size (Table 5.2)
    layerwise_decay: float | None = None  # None: from the model size
    lr_decay_style: str = "dissertation"  # or "official" (see electra.finetune.optim)
    size: str | None = None  # tiny/small/base/large; None: inferred from the hidden size
    epochs: float | None = None  # None: the task's (10 for RTE and STS-B, 3 otherwise)
    batch_size: int = 32
    eval_batch_size: int = 128
    max_seq_len: int | None = None  # None: the task's (384 for SQuAD, 128 otherwise)
    warmup_fraction: float = 0.1
    weight_decay: float = 0.0
    adam_eps: float = 1e-6
    dropout: float = 0.1
    seeds: int = 1
    seed: int = 1
    max_train_examples: int | None = None  # the first K training examples
    max_eval_examples: int | None = None
    precision: str = "auto"  # electra.precision; results.json records the one used
    length_sorted: bool = True  # training batches of similar length (electra.finetune.data)
    device: str = "auto"
    save_all_seeds: bool = False
    log_every: int = 10  # steps between lines of seed<k>/metrics.jsonl
    tensorboard: bool = False  # also TensorBoard scalars under OUT/tensorboard/seed<k>/

    def validate(self) -> None:
        if self.lr_decay_style not in LR_DECAY_STYLES:
            raise ElectraError(f"--lr-decay-style must be one of {LR_DECAY_STYLES}")
        if self.size is not None and self.size not in SIZES:
            raise ElectraError(f"--size must be one of {', '.join(SIZES)}")
        for name in ("batch_size", "eval_batch_size", "max_seq_len", "seeds", "log_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ElectraError(f"{name} must be positive, got {getattr(self, name)}")

        if self.lr is not None and self.lr <= 0:
            raise ElectraError(f"--lr must be positive, got {self.lr}")
        if self.layerwise_decay is not None and not 0 < self.layerwise_decay <= 1:
            raise ElectraError(f"--layerwise-decay must be in (0, 1], got {self.layerwise_decay}")
        if self.epochs is not None and self.epochs <= 0:
            raise ElectraError(f"--epochs must be positive, got {self.epochs}")
        if self.precision not in PRECISIONS:
            raise ElectraError(f"--precision must be one of {', '.join(PRECISIONS)}, got "
                               f"{self.precision!r}")
        if not 0 <= self.warmup_fraction < 1:
            raise ElectraError(f"--warmup-fraction must be in [0, 1), got {self.warmup_fraction}")

    def check_model(self, model_config: ModelConfig) -> None:
        """Settings the model itself bounds: the sequence length, by its positions."""
        if self.max_seq_len is not None and self.max_seq_len > model_config.max_position_embeddings:
            raise ElectraError(f"max_seq_len {self.max_seq_len} exceeds the model's "
                               f"max_position_embeddings ({model_config.max_position_embeddings})")


def _metric_key(split: str, metric: str, task: Task) -> str:
    return metric if len(task.eval_splits) == 1 else f"{split}_{metric}"


def primary_key(task: Task) -> str:
    return _metric_key(next(iter(task.eval_splits)), task.primary_metric, task)


@torch.no_grad()
def predict_examples(model: FinetuneModel, task: Task, examples: list[Example], tokenizer,
                     settings: FinetuneSettings, device: torch.device) -> list:
    """One prediction per example, in input order (batches are length-sorted internally); the
    head splits its batched output into per-feature rows."""
    features = task.featurize(examples, tokenizer, settings.max_seq_len)
    return task.postprocess(examples, features,
                            head_outputs(model, task, features, tokenizer, settings, device))


@torch.no_grad()
def head_outputs(model: FinetuneModel, task: Task, features: list[dict], tokenizer,
                 settings: FinetuneSettings, device: torch.device) -> list:
    """Each feature's head output (numpy row, or a span beam), in feature order."""
    pad_id = special_token_ids(tokenizer)["pad"]
    outputs: list = [None] * len(features)
    model.eval()
    for idx in eval_batches(features, settings.eval_batch_size):
        batch = to_device(task.collate([features[i] for i in idx], pad_id), device)
        with autocast(device, settings.precision):
            output = model(batch)
        rows = model.task_head.rows(output, [len(features[i]["input_ids"]) for i in idx])
        for row, i in zip(rows, idx, strict=True):
            outputs[i] = row
    return outputs


def evaluate_splits(model, task, eval_sets, tokenizer, settings, device, out_dir: Path,
                    prefix: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """Scores on each evaluation split and the path(s) of its predictions file(s): the task
    writes its own format (JSON lines; SQuAD: the official JSON + na_probs)."""
    scores: dict[str, float] = {}
    paths: dict[str, str] = {}
    for split, examples in eval_sets.items():
        preds = predict_examples(model, task, examples, tokenizer, settings, device)
        for metric, value in task.score(examples, preds).items():
            scores[_metric_key(split, metric, task)] = value
        for kind, path in task.write_predictions(out_dir, f"{prefix}{split}", examples,
                                                 preds).items():
            paths[split if kind == "predictions" else f"{split}_{kind}"] = path
    return scores, paths


def train_step(model: FinetuneModel, task: Task, batch: dict[str, torch.Tensor], loop: StepLoop,
               update: Update, precision: str) -> tuple[torch.Tensor, object, bool]:
    """One optimizer step: forward under the precision's autocast, backward (loss-scaled under
    fp16), then the shared
    update (clipping to 1.0 as the official optimizer does, the non-finite guard, AdamW, the
    schedule); returns the detached loss, the head output and whether the update was applied
    (fp16 skips the steps whose scaled gradients overflow). Shared with
    benchmarks/finetune_speed.py, so what it times is what training runs."""
    device = batch["input_ids"].device
    with autocast(device, precision):
        logits = model(batch)
    loss = task.loss(logits, batch)
    update.backward(loss)
    applied = loop.update(update, loss.detach())
    return loss.detach(), logits, bool(applied)


@dataclass
class TrainPlan:
    """What one training run iterates, so single-task, multi-task and distilled training share
    `train_model`: `epoch(gen)` gives one epoch of batches (index lists), `collate(idx,
    progress)` the batch (with distillation targets for the fraction `progress` of training
    done), and `objective` the loss and accuracy counts (a Task, or a mixture of tasks)."""

    name: str
    steps_per_epoch: int
    epoch: Callable[[torch.Generator], list[list[int]]]
    collate: Callable[[list[int], float], dict]
    objective: object


def single_task_plan(task: Task, features: list[dict], settings: FinetuneSettings, pad_id: int,
                     targets: Callable[[dict, list[int], float], dict] | None = None
                     ) -> TrainPlan:
    """Length-grouped batches of one task; `targets(batch, idx, progress)` adds distillation
    targets when a teacher is given."""
    lengths = feature_lengths(features)

    def collate(idx: list[int], progress: float) -> dict:
        batch = task.collate([features[i] for i in idx], pad_id)
        return targets(batch, idx, progress) if targets else batch

    return TrainPlan(task.name, math.ceil(len(features) / settings.batch_size),
                     lambda gen: train_batches(lengths, settings.batch_size, gen,
                                               settings.length_sorted), collate, task)


def train_model(model, plan: TrainPlan, settings: FinetuneSettings, lr: float, decay: float,
                epochs: float, seed: int, device: torch.device, show_progress: bool,
                logger: MetricsLogger) -> tuple[float, int]:
    """Train in place, logging the mean loss (and accuracy) of every `log_every` steps; returns
    the last running loss and the number of steps. On SIGTERM or SIGUSR1 the current step is
    finished and `Preempted` raised: fine-tuning keeps no checkpoints (a run takes minutes to
    hours), so the message says to run the command again."""
    gen = torch.Generator().manual_seed(seed)
    total = max(1, int(math.ceil(plan.steps_per_epoch * epochs)))
    opt, sched = build_optimizer(model, lr, decay, model.encoder.config.num_hidden_layers, total,
                                 settings.warmup_fraction, settings.lr_decay_style,
                                 settings.weight_decay, settings.adam_eps)
    update = Update(opt, sched, list(model.parameters()), max_grad_norm=1.0,
                    scaler=make_scaler(device, settings.precision))
    model.train()
    running = None
    correct = seen = 0
    window = LogWindow()
    batches = batches_forever(lambda: plan.epoch(gen))
    with StepLoop(total, 0, f"{plan.name} seed {seed}", show_progress,
                  nonfinite_hint=lambda: "try a lower --lr") as loop:
        while loop.running:
            batch = to_device(plan.collate(next(batches), loop.step / total), device)
            step_lr = update.lr  # the head's
            loss, logits, applied = train_step(model, plan.objective, batch, loop, update,
                                               settings.precision)
            if applied:  # an fp16 step skipped for an overflow counts in no metric
                value = float(loss)
                running = value if running is None else 0.95 * running + 0.05 * value
                hits, labels = plan.objective.hits(logits, batch)
                correct, seen = correct + hits, seen + labels
                window.add({"loss": value, "hits": hits, "labels": labels})
            window.end_step()
            post = {"loss": f"{running:.4f}"} if running is not None else {}
            if seen:
                post["acc"] = f"{correct / seen:.3f}"
            step = loop.end_step(post if show_progress else None)
            if loop.due(settings.log_every):
                record = {"step": step, "epoch": step / plan.steps_per_epoch,
                          **_train_record(*window.flush()[:2]), "lr": step_lr}
                if update.scaler is not None:
                    record["skipped_overflow"] = loop.overflows
                    record["loss_scale"] = update.scaler.get_scale()
                logger.log(record)
            if loop.stopping:
                loop.preempt(f" ({plan.name}, seed {seed}); fine-tuning keeps no checkpoints: "
                             "run the same command again to start over")
    return float(running or 0.0), loop.step


def _train_record(total: dict[str, float], steps: int) -> dict[str, float]:
    """Mean loss and accuracy of a log window (a smoother curve than single steps)."""
    if not steps:  # every step of the window was skipped (fp16 overflows)
        return {}
    record = {"loss": total["loss"] / steps}
    if total["labels"]:
        record["train_acc"] = total["hits"] / total["labels"]
    return record


def seed_models(model_dir, encoder, settings: FinetuneSettings, device: torch.device,
                make_model: Callable[[torch.nn.Module], torch.nn.Module]):
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


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0, "values": values}


def learning_rates(settings: FinetuneSettings, hidden_size: int,
                   defaults: Callable[[str], tuple[float, float]]) -> tuple[str, float, float]:
    """(size, peak learning rate, layer-wise decay): the settings' where given, else `defaults`
    of the model's size (`settings.size`, or inferred from its hidden size)."""
    size = settings.size or infer_size(hidden_size)
    default_lr, default_decay = defaults(size)
    lr = settings.lr if settings.lr is not None else default_lr
    decay = (settings.layerwise_decay if settings.layerwise_decay is not None
             else default_decay)
    return size, lr, decay


@dataclass
class SeedScores:
    """One seed's evaluation, as the seed runner records it."""

    scores: dict  # per seed in results.json, and in the kept model's record
    predictions: dict  # the prediction files written
    logged: dict  # the metrics-log record at the last step
    rank: float  # what `KeepBest` ranks seeds by
    extra: dict = dataclasses.field(default_factory=dict)  # more fields of the seed's entry


@dataclass
class SeedRunner:
    """The seed loop `finetune` and `run_multitask` share: for each seed a fresh model, its
    training (`plan` is called per seed), its evaluation, its metrics log, and the best model
    kept under OUT/model; returns one entry per seed."""

    model_dir: str | Path
    encoder: torch.nn.Module
    settings: FinetuneSettings
    device: torch.device
    out: Path
    lr: float
    decay: float
    epochs: float
    show_progress: bool

    def run(self, make_model: Callable[[torch.nn.Module], torch.nn.Module],
            plan: Callable[[], TrainPlan], evaluate: Callable[[torch.nn.Module, int], SeedScores],
            model_info: dict, info_extra: dict, resolved: dict) -> list[dict]:
        keep = KeepBest(self.out, self.model_dir, self.settings.save_all_seeds)
        per_seed = []
        for seed, model in seed_models(self.model_dir, self.encoder, self.settings, self.device,
                                       make_model):
            seed_plan = plan()
            start = time.perf_counter()
            with seed_logger(self.out, seed, self.settings) as logger:
                loss, steps = train_model(model, seed_plan, self.settings, self.lr, self.decay,
                                          self.epochs, seed, self.device, self.show_progress,
                                          logger)
                seconds = time.perf_counter() - start
                result = evaluate(model, seed)
                logger.log_at(steps, result.logged)
            entry = {"seed": seed, "scores": result.scores, **result.extra,
                     "predictions": result.predictions, "final_train_loss": loss,
                     "train_seconds": round(seconds, 2), "steps": steps}
            info = {**model_info, "source_model": str(self.model_dir), "settings": resolved,
                    "seed": seed, "scores": result.scores, **info_extra}
            entry.update(keep.offer(model, seed, result.rank, info))
            per_seed.append(entry)
        return per_seed


def task_results(task: Task, seeds: list[dict], resolved: dict, model_dir, data_dir,
                 train: list[Example], eval_sets: dict[str, list[Example]], out: Path,
                 **extra) -> dict:
    """A task's results.json: per-seed scores, their summaries and medians, the settings and
    the data's sizes; `extra` fields go just before "best_model"."""
    metric_keys = list(seeds[0]["scores"])
    return {
        "task": task.name,
        "metric_names": metric_keys,
        "primary_metric": primary_key(task),
        "seeds": seeds,
        "summary": {m: summary([s["scores"][m] for s in seeds]) for m in metric_keys},
        "median": {m: statistics.median([s["scores"][m] for s in seeds]) for m in metric_keys},
        "settings": resolved,
        "model": str(model_dir),
        "data": str(data_dir),
        "num_train_examples": len(train),
        "num_eval_examples": {s: len(e) for s, e in eval_sets.items()},
        **extra,
        "best_model": str(out / "model"),
    }


def train_examples_of(task: Task, data_dir, settings: FinetuneSettings) -> list[Example]:
    """The task's training examples (the first max_train_examples); none is an error."""
    train = task.read(data_dir, "train")
    if settings.max_train_examples:
        train = train[:settings.max_train_examples]
    if not train:
        raise ElectraError(f"{data_dir}: no training examples for {task.name}")
    return train


def eval_sets_of(task: Task, data_dir, settings: FinetuneSettings) -> dict[str, list[Example]]:
    sets = {}
    for split in task.eval_splits:
        examples = task.read(data_dir, split)
        if settings.max_eval_examples:
            examples = examples[:settings.max_eval_examples]
        sets[split] = examples
    return sets


# Distillation hook: (task, training examples, their features) -> targets(batch, idx, progress)
# that adds annealed teacher targets to a training batch (electra.multitask.distill).
TargetsFactory = Callable[[Task, list[Example], list[dict]],
                          Callable[[dict, list[int], float], dict]]


def finetune(model_dir: str | Path, task_name: str, data_dir: str | Path, out_dir: str | Path,
             settings: FinetuneSettings | None = None, show_progress: bool = False,
             task: Task | None = None, teacher: TargetsFactory | None = None,
             extra_info: dict | None = None) -> dict:
    """Fine-tune `settings.seeds` times from `model_dir`; write and return results.json. With
    `teacher`, the targets are annealed mixtures of gold labels and a teacher's predictions
    (Single->Single distillation); `extra_info` is recorded in results.json and the model."""
    from electra.runtime.speed import configure_process_for_speed

    settings = settings or FinetuneSettings()
    settings.validate()
    if settings.tensorboard:
        require_tensorboard()
    configure_process_for_speed()  # malloc keeps freed blocks: faster CPU steps, same results
    task = task or get_task(task_name)
    out = Path(out_dir)
    device, precision = device_and_precision(settings.device, settings.precision)
    settings = dataclasses.replace(settings, precision=precision)

    encoder, tokenizer, _ = load_source(model_dir)  # checks the directory before reading data
    settings.check_model(encoder.config)
    check_head(encoder.config, task.head_kind, task.num_outputs, single_task=True)
    # Table 5.2, from the size's preset
    size, lr, decay = learning_rates(settings, encoder.config.hidden_size, finetune_defaults)
    epochs = settings.epochs if settings.epochs is not None else task.default_epochs
    settings = dataclasses.replace(settings,
                                   max_seq_len=settings.max_seq_len or task.default_max_seq_len)

    train = train_examples_of(task, data_dir, settings)
    eval_sets = eval_sets_of(task, data_dir, settings)
    features = task.featurize(train, tokenizer, settings.max_seq_len)
    pad_id = special_token_ids(tokenizer)["pad"]
    plan = single_task_plan(task, features, settings, pad_id,
                            teacher(task, train, features) if teacher else None)
    out.mkdir(parents=True, exist_ok=True)  # only once the data (and teacher) checked out

    used = dataclasses.replace(settings, lr=lr, layerwise_decay=decay, epochs=epochs, size=size)
    write_settings(out, {"finetune": used})
    resolved = {**dataclasses.asdict(used), **(extra_info or {})}
    key = primary_key(task)

    def evaluate(model, seed: int) -> SeedScores:
        scores, paths = evaluate_splits(model, task, eval_sets, tokenizer, settings, device,
                                        out / f"seed{seed}")
        return SeedScores(scores, paths, {f"dev_{k}": v for k, v in scores.items()},
                          rank=scores[key])

    runner = SeedRunner(model_dir, encoder, settings, device, out, lr, decay, epochs,
                        show_progress)
    per_seed = runner.run(
        lambda enc: FinetuneModel(enc, task.head_kind, task.num_outputs, settings.dropout),
        lambda: plan, evaluate,
        {"task": task.state(), "head_kind": task.head_kind, "num_outputs": task.num_outputs},
        {}, resolved)
    results = task_results(task, per_seed, resolved, model_dir, data_dir, train, eval_sets, out)
    write_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    return results

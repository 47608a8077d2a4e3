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
from tqdm import tqdm

from electra.device import resolve_device, to_device
from electra.errors import ElectraError, Preempted
from electra.fileutil import write_atomic
from electra.finetune.data import eval_batches, feature_lengths, train_batches
from electra.finetune.heads import FinetuneModel
from electra.finetune.model_io import load_source, save_finetuned
from electra.finetune.optim import LR_DECAY_STYLES, build_optimizer
from electra.tasks import Task, get_task
from electra.tasks.base import Example
from electra.train.metrics_log import MetricsLogger, require_tensorboard
from electra.train.preempt import StopSignals

# Table 5.2 by model size; "tiny" (our CPU preset) uses Small's values.
SIZE_DEFAULTS = {"tiny": (3e-4, 0.8), "small": (3e-4, 0.8), "base": (1e-4, 0.8),
                 "large": (5e-5, 0.9)}


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
    bf16: bool = False
    length_sorted: bool = True  # training batches of similar length (electra.finetune.data)
    device: str = "auto"
    save_all_seeds: bool = False
    log_every: int = 10  # steps between lines of seed<k>/metrics.jsonl
    tensorboard: bool = False  # also TensorBoard scalars under OUT/tensorboard/seed<k>/

    def validate(self) -> None:
        if self.lr_decay_style not in LR_DECAY_STYLES:
            raise ElectraError(f"--lr-decay-style must be one of {LR_DECAY_STYLES}")
        if self.size is not None and self.size not in SIZE_DEFAULTS:
            raise ElectraError(f"--size must be one of {', '.join(SIZE_DEFAULTS)}")
        for name in ("batch_size", "eval_batch_size", "max_seq_len", "seeds", "log_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ElectraError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_seq_len is not None and self.max_seq_len > 512:
            raise ElectraError(f"max_seq_len {self.max_seq_len} exceeds 512")
        if self.lr is not None and self.lr <= 0:
            raise ElectraError(f"--lr must be positive, got {self.lr}")
        if self.layerwise_decay is not None and not 0 < self.layerwise_decay <= 1:
            raise ElectraError(f"--layerwise-decay must be in (0, 1], got {self.layerwise_decay}")
        if self.epochs is not None and self.epochs <= 0:
            raise ElectraError(f"--epochs must be positive, got {self.epochs}")
        if not 0 <= self.warmup_fraction < 1:
            raise ElectraError(f"--warmup-fraction must be in [0, 1), got {self.warmup_fraction}")


def infer_size(hidden_size: int) -> str:
    """ELECTRA sizes by hidden width (Table 5.1): Small 256, Base 768, Large 1024."""
    if hidden_size <= 128:
        return "tiny"
    if hidden_size <= 256:
        return "small"
    return "base" if hidden_size <= 768 else "large"


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
    pad_id = tokenizer.token_to_id("[PAD]") or 0
    outputs: list = [None] * len(features)
    model.eval()
    for idx in eval_batches(features, settings.eval_batch_size):
        batch = to_device(task.collate([features[i] for i in idx], pad_id), device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=settings.bf16):
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


def train_step(model: FinetuneModel, task: Task, batch: dict[str, torch.Tensor], opt, sched,
               bf16: bool) -> tuple[torch.Tensor, object]:
    """One optimizer step (forward under optional bf16 autocast, backward, clip, AdamW, schedule);
    returns the detached loss and the head output. Shared with benchmarks/finetune_speed.py, so
    what it times is what training runs."""
    device = batch["input_ids"].device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(batch)
    loss = task.loss(logits, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    # The official optimizer clips the global gradient norm to 1.0.
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.detach(), logits


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
    model.train()
    step, running, correct, seen = 0, None, 0, 0
    window = _LogWindow()
    bar = tqdm(total=total, desc=f"{plan.name} seed {seed}", disable=not show_progress,
               dynamic_ncols=True)
    with StopSignals() as signals:
        while step < total:
            for idx in plan.epoch(gen):
                if step >= total:
                    break
                batch = to_device(plan.collate(idx, step / total), device)
                step_lr = max(group["lr"] for group in opt.param_groups)  # the head's
                loss, logits = train_step(model, plan.objective, batch, opt, sched, settings.bf16)
                step += 1
                value = float(loss)
                running = value if running is None else 0.95 * running + 0.05 * value
                hits, total_labels = plan.objective.hits(logits, batch)
                correct, seen = correct + hits, seen + total_labels
                window.add(value, hits, total_labels)
                if step % settings.log_every == 0 or step == total:
                    logger.log({"step": step, "epoch": step / plan.steps_per_epoch,
                                **window.flush(), "lr": step_lr})
                if show_progress:
                    post = {"loss": f"{running:.4f}"}
                    if seen:
                        post["acc"] = f"{correct / seen:.3f}"
                    bar.set_postfix(post)
                    bar.update(1)
                if signals.requested and step < total:
                    bar.close()
                    raise Preempted(f"stopped by {signals.name} after step {step} of {total} "
                                    f"({plan.name}, seed {seed}); fine-tuning keeps no "
                                    "checkpoints: run the same command again to start over")
    bar.close()
    return float(running or 0.0), step


class _LogWindow:
    """Mean loss and accuracy since the last log line (a smoother curve than single steps)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss, self.steps, self.hits, self.labels = 0.0, 0, 0, 0

    def add(self, loss: float, hits: int, labels: int) -> None:
        self.loss += loss
        self.steps += 1
        self.hits += hits
        self.labels += labels

    def flush(self) -> dict[str, float]:
        record = {"loss": self.loss / max(1, self.steps)}
        if self.labels:
            record["train_acc"] = self.hits / self.labels
        self.reset()
        return record


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0, "values": values}


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
    from electra.train.speed import configure_process_for_speed

    settings = settings or FinetuneSettings()
    settings.validate()
    if settings.tensorboard:
        require_tensorboard()
    configure_process_for_speed()  # malloc keeps freed blocks: faster CPU steps, same results
    task = task or get_task(task_name)
    out = Path(out_dir)
    device = resolve_device(settings.device, settings.bf16)

    encoder, tokenizer, _ = load_source(model_dir)  # checks the directory before reading data
    size = settings.size or infer_size(encoder.config.hidden_size)
    lr = settings.lr if settings.lr is not None else SIZE_DEFAULTS[size][0]
    decay = (settings.layerwise_decay if settings.layerwise_decay is not None
             else SIZE_DEFAULTS[size][1])
    epochs = settings.epochs if settings.epochs is not None else task.default_epochs
    settings = dataclasses.replace(settings,
                                   max_seq_len=settings.max_seq_len or task.default_max_seq_len)

    train = train_examples_of(task, data_dir, settings)
    eval_sets = eval_sets_of(task, data_dir, settings)
    features = task.featurize(train, tokenizer, settings.max_seq_len)
    pad_id = tokenizer.token_to_id("[PAD]") or 0
    plan = single_task_plan(task, features, settings, pad_id,
                            teacher(task, train, features) if teacher else None)
    out.mkdir(parents=True, exist_ok=True)  # only once the data (and teacher) checked out

    resolved = {**dataclasses.asdict(settings), "lr": lr, "layerwise_decay": decay,
                "epochs": epochs, "size": size, **(extra_info or {})}
    per_seed, best = [], None
    key = primary_key(task)
    for k in range(settings.seeds):
        seed = settings.seed + k
        torch.manual_seed(seed)
        if k > 0:
            encoder, _, _ = load_source(model_dir)
        model = FinetuneModel(encoder, task.head_kind, task.num_outputs, settings.dropout)
        model.to(device)
        start = time.perf_counter()
        with MetricsLogger(out / f"seed{seed}", tensorboard=settings.tensorboard,
                           tensorboard_dir=out / "tensorboard" / f"seed{seed}") as logger:
            loss, steps = train_model(model, plan, settings, lr, decay, epochs, seed, device,
                                      show_progress, logger)
            seconds = time.perf_counter() - start
            scores, paths = evaluate_splits(model, task, eval_sets, tokenizer, settings, device,
                                            out / f"seed{seed}")
            logger.log_at(steps, {f"dev_{k}": v for k, v in scores.items()})
        entry = {"seed": seed, "scores": scores, "predictions": paths,
                 "final_train_loss": loss, "train_seconds": round(seconds, 2)}
        info = {"task": task.state(), "head_kind": task.head_kind,
                "num_outputs": task.num_outputs, "source_model": str(model_dir),
                "settings": resolved, "seed": seed, "scores": scores}
        if settings.save_all_seeds:
            entry["model"] = str(save_finetuned(model, out / f"seed{seed}" / "model", model_dir,
                                                info))
        if best is None or scores[key] > best:
            best = scores[key]
            save_finetuned(model, out / "model", model_dir, info)
        per_seed.append(entry)
        model.to("cpu")
    metric_keys = list(per_seed[0]["scores"])
    results = {
        "task": task.name,
        "metric_names": metric_keys,
        "primary_metric": key,
        "seeds": per_seed,
        "summary": {m: summary([s["scores"][m] for s in per_seed]) for m in metric_keys},
        "median": {m: statistics.median([s["scores"][m] for s in per_seed])
                   for m in metric_keys},
        "settings": resolved,
        "model": str(model_dir),
        "data": str(data_dir),
        "num_train_examples": len(train),
        "num_eval_examples": {s: len(e) for s, e in eval_sets.items()},
        "best_model": str(out / "model"),
    }
    write_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    return results

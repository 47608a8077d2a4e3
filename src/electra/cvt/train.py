"""The CVT training loop (sections 4.1.1, 4.1.2, 4.3.1, Table 4.1).

One step is a supervised minibatch (a task picked at random when there are several, with
probability proportional to the square root of its training set size as in the reference, 4.1.2)
followed, unless `cvt=False`, by an unlabeled minibatch (`unlabeled_ratio` of them on average;
one, as in 4.1.1, by default) on which every task's primary module, run without dropout and
without gradient, gives soft targets that every auxiliary module of every task learns to match
(KL). Each minibatch is its own SGD update (momentum 0.9, lr 0.5 / (1 + 0.005 sqrt(t)), t
counting updates, after a linear warm-up), gradients clipped to norm 1. An exponential moving
average of the weights (0.998) is what is evaluated and saved.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from electra.cli_support import show_progress
from electra.cvt.batch import Sampler, encode_words
from electra.cvt.config import CVTConfig
from electra.cvt.conll import Sentence
from electra.cvt.model import CVTModel, save_model_dir
from electra.cvt.modules import cvt_loss, supervised_loss
from electra.cvt.parsing import PARSING_VIEWS
from electra.cvt.tagging import TAGGING_VIEWS
from electra.cvt.tasks import CVTTask
from electra.cvt.vocab import Vocab
from electra.device import to_device
from electra.errors import ElectraError
from electra.model.card import RunFacts, write_model_card
from electra.precision import autocast, make_scaler
from electra.progress import Progress
from electra.runtime import checkpoint as ckpt
from electra.runtime.metrics_log import MetricsLogger
from electra.runtime.sinks import require_sinks
from electra.runtime.skeleton import StepLoop, Update
from electra.settings import RUN_FILE, SETTINGS_FILE

LOG_EVERY = 25  # steps between lines of OUT/metrics.jsonl


def labeled_loss(model: CVTModel, task: CVTTask, batch: dict[str, torch.Tensor],
                 cfg: CVTConfig) -> torch.Tensor:
    """L_sup on one task's minibatch: primary module, labeled dropout, label smoothing for
    tagging (4.3.1)."""
    enc = model.encode(batch, keep=cfg.keep_labeled)
    head = model.heads[task.name]
    targets = head.targets(batch)
    mask = enc.mask & (targets >= 0) if task.kind == "tag" else enc.mask & (batch["rels"] >= 0)
    smoothing = cfg.label_smoothing if task.kind == "tag" else 0.0
    return supervised_loss(head(enc), targets, mask, smoothing)


def unlabeled_loss(model: CVTModel, batch: dict[str, torch.Tensor], cfg: CVTConfig
                   ) -> tuple[torch.Tensor, dict[str, float]]:
    """L_CVT summed over all tasks' auxiliary modules (4.1.2: all tasks at once). The
    teachers are the primary modules without dropout, under no_grad (4.1.1, 4.3.1)."""
    with torch.no_grad():
        teacher_enc = model.encode(batch, keep=1.0)
        teachers = {name: head(teacher_enc) for name, head in model.heads.items()}
    enc = model.encode(batch, keep=cfg.keep_unlabeled)
    total = torch.zeros((), device=enc.mask.device)
    parts: dict[str, float] = {}
    for name, head in model.heads.items():
        for view, logits in head.auxiliary(enc).items():
            if cfg.aux_views is not None and view not in cfg.aux_views:
                continue
            loss = cvt_loss(teachers[name], logits, head.view_mask(view, enc))
            parts[f"{name}/{view}"] = loss.item()
            total = total + loss
    return total, parts


def _check_views(cfg: CVTConfig, data: RunData) -> None:
    """cvt.aux_views names views the tasks' heads have."""
    if cfg.aux_views is None:
        return
    known: set[str] = set()
    for task in data.tasks:
        known |= set(TAGGING_VIEWS if task.kind == "tag" else PARSING_VIEWS) | {"full"}
    unknown = [v for v in cfg.aux_views if v not in known]
    if unknown:
        raise ElectraError(f"cvt.aux_views: unknown view {unknown[0]!r} (these tasks have "
                           f"{', '.join(sorted(known))})")


class EMA:
    """Exponential moving average of every parameter and buffer. The decay is
    min(decay, (1 + n) / (10 + n)) after n updates (TensorFlow's num_updates rule). The
    reference uses a constant 0.998 from the initial weights, harmless over its hundreds of
    thousands of updates; at our few hundred it would leave the saved model close to the random
    initialisation, hence the ramp."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        self.updates = 0
        self.shadow = {k: v.detach().clone().float() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for k, v in model.state_dict().items():
            self.shadow[k].mul_(d).add_(v.detach().float(), alpha=1 - d)

    def apply_to(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Load the averaged weights into `model`; returns the live ones for `restore`."""
        live = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(self.shadow)
        return live


class RowSparseMomentum(torch.optim.SGD):
    """SGD with momentum where, for the matrices in `row_sparse` (embedding tables), only the
    rows the minibatch used (a nonzero gradient row) are updated: the others keep their value
    and their momentum. That is what the reference's one tf.train.MomentumOptimizer
    (multitask_model._get_optimizer) does with the IndexedSlices gradient of
    tf.nn.embedding_lookup; dense momentum would keep moving every word seen in the last ~10
    minibatches. The other parameters take torch's ordinary SGD step."""

    def __init__(self, params, lr: float, momentum: float,
                 row_sparse: Sequence[torch.Tensor] = ()):
        super().__init__(params, lr=lr, momentum=momentum)
        self.row_sparse = list(row_sparse)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        held = {id(p): p.grad for p in self.row_sparse}
        for p in self.row_sparse:
            p.grad = None  # torch's step skips them
        super().step()
        for group in self.param_groups:
            for p in group["params"]:
                grad = held.get(id(p))
                if grad is None:
                    continue
                p.grad = grad
                rows = grad.ne(0).any(1).nonzero().squeeze(1)
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf[rows] = group["momentum"] * buf[rows] + grad[rows]
                p[rows] -= group["lr"] * buf[rows]
        return loss


def make_optimizer(model: CVTModel, cfg: CVTConfig) -> torch.optim.SGD:
    """One optimizer for labeled and unlabeled updates, as in the reference (4.1.1)."""
    rows = ([model.encoder.word_embed.weight, model.encoder.chars.embed.weight]
            if cfg.sparse_embedding_momentum else [])
    return RowSparseMomentum(model.parameters(), cfg.lr, cfg.momentum, rows)


def lr_factor(cfg: CVTConfig):
    def factor(t: int) -> float:
        warm = min(1.0, (t + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        return warm / (1.0 + cfg.lr_decay * math.sqrt(t))
    return factor


@torch.no_grad()
def predict(model: CVTModel, task: CVTTask, sents: Sequence[Sentence], vocab: Vocab,
            batch_size: int = 64) -> list:
    """Primary-module predictions, in input order (batches of similar length for speed)."""
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(sents)), key=lambda i: len(sents[i].words))
    preds: list[Any] = [None] * len(sents)
    for start in range(0, len(order), batch_size):
        idx = order[start: start + batch_size]
        batch = encode_words([sents[i].words for i in idx], vocab, model.cfg.max_word_len)
        head = model.heads[task.name]
        decoded = head.decode(head(model.encode(to_device(batch, device), keep=1.0)))
        for i, p in zip(idx, task.to_strings(decoded, batch["lengths"].tolist()), strict=True):
            preds[i] = p
    return preds


@dataclass
class RunData:
    tasks: list[CVTTask]
    train: dict[str, list[Sentence]]
    dev: dict[str, list[Sentence]]
    unlabeled: list[list[str]] = field(default_factory=list)


def _labeled_batch(task: CVTTask, sents: list[Sentence], vocab: Vocab, cfg: CVTConfig):
    batch = encode_words([s.words for s in sents], vocab, cfg.max_word_len)
    batch.update(task.targets(sents, batch["words"].shape[1]))
    return batch


def _save_checkpoint(out: Path, step: int, model, update: Update, ema: EMA,
                     samplers: dict[str, Sampler], state: dict[str, Any]) -> None:
    def write(tmp: Path) -> None:
        ckpt.write_main(tmp, model, update.optimizer, update.scheduler, step, untied=True,
                        scaler=update.scaler)  # untied: cuDNN LSTMs
        save_file({k: v.cpu().contiguous() for k, v in ema.shadow.items()},
                  str(tmp / "ema.safetensors"))
        torch.save({"samplers": {k: s.state_dict() for k, s in samplers.items()},
                    "ema_updates": ema.updates, **state}, tmp / "cvt_state.pt")

    ckpt.save(out, step, write, {"kind": "cvt", "settings": SETTINGS_FILE, "run": RUN_FILE},
              keep=2)


def supervised_task_index(sizes: list[int], seed: int, step: int) -> int:
    """Which task a multi-task run's supervised step `step` trains. Section 4.1.2 picks "a task
    at random"; the reference weights each by the square root of its training-set size. The
    draw depends on (seed, step) only, so a resumed run repeats it."""
    weights = [math.sqrt(n) for n in sizes]
    return random.Random(seed * 1_000_003 + step).choices(range(len(sizes)), weights)[0]


def unlabeled_minibatches(ratio: float, step: int) -> int:
    """How many unlabeled minibatches follow labeled step STEP (0-based) so that after n steps
    floor(n * ratio) have been taken; a function of the step alone, so a resumed run repeats it."""
    return math.floor((step + 1) * ratio + 1e-9) - math.floor(step * ratio + 1e-9)


@dataclass
class _Training:
    """What the steps of one run share: the model, its update (optimizer, schedule, EMA, loss
    scale), the samplers and where the run stands."""

    model: CVTModel
    update: Update
    ema: EMA
    scheduler: torch.optim.lr_scheduler.LambdaLR
    samplers: dict[str, Sampler]
    start: int
    elapsed: float


def train(cfg: CVTConfig, data: RunData, vocab: Vocab, out: Path, steps: int, cvt: bool,
          seed: int, resume: bool = False, save_every: int = 0,
          progress: bool | Progress | None = None,
          model: CVTModel | None = None, precision: str = "fp32",
          report_to: Sequence[str] = ()) -> dict[str, Any]:
    """Train, save OUT/model (EMA weights), score dev, write dev predictions; returns the
    results (`run_train` writes them to OUT/results.json). `precision`: a resolved one
    (`electra.precision`), for the training steps' autocast (and fp16's loss scaling).
    `progress`: a `Progress` (True: the bar, False: nothing; None: the command line's choice,
    `electra.cli_support.show_progress`). `report_to`: sinks that also get the settings, the
    metrics and the dev scores (`electra.runtime.sinks`)."""
    if cvt and not data.unlabeled:
        raise ElectraError("CVT needs unlabeled sentences (--unlabeled), or pass --no-cvt")
    _check_views(cfg, data)
    require_sinks(report_to)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    run = _start(cfg, data, vocab, out, steps, cvt, seed, resume, model, precision)
    log = MetricsLogger(out, resume_step=run.start, report_to=report_to)
    try:
        log.hyperparameters({"cvt": cfg.to_dict(), "train": {
            "steps": steps, "cvt": cvt, "seed": seed, "precision": precision}})
        show = show_progress() if progress is None else progress
        last = _steps(run, data, vocab, out, steps, cvt, seed, save_every, cfg, precision,
                      show, log)
        if steps > run.start:
            _save_checkpoint(out, steps, run.model, run.update, run.ema, run.samplers,
                             {"elapsed": run.elapsed})
        results = finish(run.model, run.ema, data, vocab, out, {
            "steps": steps, "cvt": cvt, "seed": seed, "precision": precision,
            "train_seconds": round(run.elapsed, 1), "last_losses": last})
        log.finish({f"{task}/{metric}": value for task, scores in results["scores"].items()
                    for metric, value in scores.items()})
        return results
    finally:
        log.close()


def _start(cfg: CVTConfig, data: RunData, vocab: Vocab, out: Path, steps: int, cvt: bool,
           seed: int, resume: bool, model: CVTModel | None, precision: str) -> _Training:
    """The model, its optimizer, EMA and samplers, from OUT's latest checkpoint when
    resuming."""
    model = model or CVTModel(cfg, vocab, data.tasks)
    device = next(model.parameters()).device  # the caller's choice (run.run_train: --device)
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg))
    ema = EMA(model, cfg.ema_decay)
    samplers = {t.name: Sampler([len(s.words) for s in data.train[t.name]], cfg.batch_size,
                                seed + i) for i, t in enumerate(data.tasks)}
    if cvt:
        samplers["<unlabeled>"] = Sampler([len(w) for w in data.unlabeled], cfg.batch_size,
                                          seed + 1000)
    start, elapsed = 0, 0.0
    scaler = make_scaler(device, precision)
    latest = ckpt.find_latest(out) if resume else None
    if latest is not None:
        start = ckpt.load(latest, model, optimizer, scheduler, rank=0, untied=True,
                          scaler=scaler)
        if start > steps:
            raise ElectraError(f"{latest}: this run is already at step {start}, past the "
                               f"{steps} steps asked for; ask for at least {start}, or use "
                               "a new --out")
        ema.shadow = load_file(str(latest / "ema.safetensors"), device=str(device))
        state = torch.load(latest / "cvt_state.pt", weights_only=False)
        ema.updates = state["ema_updates"]
        for k, s in samplers.items():
            s.load_state_dict(state["samplers"][k])
        elapsed = state["elapsed"]
    # Each minibatch, labeled or unlabeled, is its own update, followed by the EMA's (4.3.1).
    update = Update(optimizer, scheduler, list(model.parameters()), cfg.grad_clip or None,
                    after=lambda: ema.update(model), scaler=scaler)
    return _Training(model, update, ema, scheduler, samplers, start, elapsed)


def _steps(run: _Training, data: RunData, vocab: Vocab, out: Path, steps: int, cvt: bool,
           seed: int, save_every: int, cfg: CVTConfig, precision: str,
           show: bool | Progress, log: MetricsLogger) -> dict[str, Any]:
    """Labeled steps from `run.start` to `steps`, each followed under CVT by its unlabeled
    minibatches; returns the last step's losses. SIGTERM/SIGUSR1 (a scheduler's warning):
    finish the step, checkpoint, stop (EXIT_PREEMPTED)."""
    model, update, samplers = run.model, run.update, run.samplers
    device = next(model.parameters()).device
    sizes = [len(data.train[t.name]) for t in data.tasks]
    t0 = time.time()
    last: dict[str, Any] = {}
    with StepLoop(steps, run.start, "cvt" if cvt else "supervised", show) as loop:
        while loop.running:
            model.train()
            task = data.tasks[supervised_task_index(sizes, seed, loop.step)]
            sents = [data.train[task.name][i] for i in samplers[task.name].next()]
            batch = to_device(_labeled_batch(task, sents, vocab, cfg), device)
            with autocast(device, precision):
                sup = labeled_loss(model, task, batch, cfg)
            update.backward(sup)
            loop.update(update, sup.detach())
            last = {"sup": sup.item(), "task": task.name}
            for _ in range(unlabeled_minibatches(cfg.unlabeled_ratio, loop.step) if cvt else 0):
                words = [data.unlabeled[i] for i in samplers["<unlabeled>"].next()]
                batch = to_device(encode_words(words, vocab, cfg.max_word_len), device)
                with autocast(device, precision):
                    loss, _ = unlabeled_loss(model, batch, cfg)
                weighted = cfg.cvt_weight * loss
                update.backward(weighted)
                loop.update(update, weighted.detach())
                last["cvt"] = loss.item()
            shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in last.items()}
            done = loop.end_step(shown)
            if loop.due(LOG_EVERY):
                log.log({"step": done, "lr": run.scheduler.get_last_lr()[0], **last,
                         "seconds": round(run.elapsed + time.time() - t0, 3)})
                loop.report(shown)
            if done < steps and (loop.stopping or (save_every and done % save_every == 0)):
                _save_checkpoint(out, done, model, update, run.ema, samplers,
                                 {"elapsed": run.elapsed + time.time() - t0})
            if loop.stopping:
                loop.preempt(f"; checkpoint {ckpt.find_latest(out)} written; continue with "
                             "the same command plus --resume")
    run.elapsed += time.time() - t0
    return last


def finish(model: CVTModel, ema: EMA, data: RunData, vocab: Vocab, out: Path,
           info: dict[str, Any]) -> dict[str, Any]:
    """Swap in the EMA weights (4.3.1), save them as OUT/model, score every task's dev set."""
    ema.apply_to(model)
    save_model_dir(out / "model", model, ema.shadow, vocab, data.tasks)
    results: dict[str, Any] = {**info, "model": str(out / "model"),
                               "config": model.cfg.to_dict(),
                               "train_sentences": {k: len(v) for k, v in data.train.items()},
                               "unlabeled_sentences": len(data.unlabeled) if info["cvt"] else 0,
                               "scores": {}, "predictions": {}}
    for task in data.tasks:
        preds = predict(model, task, data.dev[task.name], vocab, model.cfg.batch_size)
        results["scores"][task.name] = task.score(data.dev[task.name], preds)
        path = task.write(out / f"{task.name}_dev_predictions{task.suffix}",
                          data.dev[task.name], preds)
        results["predictions"][task.name] = str(path)
    write_model_card(out / "model", RunFacts(steps=info["steps"], objective="cvt" if info["cvt"]
                                             else "supervised",
                                             seeds=[{"seed": info["seed"],
                                                     "scores": results["scores"]}]))
    return results

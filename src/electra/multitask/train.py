"""`electra multitask`: one shared encoder fine-tuned on several tasks at once, one head per
task (dissertation section 3.2.1), optionally distilled from teachers (section 3.2.2).

Defaults follow section 3.3's multi-task recipe: layer-wise LR decay 0.9, learning rate 1e-4
for base-size models, batch 128, 6 epochs, task sampling proportional to |D|^0.75. Smaller
models get the learning rate `finetune` gives them (Table 5.2: 3e-4 for small/tiny, the same
1e-4 for base as the multi-task recipe); large keeps the paper's 1e-4 (it fine-tuned
BERT-Large with it).

OUT/results.json: per-task medians, the average over tasks and the GLUE score where the tasks
allow, each seed's scores, settings and teachers. OUT/<task>/results.json: that task's results
in `finetune`'s layout (per-seed scores and prediction files, median/mean/std).
OUT/seed<k>/<task>/dev_predictions.jsonl, OUT/seed<k>/metrics.jsonl, OUT/model: the best seed
(by average score), a model directory `electra evaluate` / `electra predict` accept.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.config import read_config_json
from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.finetuning.data import batches_from_order, feature_lengths
from electra.finetuning.evaluation import evaluate_splits, primary_key
from electra.finetuning.examples import eval_sets_of, train_examples_of
from electra.finetuning.heads import MultitaskModel, make_head
from electra.finetuning.model_io import load_source, source_dir
from electra.finetuning.results import task_results
from electra.finetuning.resume import check_same_run, data_digest, fingerprint, model_digest
from electra.finetuning.seeds import SeedRunner, SeedScores
from electra.finetuning.settings import FinetuneSettings, learning_rates
from electra.finetuning.training import TrainPlan
from electra.hub import source_record
from electra.multitask import distill
from electra.multitask.mixture import TaskMixture, check_mixable, collate_mixture
from electra.multitask.sampling import DEFAULT_EXPONENT, MixtureSampler
from electra.precision import device_and_precision
from electra.presets import multitask_defaults
from electra.progress import Progress
from electra.settings import SETTINGS_FILE, Sources, write_run_record, write_settings
from electra.tasks import Task, get_task
from electra.tasks.base import Example
from electra.tasks.glue import task_summary
from electra.tokenizer import special_token_ids

STS_RANGE = (0.0, 5.0)  # STS-B similarity scores, normalised to [0, 1] (section 3.2.1)
USER_TASK_FILE = "task.json"


@dataclass
class MultitaskSettings(FinetuneSettings):
    batch_size: int = 128
    epochs: float | None = 6.0
    # Section 3.2.1 mixes tasks "even within minibatches"; grouping by length would give
    # long-input tasks (RTE) batches of their own, so it is opt-in here.
    length_sorted: bool = False
    task_sampling: bool = True  # off: every example once per epoch, shuffled together
    sampling_exponent: float = DEFAULT_EXPONENT
    teacher_annealing: str = "on"  # on (lambda 0 -> 1), off (lambda = 0) or a fixed lambda

    def validate(self) -> None:
        super().validate()
        if self.sampling_exponent < 0:
            raise ElectraError(f"--sampling-exponent must be >= 0, got {self.sampling_exponent}")
        distill.Annealing.parse(self.teacher_annealing)


def resolve_task(name: str, data_dir: str | Path) -> tuple[Task, Path]:
    """A task multi-task training can mix, and the folder its reader takes: a task of the
    registry (`electra.tasks`: the GLUE tasks, in DATA/<name>/), or a user task DATA/<name>/
    described by DATA/<name>/task.json ({"text_a", "text_b", "label", "label_type"}, as
    `finetune --task user` takes them)."""
    data_dir = Path(data_dir)
    task = _registry_task(name)
    if task is None:
        return _user_task(name, data_dir), data_dir
    check_mixable(task)
    if not (data_dir / task.name).is_dir():
        raise ElectraError(f"task {task.name}: no folder {data_dir / task.name} "
                           "(--data is the folder holding CoLA/, SST-2/, ...)")
    if task.regression:  # STS-B
        task.label_range = STS_RANGE
    return task, data_dir


def _registry_task(name: str) -> Task | None:
    """The registry's task by that name; None for a name it cannot build alone (a user task)."""
    try:
        return get_task(name)
    except ElectraError:
        return None


def _user_task(name: str, data_dir: Path) -> Task:
    spec = data_dir / name / USER_TASK_FILE
    if not spec.is_file():
        raise ElectraError(f"task {name}: not a GLUE task and no {spec} describing its columns "
                           '(e.g. {"text_a": "sentence", "label": "label"})')
    options = read_config_json(spec)
    if not isinstance(options, dict):
        raise ElectraError(f"{spec}: expected a JSON object of column names")
    unknown = set(options) - {"text_a", "text_b", "label", "label_type"}
    if unknown:
        raise ElectraError(f"{spec}: unknown key(s) {sorted(unknown)}")
    return get_task("user", **options, task_name=name)


def read_task_data(task: Task, folder: Path, settings: FinetuneSettings
                   ) -> tuple[list[Example], dict[str, list[Example]]]:
    """Training examples (the first max_train_examples) and dev sets; any reading error names
    the task as well as the file."""
    try:
        train = train_examples_of(task, folder, settings)
        evals = eval_sets_of(task, folder, settings)
    except ElectraError as e:
        raise ElectraError(f"task {task.name}: {e}") from None
    if getattr(task, "regression", False) and task.label_range is None:
        values = [float(ex.label) for ex in train]
        if max(values) == min(values):
            raise ElectraError(f"task {task.name}: every training label is {values[0]}; "
                               "regression needs a range to normalise to [0, 1]")
        task.label_range = (min(values), max(values))
    return train, evals


def run_multitask(model_dir: str | Path, task_names: list[str], data_dir: str | Path,
                  out_dir: str | Path, settings: MultitaskSettings | None = None,
                  teachers: list[str | Path] | None = None,
                  show_progress: bool | Progress = False,
                  extra_info: dict | None = None, sources: Sources | None = None) -> dict:
    """Train `settings.seeds` multi-task models; write and return OUT/results.json. Nothing is
    written under OUT until every task's data and every teacher have been checked. `sources`:
    where each setting came from (`electra.settings.resolve`), for OUT/run.json."""
    from electra.runtime.speed import configure_process_for_speed

    settings = settings or MultitaskSettings()
    settings.validate()
    annealing = distill.Annealing.parse(settings.teacher_annealing)
    if len(set(task_names)) != len(task_names) or not task_names:
        raise ElectraError(f"--tasks must name distinct tasks, got {task_names}")
    configure_process_for_speed()
    device, precision = device_and_precision(settings.device, settings.precision)
    settings = dataclasses.replace(settings, precision=precision)  # the caller's stays
    model_dir = source_dir(model_dir)  # a pre-training checkpoint: its exported discriminator
    encoder, tokenizer, _ = load_source(model_dir)
    settings.check_model(encoder.config)
    # section 3.3, from the size's preset
    size, lr, decay = learning_rates(settings, encoder.config.hidden_size, multitask_defaults)
    settings = dataclasses.replace(settings, max_seq_len=settings.max_seq_len or 128)

    tasks: dict[str, Task] = {}
    data: dict[str, tuple[list[Example], dict[str, list[Example]]]] = {}
    for name in task_names:
        task, folder = resolve_task(name, data_dir)
        data[task.name] = read_task_data(task, folder, settings)
        tasks[task.name] = task
    features = {name: tasks[name].featurize(data[name][0], tokenizer, settings.max_seq_len)
                for name in tasks}
    matched = distill.match_teachers(teachers or [], tasks, tokenizer.get_vocab())
    for name, teacher_dir in matched.items():
        outputs = distill.teacher_predictions(teacher_dir, name, data[name][0],
                                              settings.max_seq_len, settings, device)
        for f, row in zip(features[name], distill.student_rows(tasks[name], outputs,
                                                               features[name]), strict=True):
            f["teacher"] = row

    out = Path(out_dir)
    used = dataclasses.replace(settings, lr=lr, layerwise_decay=decay, size=size)
    resolved = {**dataclasses.asdict(used), "tasks": list(tasks),
                "annealing": annealing.describe(), **(extra_info or {})}
    teacher_info = {name: str(matched.get(name)) if name in matched else None for name in tasks}
    run_key = fingerprint(resolved, model=model_digest(model_dir),
                          tasks=[t.state() for t in tasks.values()],
                          data={"sha256": data_digest(*(d for pair in data.values()
                                                        for d in pair))},
                          teachers={name: model_digest(d) for name, d in matched.items()})
    # a rerun continues; another configuration (or other data) is refused
    check_same_run(out, run_key, str(Path(data_dir).resolve()))
    out.mkdir(parents=True, exist_ok=True)
    pad_id = special_token_ids(tokenizer)["pad"]
    write_settings(out, {"multitask": used})
    write_run_record(out, {**source_record(model_dir, "model"), "tasks": list(tasks),
                           "data": str(data_dir),
                           "teachers": [str(t) for t in teachers or []],
                           "settings": SETTINGS_FILE,
                           "sources": sources.to_json() if sources is not None else None})

    job = MultitaskJob(tasks, data, features, pad_id, annealing, tokenizer, settings, device, out,
                       model_dir, resolved, teacher_info)
    runner = SeedRunner(model_dir, encoder, settings, device, out, lr, decay, settings.epochs,
                        show_progress, run_key)
    return _write_results(out, tasks, data, runner.run(job), resolved, teacher_info, model_dir,
                          data_dir)


@dataclass
class MultitaskJob:
    """`multitask`'s part of the seed loop (a `SeedJob`): one head per task, mixed batches
    (a new sampler per seed), ranked by the average of the tasks' primary metrics."""

    tasks: dict[str, Task]
    data: dict[str, tuple[list[Example], dict[str, list[Example]]]]  # (train, dev sets)
    features: dict[str, list[dict]]  # training features, with teacher targets where given
    pad_id: int
    annealing: distill.Annealing
    tokenizer: object
    settings: MultitaskSettings
    device: torch.device
    out: Path
    model_dir: str | Path
    resolved: dict  # the settings recorded with each kept model
    teachers: dict[str, str | None]

    def new_model(self, encoder: torch.nn.Module) -> MultitaskModel:
        return MultitaskModel(encoder, {
            name: make_head(t.head_kind, encoder.config, t.num_outputs, self.settings.dropout)
            for name, t in self.tasks.items()})

    def plan(self) -> TrainPlan:
        return _plan(self.tasks, self.features, self.settings, self.pad_id, self.annealing)

    def evaluate(self, model: MultitaskModel, seed: int) -> SeedScores:
        scores, paths = {}, {}
        for name, task in self.tasks.items():
            scores[name], paths[name] = evaluate_splits(
                model.single(name), task, self.data[name][1], self.tokenizer, self.settings,
                self.device, self.out / f"seed{seed}" / name)
        average = statistics.fmean(scores[n][primary_key(t)] for n, t in self.tasks.items())
        return SeedScores(scores, paths, {f"dev_{n}_{m}": v for n, s in scores.items()
                                          for m, v in s.items()},
                          rank=average, extra={"average": average})

    def model_info(self, seed: int, scores: dict) -> dict:
        return {"tasks": [{"task": t.state(), "head_kind": t.head_kind,
                           "num_outputs": t.num_outputs} for t in self.tasks.values()],
                **source_record(self.model_dir, "source_model"), "settings": self.resolved,
                "seed": seed,
                "scores": scores, "teachers": self.teachers}


def _plan(tasks: dict[str, Task], features: dict[str, list[dict]],
          settings: MultitaskSettings, pad_id: int, annealing: distill.Annealing) -> TrainPlan:
    """Mixed batches from the sampler; teacher targets for the tasks that have a teacher."""
    items = [(name, f) for name in tasks for f in features[name]]
    lengths = feature_lengths([f for _, f in items])
    sampler = MixtureSampler([len(features[n]) for n in tasks],
                             settings.sampling_exponent if settings.task_sampling else None)

    def epoch(gen: torch.Generator) -> list[list[int]]:
        return batches_from_order(sampler.epoch(gen), lengths, settings.batch_size, gen,
                                  settings.length_sorted)

    def collate(idx: list[int], progress: float) -> dict:
        lam = annealing.weight(progress)

        def targets(name: str, part: dict, feats: list[dict]) -> dict:
            if "teacher" not in feats[0]:
                return part
            return distill.add_targets(tasks[name], part, [f["teacher"] for f in feats], lam)

        return collate_mixture([items[i] for i in idx], tasks, pad_id, targets)

    steps_per_epoch = -(-len(items) // settings.batch_size)
    return TrainPlan("multitask", steps_per_epoch, epoch, collate, TaskMixture(tasks))


def _write_results(out: Path, tasks: dict[str, Task], data: dict, per_seed: list[dict],
                   resolved: dict, teachers: dict, model_dir, data_dir) -> dict:
    per_task = {}
    for name, task in tasks.items():
        seeds = [{"seed": s["seed"], "scores": s["scores"][name],
                  "predictions": s["predictions"][name]} for s in per_seed]
        task_result = task_results(task, seeds, resolved, model_dir, data_dir, data[name][0],
                                   data[name][1], out, teacher=teachers[name])
        write_atomic(out / name / "results.json", json.dumps(task_result, indent=2) + "\n")
        per_task[name] = task_result
    medians = {n: (r["primary_metric"], r["median"][r["primary_metric"]])
               for n, r in per_task.items()}
    results = {
        "tasks": {n: {"metric": r["primary_metric"], "median": r["median"][r["primary_metric"]],
                      "medians": r["median"], "results": str(out / n / "results.json")}
                  for n, r in per_task.items()},
        **task_summary(medians),
        "seeds": [{"seed": s["seed"], "average": 100 * s["average"], "steps": s["steps"],
                   "train_seconds": s["train_seconds"]} for s in per_seed],
        "settings": resolved, "teachers": teachers, **source_record(model_dir, "model"),
        "data": str(data_dir), "best_model": str(out / "model"),
    }
    write_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    return results

"""Entry points behind `electra cvt`: train (supervised or CVT, one or several tasks),
evaluate a saved model on a dev/test split, predict a file."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from electra.cvt.config import RESUMABLE_CHANGES, CVTConfig, CVTTrainConfig, make_config
from electra.cvt.model import CVTModel, load_model_dir
from electra.cvt.tasks import CVTTask
from electra.cvt.train import RunData, predict, train
from electra.cvt.unlabeled import load_sentences
from electra.cvt.vocab import (
    Vocab,
    build_vocab,
    check_vector_dim,
    init_embeddings,
    read_word_vectors,
    vector_rows,
)
from electra.errors import ElectraError
from electra.fileutil import write_atomic
from electra.precision import device_and_precision
from electra.progress import Progress
from electra.settings import (
    RUN_FILE,
    SETTINGS_FILE,
    Sources,
    write_run_record,
    write_settings,
)


def data_dirs(tasks: Sequence[str], data: Sequence[str]) -> dict[str, Path]:
    """`--data DIR` for one task, or `--data TASK=DIR` for each of several."""
    if len(data) == 1 and "=" not in data[0]:
        if len(tasks) != 1:
            raise ElectraError("several tasks need --data TASK=DIR for each of them")
        return {tasks[0]: Path(data[0])}
    dirs: dict[str, Path] = {}
    for item in data:
        name, sep, path = item.partition("=")
        if not sep:
            raise ElectraError(f"--data {item!r}: expected TASK=DIR with several tasks")
        if name not in tasks:
            raise ElectraError(f"--data {item!r}: {name!r} is not in --tasks")
        dirs[name] = Path(path)
    missing = [t for t in tasks if t not in dirs]
    if missing:
        raise ElectraError(f"no --data for task(s) {', '.join(missing)}")
    return dirs


def subset(sents: list, n: int | None) -> list:
    """A fixed random subset (seed 0, whatever the run's seed), so supervised and CVT runs
    and all seeds see the same labeled sentences."""
    if not n or n >= len(sents):
        return sents
    idx = sorted(random.Random(0).sample(range(len(sents)), n))
    return [sents[i] for i in idx]


@dataclass(kw_only=True)
class TrainSettings(CVTTrainConfig):
    """A CVT run: the `train` section's values (CVTTrainConfig's fields), the `cvt` section
    (`config`; None: the preset's) and what is not a setting, the data and where it goes."""

    tasks: list[str]
    data: list[str]
    out: str
    preset: str = "small"
    config: CVTConfig | None = None
    unlabeled: list[str] = field(default_factory=list)
    text_field: str = "text"
    word_vectors: str | None = None
    resume: bool | str = False  # True or "auto": continue OUT's run where it holds one
    device: str = "auto"  # auto: CUDA where there is one
    sources: Sources | None = None  # where each setting came from (electra.settings.resolve)
    report_to: list[str] = field(default_factory=list)  # sinks (electra.runtime.sinks)

    def train_section(self) -> CVTTrainConfig:
        return CVTTrainConfig(**{f.name: getattr(self, f.name)
                                 for f in dataclasses.fields(CVTTrainConfig)})

    def run_record(self) -> dict[str, Any]:
        """OUT/run.json: what the run reads that is not a setting."""
        return {"tasks": self.tasks, "data": self.data, "unlabeled": self.unlabeled,
                "text_field": self.text_field, "word_vectors": self.word_vectors,
                "settings": SETTINGS_FILE,
                "sources": self.sources.to_json() if self.sources is not None else None}


def _check_resumable(out: Path, s: TrainSettings, settings: dict[str, Any]) -> None:
    """A resumed run must read the same data with the same settings, but for
    RESUMABLE_CHANGES."""
    try:
        saved = json.loads((out / SETTINGS_FILE).read_text())
        record = json.loads((out / RUN_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        raise ElectraError(f"{out}: unreadable {SETTINGS_FILE} or {RUN_FILE}; cannot resume"
                           ) from None

    def fixed(settings: dict[str, Any]) -> dict[str, Any]:
        return {**settings, "train": {k: v for k, v in settings.get("train", {}).items()
                                      if k not in RESUMABLE_CHANGES}}

    def data(record: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if k != "sources"}

    as_saved = json.loads(json.dumps({"settings": settings, "record": s.run_record()}))
    if (fixed(saved) != fixed(as_saved["settings"])
            or data(record) != data(as_saved["record"])):
        raise ElectraError(f"{out / SETTINGS_FILE}: --resume with different settings or data "
                           "than the run being resumed")


def run_train(s: TrainSettings, progress: bool | Progress | None = None) -> dict[str, Any]:
    s.train_section().validate()
    cfg = s.config if s.config is not None else make_config(s.preset)
    cfg.validate()
    device, precision = device_and_precision(s.device, s.precision)
    dirs = data_dirs(s.tasks, s.data)
    tasks = [CVTTask(name) for name in s.tasks]
    train_sets, dev_sets = {}, {}
    for task in tasks:  # read everything first: a bad file fails before any training
        train_sets[task.name] = subset(task.read_file(task.find(dirs[task.name], "train")),
                                       s.train_sentences)
        dev_sets[task.name] = task.read_file(task.find(dirs[task.name], "dev"))
        task.set_labels(train_sets[task.name])
    unlabeled = (load_sentences(s.unlabeled, s.max_unlabeled, s.text_field,
                                cfg.max_unlabeled_len) if s.unlabeled else [])
    if s.cvt and not unlabeled:
        raise ElectraError("CVT needs unlabeled sentences: --unlabeled gave none"
                           if s.unlabeled else "CVT needs --unlabeled CORPUS (or --no-cvt)")
    out = Path(s.out)
    settings = {"preset": s.preset, "cvt": cfg.to_dict(),
                "train": dataclasses.asdict(s.train_section())}
    fresh = not (s.resume and (out / RUN_FILE).exists())
    vectors = None
    if not fresh:
        _check_resumable(out, s, settings)
        vocab = Vocab.from_json(json.loads((out / "vocab.json").read_text()))
    else:
        vectors = read_word_vectors(s.word_vectors, cfg.max_vocab) if s.word_vectors else None
        if vectors is not None:  # checked before OUT is written: nothing half-made on error
            check_vector_dim(s.word_vectors, vectors[1], cfg.word_dim)
        vocab = build_vocab([x.words for v in train_sets.values() for x in v], unlabeled,
                            cfg.max_vocab, vectors[0] if vectors else ())
        out.mkdir(parents=True, exist_ok=True)
        write_run_record(out, s.run_record())
        (out / "vocab.json").write_text(json.dumps(vocab.to_json()) + "\n")
    write_settings(out, settings)  # a resume may have changed how long it trains
    torch.manual_seed(s.seed)
    model = CVTModel(cfg, vocab, tasks)
    found = 0
    if vectors is not None:  # a resumed run restores its (trained) embeddings instead
        found = init_embeddings(model.encoder.word_embed.weight, vocab, *vectors)
    elif s.word_vectors:  # resumed: count what its start copied in, for results.json
        found = len(vector_rows(vocab, read_word_vectors(s.word_vectors, cfg.max_vocab)[0]))
    if s.steps is not None:
        steps = s.steps
    else:
        per_epoch = sum(-(-len(v) // cfg.batch_size) for v in train_sets.values())
        steps = max(1, round(s.epochs * per_epoch))
    data = RunData(tasks, train_sets, dev_sets, unlabeled)
    results = train(cfg, data, vocab, out, steps, s.cvt, s.seed, bool(s.resume), s.save_every,
                    progress, model=model.to(device), precision=precision,
                    report_to=s.report_to)
    results["vocab_size"] = len(vocab.words)
    results["word_vectors"] = ({"file": s.word_vectors, "found": found} if s.word_vectors
                               else "random initialisation")
    write_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    return results


def _task_of(tasks: list[CVTTask], name: str | None) -> CVTTask:
    if name is None:
        if len(tasks) > 1:
            raise ElectraError(f"the model has tasks {', '.join(t.name for t in tasks)}: "
                               "name one with --task")
        return tasks[0]
    for t in tasks:
        if t.name == name:
            return t
    raise ElectraError(f"the model has no task {name!r}")


def run_evaluate(model_dir: str, data: Sequence[str], out: str, split: str = "dev"
                 ) -> dict[str, Any]:
    """Score a saved model on each of its tasks' `split`; writes predictions + results.json."""
    model, vocab, tasks = load_model_dir(model_dir)
    dirs = data_dirs([t.name for t in tasks], data)
    res: dict[str, Any] = {"model": model_dir, "split": split, "scores": {}, "predictions": {}}
    # every task's file is read before any prediction is written: a bad one leaves no output
    split_sents = {t.name: t.read_file(t.find(dirs[t.name], split)) for t in tasks}
    for task in tasks:
        sents = split_sents[task.name]
        preds = predict(model, task, sents, vocab)
        res["scores"][task.name] = task.score(sents, preds)
        res["predictions"][task.name] = str(task.write(
            Path(out) / f"{task.name}_{split}_predictions{task.suffix}", sents, preds))
    write_atomic(Path(out) / "results.json", json.dumps(res, indent=2) + "\n")
    return res


def run_predict(model_dir: str, input_file: str, output: str, task_name: str | None = None
                ) -> dict[str, Any]:
    """Predict a file in the task's format (labels, if there, are ignored; a tagging file
    may hold words alone) and write CoNLL-style output: `word [gold] pred` for tagging,
    CoNLL-U for dep."""
    model: CVTModel
    model, vocab, tasks = load_model_dir(model_dir)
    task = _task_of(tasks, task_name)
    sents = task.read_file(input_file, labeled=False)
    preds = predict(model, task, sents, vocab)
    task.write(output, sents, preds)
    return {"task": task.name, "sentences": len(sents), "output": output}

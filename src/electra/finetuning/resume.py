"""What lets a fine-tuning run (`finetune`, `multitask`) continue where it stopped when the same
command runs again: each seed's checkpoints while it trains (OUT/seed<k>/checkpoints, written by
`electra.runtime.checkpoint`), each finished seed's record (OUT/seed<k>/seed.json: its entry of
results.json, so it is not trained again), and the run's fingerprint, which both carry, so that
OUT holding another configuration's progress is refused instead of mixed in."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.fileutil import sha256_file, write_atomic
from electra.runtime import checkpoint
from electra.tasks.base import Example

SEED_RECORD = "seed.json"
# Settings a rerun may change without changing what any seed computes: the number of seeds
# (more seeds continue a run; see `SeedRunner`), the checkpoint cadence and where the metrics
# are also reported (a run started before `report_to` existed continues too).
FREE_SETTINGS = ("seeds", "save_every", "tensorboard", "report_to")
KEEP_CHECKPOINTS = 1  # per seed: a checkpoint holds the model and AdamW's two moments


def fingerprint(settings: Mapping[str, Any], **identity: Any) -> dict[str, Any]:
    """What a seed's result depends on, as JSON reads it back: the resolved settings (less
    `FREE_SETTINGS`) and `identity` (the model's `model_digest`, the data, the tasks)."""
    kept = {k: v for k, v in settings.items() if k not in FREE_SETTINGS}
    return json.loads(json.dumps({"settings": kept, **identity}, sort_keys=True))


def data_digest(*example_sets: Sequence[Example] | Mapping[str, Sequence[Example]]) -> str:
    """The sha256 of the examples a run read (texts, words, labels, tags, ids; not where they
    lie), so that a run is "the same" only on the same data, whatever folder holds it and
    whatever changed in it."""
    digest = hashlib.sha256()
    for examples in example_sets:
        groups = examples.items() if isinstance(examples, Mapping) else [("", examples)]
        for name, group in groups:
            digest.update(name.encode() + b"\0")
            for ex in group:
                digest.update(json.dumps([ex.texts, ex.label, ex.words, ex.tags, ex.uid],
                                         default=str).encode() + b"\n")
    return digest.hexdigest()


def seed_dir(out: Path, seed: int) -> Path:
    return out / f"seed{seed}"


def _seed_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("seed[0-9]*") if p.is_dir())


def model_digest(model_dir: str | Path) -> dict[str, str]:
    """The sha256 of a model directory's config, weights and vocabulary: a run continues only
    from the same weights, wherever they lie (a demo pre-trains anew into the same path)."""
    d = Path(model_dir)
    names = ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json",
             "vocab.txt")
    return {name: sha256_file(d / name) for name in names if (d / name).is_file()}


def check_same_run(out: Path, run: dict[str, Any], data_folder: str | None = None) -> None:
    """Refuse (before anything is written) when OUT holds progress of another configuration:
    a finished seed's record or a checkpoint whose fingerprint differs from `run`. A record
    written before data was compared by content names its data folder instead: it matches
    when that is `data_folder`."""
    for path in _seed_dirs(out):
        saved = _saved_fingerprint(path)
        if saved is not None and data_folder is not None and saved.get("data") == data_folder:
            saved = {**saved, "data": run.get("data")}
        if saved is not None and isinstance(saved.get("settings"), dict):  # as fingerprint keeps
            saved = {**saved, "settings": {k: v for k, v in saved["settings"].items()
                                           if k not in FREE_SETTINGS}}
        if saved is not None and saved != run:
            raise ElectraError(f"{out} holds a fine-tuning run with other settings "
                               f"({_first_difference(saved, run)} differs, in {path.name}); "
                               "rerun it with the same command or choose another --out")


def discard_progress(out: Path) -> None:
    """Make OUT start over: its seed records and checkpoints deleted (for callers that replace
    a finished run of another configuration on purpose)."""
    for path in _seed_dirs(out):
        (path / SEED_RECORD).unlink(missing_ok=True)
        shutil.rmtree(checkpoint.checkpoint_root(path), ignore_errors=True)


def _saved_fingerprint(path: Path) -> dict[str, Any] | None:
    record = read_seed_record(path)
    if record is not None:
        return record["run"]
    pointer = checkpoint.checkpoint_root(path) / checkpoint.LATEST
    if not pointer.is_file():
        return None
    meta = checkpoint.read_meta(checkpoint.checkpoint_root(path) / pointer.read_text().strip())
    return meta.get("run")


def _first_difference(saved: dict[str, Any], now: dict[str, Any], prefix: str = "") -> str:
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key), now.get(key)
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):
                return _first_difference(a, b, f"{prefix}{key}.")
            return f"{prefix}{key}: {a!r} then, {b!r} now"
    return "nothing"


def read_seed_record(path: Path) -> dict[str, Any] | None:
    """A finished seed's record ({"run", "rank", "entry"}), or None if the seed is not done."""
    file = path / SEED_RECORD
    if not file.is_file():
        return None
    try:
        record = json.loads(file.read_text())
        if not all(k in record for k in ("run", "rank", "entry")):
            raise KeyError
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        raise ElectraError(f"{file}: unreadable seed record (delete it to train the seed "
                           "again)") from None
    return record


def write_seed_record(path: Path, run: dict[str, Any], rank: float, entry: dict) -> None:
    """Written once the seed's model was evaluated and offered to `KeepBest`: from then on a
    rerun takes the seed's entry from here, and its checkpoints are deleted."""
    write_atomic(path / SEED_RECORD, json.dumps({"run": run, "rank": rank, "entry": entry},
                                                indent=2) + "\n")
    shutil.rmtree(checkpoint.checkpoint_root(path), ignore_errors=True)


def metrics_after_resume(path: Path, step: int) -> None:
    """A seed continuing from its checkpoint at `step`: drop the log lines written after it,
    and an evaluation record at `step` itself (a run stopped during evaluation logs it again);
    training records carry "epoch"."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if record["step"] < step or (record["step"] == step and "epoch" in record):
                kept.append(line)
    write_atomic(path, "".join(line + "\n" for line in kept))


@dataclass
class SeedCheckpoints:
    """One seed's checkpoints: every `every` steps (0: only when a stop signal arrives), under
    `directory`/checkpoints. `resume_from`: the one to continue from (verified), and
    `seconds_before` the training time the seed had when it was written."""

    directory: Path
    every: int
    run: dict[str, Any]
    resume_from: Path | None = None
    step: int = 0
    seconds_before: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def open(cls, directory: Path, every: int, run: dict[str, Any],
             started: float) -> SeedCheckpoints:
        latest = checkpoint.find_latest(directory)
        if latest is None:
            return cls(directory, every, run, started=started)
        meta = checkpoint.read_meta(latest)
        return cls(directory, every, run, latest, int(meta["step"]),
                   float(meta.get("train_seconds", 0.0)), started)

    def seconds(self) -> float:
        """The seed's training time: this process's, plus what the checkpoint recorded."""
        return self.seconds_before + (time.perf_counter() - self.started)

    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        return checkpoint.save(self.directory, step, write,
                               {"run": self.run, "train_seconds": self.seconds()},
                               keep=KEEP_CHECKPOINTS,
                               continue_with="run the same command again")

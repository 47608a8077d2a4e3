"""Where a training run's numbers go besides OUT/metrics.jsonl: `--report-to tensorboard,wandb,
mlflow` (any subset; none by default), on every training command.

Each sink is a record in `SINKS`: the package it needs (an optional extra, named in a one-line
error when missing) and how it opens. An open sink receives the run's resolved settings as
hyperparameters, every record `MetricsLogger` writes to metrics.jsonl (its numbers, against its
step), and the run's final results. Only the main process reports: `MetricsLogger(active=False)`
on the other ranks opens none.

- tensorboard: event files under OUT/tensorboard/ (or the directory the caller names); the
  hyperparameters as a JSON text, the results as scalars at the last step.
- wandb: a run named after OUT in project $WANDB_PROJECT (default "electra"), its files under
  OUT/wandb/; WANDB_MODE=offline works without an account (`wandb sync` uploads it later). A
  resumed run continues the same W&B run (its id is derived from OUT).
- mlflow: a run in experiment $MLFLOW_EXPERIMENT_NAME (default "electra") on
  $MLFLOW_TRACKING_URI, else a local file store, OUT/mlruns.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from electra.errors import ElectraError, install_hint


@dataclass(frozen=True)
class SinkContext:
    """What a sink is opened with: the run's folder, the name trackers show, the step a resumed
    run continues from, and where TensorBoard writes."""

    out: Path
    name: str
    resume_step: int = 0
    tensorboard_dir: Path | None = None


class Sink(Protocol):
    def hyperparameters(self, params: Mapping[str, Any]) -> None: ...

    def log(self, step: int, scalars: Mapping[str, float]) -> None: ...

    def finish(self, step: int, results: Mapping[str, float]) -> None: ...


@dataclass(frozen=True)
class SinkSpec:
    """A sink: the module it imports, the package and the electra extra that provide it, how it
    opens."""

    module: str
    requirement: str
    extra: str
    open: Callable[[SinkContext], Sink]


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as one level of "section.key" names; lists and other values that are not
    numbers, strings or booleans as JSON text, as trackers take parameters."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif value is None or isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = json.dumps(value, default=str)
    return flat


class TensorBoardSink:
    def __init__(self, ctx: SinkContext):
        from torch.utils.tensorboard import SummaryWriter

        log_dir = ctx.tensorboard_dir or ctx.out / "tensorboard"
        # purge_step hides what a resumed run's earlier process wrote after its checkpoint
        self.writer = SummaryWriter(str(log_dir), purge_step=ctx.resume_step + 1)

    @property
    def log_dir(self) -> Path:
        return Path(self.writer.log_dir)

    def hyperparameters(self, params: Mapping[str, Any]) -> None:
        self.writer.add_text("hyperparameters", json.dumps(flatten(params), indent=1))
        self.writer.flush()

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self, step: int, results: Mapping[str, float]) -> None:
        for key, value in results.items():
            self.writer.add_scalar(f"final/{key}", value, step)
        self.writer.close()


class WandbSink:
    def __init__(self, ctx: SinkContext):
        import wandb

        # one W&B run per OUT (and per seed): a resumed run continues it
        run_id = hashlib.sha256(str(ctx.out.resolve()).encode()).hexdigest()[:16]
        ctx.out.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "electra"),
                              name=ctx.name, dir=str(ctx.out), id=run_id, resume="allow",
                              reinit="create_new")

    def hyperparameters(self, params: Mapping[str, Any]) -> None:
        self.run.config.update(flatten(params), allow_val_change=True)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def finish(self, step: int, results: Mapping[str, float]) -> None:
        self.run.summary.update(dict(results))
        self.run.finish()


class MlflowSink:
    def __init__(self, ctx: SinkContext):
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # a local file store in OUT; MLflow 3 asks to be told that it is wanted
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (ctx.out / "mlruns").resolve().as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "electra")
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(name))
        self.run_id = self.client.create_run(experiment_id, run_name=ctx.name).info.run_id

    def hyperparameters(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(key, str(value)) for key, value in flatten(params).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 per batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, value, now, step)
                                                    for key, value in scalars.items()])

    def finish(self, step: int, results: Mapping[str, float]) -> None:
        if results:
            self.log(step, {f"final/{key}": value for key, value in results.items()})
        self.client.set_terminated(self.run_id)


SINKS: dict[str, SinkSpec] = {
    "tensorboard": SinkSpec("torch.utils.tensorboard", "tensorboard", "plot", TensorBoardSink),
    "wandb": SinkSpec("wandb", "wandb", "tracking", WandbSink),
    "mlflow": SinkSpec("mlflow.tracking", "mlflow-skinny", "tracking", MlflowSink),
}


def parse_report_to(text: str | Sequence[str]) -> tuple[str, ...]:
    """`--report-to`'s value: names separated by commas (or a list), each a sink; "none" or
    nothing: none."""
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [n.strip() for n in names if n.strip() and n.strip() != "none"]
    unknown = [n for n in names if n not in SINKS]
    if unknown:
        raise ElectraError(f"--report-to: unknown {', '.join(map(repr, unknown))}; choose from "
                           f"{', '.join(SINKS)} (comma-separated)")
    return tuple(dict.fromkeys(names))


def require_sinks(names: Sequence[str]) -> None:
    """Fail before a run starts, in one line naming what to install, if a sink's package is
    missing."""
    for name in names:
        spec = SINKS[name]
        try:
            __import__(spec.module)
        except ImportError:
            raise ElectraError(f"--report-to {name} needs the {spec.requirement} package: "
                               f"{install_hint(spec.extra)} (or pip install "
                               f"{spec.requirement})") from None


def open_sinks(names: Sequence[str], ctx: SinkContext) -> list[Sink]:
    require_sinks(names)
    return [SINKS[name].open(ctx) for name in names]

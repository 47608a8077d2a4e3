"""A pre-training run resolved once, into a plan, before anything is built.

`make_plan` decides what a run's settings leave open: whether it continues OUT's run, the
precision it trains in (a resumed run keeps its own; `auto` becomes what the device does
natively), the vocabulary size and padding id its data fix, the objective's defaults, and the
steps a FLOPs budget buys. The result is a new, validated configuration: the caller's is not
changed, and nothing after the plan assigns a settings field. A time budget's steps are the
exception by nature: they are planned once the first steps are timed, and live in the run's
schedule, not in the settings (`electra.pretraining.budget`). `RunPlan.record()` is what
OUT/run.json keeps of the plan.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.config import PretrainConfig, with_precision
from electra.data.dataset import PretrainingDataset
from electra.errors import ElectraError
from electra.precision import resolve_precision
from electra.pretraining.budget import capped_warmup, steps_for_flops
from electra.pretraining.checkpoint_export import step_flops
from electra.runtime.distributed import DistInfo
from electra.settings import holds_run, read_run

# `resume`: False (OUT must be new), True (OUT must hold the run: --resume) or AUTO (continue
# OUT's run where there is one, else start it: the one command a requeue script runs).
AUTO = "auto"

# A time-budgeted run's step count until its first steps are timed and its plan made.
UNPLANNED_STEPS = 10**12


@dataclass(frozen=True)
class RunPlan:
    """What a run trains and how, fixed before it builds anything.

    `cfg`: the configuration it trains (precision resolved, vocabulary and padding from the
    data, a FLOPs budget's steps); `asked`: the settings as OUT/settings.json records them
    (what `--config` repeats: a budget, not the steps it bought). `resume`: whether it
    continues OUT's run; `asked_resume`: `resume` as the caller gave it ("auto": the one
    command a requeue runs). `requested_precision`: the precision asked for, before `auto`
    was resolved on the device."""

    cfg: PretrainConfig
    asked: dict[str, Any]
    data_dir: Path
    out: Path
    resume: bool
    asked_resume: bool | str
    requested_precision: str
    device: str
    world_size: int
    report_to: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """run.json's "run": where and how the run trained."""
        tc = self.cfg.train
        return {"device": self.device, "world_size": self.world_size,
                "precision": tc.precision, "requested_precision": self.requested_precision,
                "resumed": self.resume, "report_to": list(self.report_to)}


def wants_resume(resume: bool | str, out: Path) -> bool:
    """Whether this call continues a run: `resume` as `pretrain` takes it, decided on OUT."""
    if resume == AUTO:
        return holds_run(out)
    if not isinstance(resume, bool):
        raise ElectraError(f"resume: expected true, false or {AUTO!r}, got {resume!r}")
    return resume


def saved_precision(out: Path) -> str | None:
    """The precision a run in OUT trained in (a run written before `train.precision`
    recorded `train.bf16`), or None."""
    try:
        precision = with_precision(read_run(out)[0]["train"]).get("precision")
    except (ElectraError, KeyError, TypeError, AttributeError):
        return None
    return precision if precision != "auto" else None


def requested_precision(cfg: PretrainConfig, resume: bool, out: Path) -> str:
    """The precision asked for: a resumed run keeps the precision it trained in unless another
    is given."""
    if resume and cfg.train.precision == "auto":
        return saved_precision(out) or "auto"
    return cfg.train.precision


def make_plan(cfg: PretrainConfig, data: PretrainingDataset, data_dir: Path, out: Path,
              asked_resume: bool | str, requested: str, info: DistInfo,
              report_to: tuple[str, ...] = ()) -> RunPlan:
    """The run's plan on `info`'s device (`requested`: `requested_precision`'s answer, which
    chose how the processes started)."""
    resolved = copy.deepcopy(cfg)  # the caller's stays as it was
    tc = resolved.train
    tc.precision = resolve_precision(requested, info.device)
    if tc.compile_step and requested == "auto" and tc.precision == "fp16":
        tc.precision = "fp32"  # what the compiled step takes where bf16 is not native
    resolved.model.vocab_size = data.vocab_size
    resolved.model.pad_token_id = data.pad_id  # config.json's pad_token_id: the tokenizer's
    resolved.validate()  # also gives the objective its preset's and its own defaults
    asked = resolved.to_dict()
    if tc.budget_flops is not None:  # exact: the steps the FLOPs buy
        tc.steps = steps_for_flops(tc.budget_flops, step_flops(resolved, data.seq_len))
        tc.warmup_steps = capped_warmup(tc.warmup_steps, tc.steps)
    elif tc.budget_seconds is not None:  # planned once the first steps are timed
        tc.steps = UNPLANNED_STEPS
    return RunPlan(resolved, asked, data_dir, out, wants_resume(asked_resume, out),
                   asked_resume, requested, str(info.device), info.world_size, report_to)


def run_config(out: str | Path) -> PretrainConfig:
    """The configuration a run in OUT trained (OUT/settings.json, read as `--config` reads it):
    the plan's, its precision resolved and vocabulary its data's; a budget as asked."""
    from electra.settings import SETTINGS_FILE, config_preset, resolve

    path = Path(out) / SETTINGS_FILE
    cfg = PretrainConfig.from_preset(config_preset(path) or "tiny")
    resolve({"model": cfg.model, "objective": cfg.objective, "train": cfg.train}, path, {}, [],
            preset=True)
    return cfg

"""The `electra flops` command as a library call: a preset's compute budget, counted by each
objective's own `step_flops_breakdown` with the rules of `electra.flops` (section 5.2.2).

Beside `flops.py` rather than in it: the rules are imported by the objectives, and this report
imports the objectives, so keeping the two apart keeps the imports one-way. See docs/speed.md.
"""

from __future__ import annotations

import dataclasses

from electra import flops
from electra.config import OBJECTIVES, PretrainConfig, merge
from electra.errors import ElectraError
from electra.objectives import objective_class
from electra.presets import get_preset


def main_flops(preset: str, objective: str, steps: int | None, batch_size: int | None,
               seq_len: int | None, vocab_size: int = 30522,
               overrides: dict | None = None) -> dict:
    """A preset's compute budget as a JSON-able dict (`flops_report` of the preset's
    configuration with these values). `overrides` are objective config fields (e.g.
    {"generator": "unigram"})."""
    cfg = PretrainConfig.from_preset(preset)
    cfg.model.vocab_size = vocab_size
    cfg.objective.name = objective
    merge(cfg.objective, dict(overrides or {}), where="objective")
    if batch_size is not None:
        cfg.train.batch_size = batch_size
    return flops_report(cfg, seq_len, steps)


def flops_report(cfg: PretrainConfig, seq_len: int | None = None,
                 steps: int | None = None) -> dict:
    """The `electra flops` command: the compute budget of a pre-training configuration as a
    JSON-able dict, counted by the objective class's own `step_flops_breakdown`, the count the
    training loop logs.

    `steps` None: the preset's (Table 5.1), BERT's step count for an objective with BERT's
    budget ("mlm") and ELECTRA's otherwise; `seq_len` None: the preset's."""
    p = get_preset(cfg.preset)
    model, objective = cfg.model, cfg.objective
    if model.vocab_size < 1:
        raise ElectraError(f"vocab size must be positive, got {model.vocab_size}")
    if objective.name in OBJECTIVES:  # the preset's settings for this objective, as training's
        objective.resolve_defaults(p.objective_defaults.get(objective.name))
    objective.validate()
    cls = objective_class(objective.name)
    if steps is None:
        steps = p.bert_steps if cls.step_budget == "bert" else p.electra_steps
    batch_size = cfg.train.batch_size
    seq_len = p.seq_len if seq_len is None else seq_len
    flops.check_counting(model, steps, batch_size, seq_len)
    breakdown = cls.step_flops_breakdown(model, objective, batch_size, seq_len)
    per_step = sum(breakdown.values())
    return {
        "preset": cfg.preset,
        "objective": objective.name,
        "steps": steps,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "vocab_size": model.vocab_size,
        "train_flops": per_step * steps,
        "infer_flops": flops.encoder_flops(model, seq_len),
        "infer_flops_with_head": flops.encoder_flops(model, seq_len)
        + flops.binary_head_flops(model, seq_len),
        "params": flops.encoder_params(model),
        "generator_params": cls.generator_params(model, objective),
        "train_flops_per_step": per_step,
        "output_frac": flops.output_frac_for(objective.mask_prob),
        "objective_config": dataclasses.asdict(objective),
        "breakdown": breakdown,
    }

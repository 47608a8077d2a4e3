"""The `electra flops` command as a library call: a preset's compute budget, counted by each
objective's own `step_flops_breakdown` with the rules of `electra.flops` (section 5.2.2).

Beside `flops.py` rather than in it: the rules are imported by the objectives, and this report
imports the objectives, so keeping the two apart keeps the imports one-way. See docs/speed.md.
"""

from __future__ import annotations

import dataclasses

from electra import flops
from electra.config import ObjectiveConfig, merge
from electra.errors import ElectraError
from electra.objectives import objective_class
from electra.presets import get_preset


def main_flops(preset: str, objective: str, steps: int | None, batch_size: int | None,
               seq_len: int | None, vocab_size: int = 30522,
               overrides: dict | None = None) -> dict:
    """The `electra flops` command: a preset's compute budget as a JSON-able dict.

    Missing values come from the preset (Table 5.1): BERT's step count for "mlm" and ELECTRA's
    otherwise, its batch size and sequence length, mask rate and generator multiplier.
    `overrides` are objective config fields (e.g. {"generator": "unigram"}); the count is the
    objective class's own `step_flops_breakdown`, the same the training loop logs.
    """
    p = get_preset(preset)
    if vocab_size < 1:
        raise ElectraError(f"vocab size must be positive, got {vocab_size}")
    cls = objective_class(objective)
    model = dataclasses.replace(p.model, vocab_size=vocab_size)
    obj_cfg = ObjectiveConfig(name=objective, mask_prob=p.mask_prob,
                              generator_multiplier=p.generator_multiplier)
    merge(obj_cfg, dict(overrides or {}), where="objective")
    obj_cfg.validate()
    if steps is None:
        steps = p.bert_steps if cls.step_budget == "bert" else p.electra_steps
    batch_size = p.batch_size if batch_size is None else batch_size
    seq_len = p.seq_len if seq_len is None else seq_len
    flops.check_counting(model, steps, batch_size, seq_len)
    breakdown = cls.step_flops_breakdown(model, obj_cfg, batch_size, seq_len)
    per_step = sum(breakdown.values())
    return {
        "preset": preset,
        "objective": objective,
        "steps": steps,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "vocab_size": vocab_size,
        "train_flops": per_step * steps,
        "infer_flops": flops.encoder_flops(model, seq_len),
        "infer_flops_with_head": flops.encoder_flops(model, seq_len)
        + flops.binary_head_flops(model, seq_len),
        "params": flops.encoder_params(model),
        "generator_params": cls.generator_params(model, obj_cfg),
        "train_flops_per_step": per_step,
        "output_frac": flops.output_frac_for(obj_cfg.mask_prob),
        "objective_config": dataclasses.asdict(obj_cfg),
        "breakdown": breakdown,
    }

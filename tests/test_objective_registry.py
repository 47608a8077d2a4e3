"""What an objective class declares (objectives.base), and that a new objective is one module
plus one line in the registry (`electra.config.OBJECTIVES`: its class and its config defaults)."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch
from objective_helpers import SPECIAL, make_batch, small_model  # noqa: E402

from electra import flops
from electra.config import OBJECTIVES, ObjectiveConfig, ObjectiveSpec
from electra.model.encoder import init_weights
from electra.model.networks import Discriminator
from electra.objectives import (
    REGISTRY,
    Objective,
    ObjectiveOutput,
    build_objective,
    metrics_from_counts,
    objective_class,
    resolved,
)
from electra.objectives import _all_metrics as all_metrics
from electra.objectives.core import DISCRIMINATOR_METRICS, corrupt, discriminate
from electra.objectives.generators import build_sampler
from electra.pretraining.flops_report import main_flops
from electra.scoring.load import discriminator_scorer


def test_every_objective_fills_every_unset_config_field():
    unset = {f.name for f in dataclasses.fields(ObjectiveConfig)
             if getattr(ObjectiveConfig(), f.name) is None}
    for name in REGISTRY:
        cfg = resolved(ObjectiveConfig(name=name))
        cfg.validate()
        missing = {k for k in unset if getattr(cfg, k) is None}
        assert missing <= {"generator_layers", "two_stage_generator_steps",
                           "teams_shared_layers"}, name  # None has a meaning there


def test_published_defaults_per_objective():
    """ELECTRA 85% [MASK] / 15% kept, weight 50 (official pretrain_helpers.mask, 5.2.1); BERT
    80/10/10 (Devlin et al. 3.1); TEAMS lambda_1 = 5 (TEAMS section 4.1)."""
    values = {name: (c.mask_token_prob, c.random_token_prob, c.disc_weight)
              for name in REGISTRY for c in [resolved(ObjectiveConfig(name=name))]}
    assert values["mlm"] == (0.8, 0.1, 50.0)
    assert values["teams"] == (0.85, 0.0, 5.0)
    for name in ("electra", "electra-15", "replace-mlm", "all-tokens-mlm", "electric",
                 "electra-tt"):
        assert values[name] == (0.85, 0.0, 50.0), name
    assert resolved(ObjectiveConfig(name="mlm", disc_weight=3.0)).disc_weight == 3.0


def test_a_metric_name_means_one_ratio_across_objectives():
    metrics = all_metrics()
    assert metrics["mws_acc"] == ("mws_correct", "masked")
    assert metrics["sample_differs_frac"] == ("sample_differs", "masked")
    assert metrics["mlm_acc"] == ("mlm_correct", "mlm_predicted")
    counts = {"masked": 10.0, "gen_correct": 4.0, "replaced": 5.0, "mws_correct": 7.0}
    assert metrics_from_counts(counts) == {"gen_acc": 0.4, "replaced_frac": 0.5,
                                           "mws_acc": 0.7}
    assert metrics_from_counts(counts, "electra") == {"gen_acc": 0.4, "replaced_frac": 0.5}


def test_scorers_declared_by_the_objectives():
    assert {name: discriminator_scorer(name) for name in REGISTRY} == {
        "electra": None, "electra-15": None, "mlm": None, "replace-mlm": None,
        "all-tokens-mlm": None, "electric": "electric", "electra-tt": "electra-tt",
        "teams": None}
    assert discriminator_scorer(None) is None and discriminator_scorer(["x"]) is None


class UniformRtd(Objective):
    """A toy objective: replaced token detection against uniform replacements, from the
    shared core, with a metric, a scorer and FLOPs (its defaults are its registry line's)."""

    metrics = {**DISCRIMINATOR_METRICS, "toy_frac": ("replaced", "masked")}
    discriminator_scorer = "electric"

    def __init__(self, model_cfg, obj_cfg, context):
        super().__init__(obj_cfg, context)
        self.discriminator = Discriminator(model_cfg)
        self.sampler = build_sampler("uniform", model_cfg.vocab_size, self.special, context)
        init_weights(self, model_cfg.initializer_range)

    @staticmethod
    def step_flops_breakdown(model_cfg, obj_cfg, batch_size, seq_len):
        return flops.discriminator_breakdown("discriminator", model_cfg, batch_size, seq_len)

    def exportable(self):
        return {"discriminator": self.discriminator}

    def forward(self, batch):
        c = corrupt(batch, self.cfg, self.special, sampler=self.sampler)
        d = discriminate(self.discriminator(c.noised, batch["token_type_ids"],
                                            batch["attention_mask"]),
                         c.is_replaced, batch["attention_mask"].bool())
        return ObjectiveOutput(loss=self.cfg.disc_weight * d.loss, counts={**c.counts,
                                                                          **d.counts})


@pytest.fixture
def toy_registered(monkeypatch):
    module = types.ModuleType("electra.objectives.toy")
    module.UniformRtd = UniformRtd
    monkeypatch.setitem(sys.modules, "electra.objectives.toy", module)
    monkeypatch.setitem(OBJECTIVES, "toy", ObjectiveSpec(  # the one registry line
        "toy:UniformRtd", {"mask_token_prob": 1.0, "random_token_prob": 0.0, "disc_weight": 2.0}))


def test_new_objective_is_one_module_plus_one_registry_line(toy_registered):
    cfg = ObjectiveConfig(name="toy")
    cfg.validate()
    assert (cfg.mask_token_prob, cfg.disc_weight) == (1.0, 2.0)  # its own defaults
    assert objective_class("toy") is UniformRtd
    torch.manual_seed(0)
    out = build_objective(small_model(), cfg, SPECIAL)(make_batch())
    assert out.loss.item() > 0
    metrics = metrics_from_counts({k: float(v) for k, v in out.counts.items()})
    assert 0 < metrics["toy_frac"] <= 1 and "disc_acc" in metrics
    report = main_flops("tiny", "toy", 10, 4, 32)
    assert report["generator_params"] == 0
    assert set(report["breakdown"]) == {"discriminator.embeddings", "discriminator.layers",
                                        "discriminator.head"}
    assert discriminator_scorer("toy") == "electric"


def test_config_defaults_are_data_not_class_attributes():
    """Validating a config reads the registry, never an objective class (no import of
    electra.objectives from electra.config, which the objectives import)."""
    assert not any(hasattr(objective_class(name), "config_defaults") for name in REGISTRY)
    for name, spec in OBJECTIVES.items():
        cfg = ObjectiveConfig(name=name)
        cfg.resolve_defaults()
        assert {k: getattr(cfg, k) for k in spec.defaults} == spec.defaults, name


@pytest.mark.parametrize("name, setting, value, allowed", [
    ("electric", "sharing", "all", "'embeddings' or 'none'"),
    ("teams", "algorithm", "two-stage", "'joint'"),
    ("replace-mlm", "sharing", "gdes", "'embeddings' or 'none' or 'all'"),
    ("electra-tt", "generator", "unigram", "'mlm'"),
])
def test_each_objective_declares_what_it_trains_with(name, setting, value, allowed):
    """The record (the class's generators, sharings, algorithms), not a name compared in its
    code, decides; one line names the setting, the objective and the choices."""
    from electra.config import ObjectiveConfig
    from electra.errors import ElectraError
    from electra.objectives import objective_class

    cfg = ObjectiveConfig(name=name, **{setting: value})
    cfg.resolve_defaults()
    with pytest.raises(ElectraError, match=f"objective.{setting} '{value}' is not supported by "
                       f"'{name}' \\(choose {allowed}\\)"):
        objective_class(name).check_supported(cfg)

"""FLOP accounting against the official numbers (Table 5.3, google-research/electra)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig, get_preset
from electra.errors import ElectraError
from electra.flops import (
    OFFICIAL_OUTPUT_FRAC,
    encoder_params,
    layer_flops,
    mlm_head_flops,
)
from electra.objectives import objective_step_flops
from electra.pretraining.flops_report import main_flops


def _rel(value: float, reference: float) -> float:
    return abs(value - reference) / reference


def _models(preset: str) -> tuple[ModelConfig, ModelConfig]:
    p = get_preset(preset)
    return p.model, p.model.scaled(p.generator_multiplier)


def test_electra_small_train_flops():
    report = main_flops("small", "electra", 1_000_000, 128, 128)
    assert _rel(report["train_flops"], 1.294e18) < 0.01


def test_bert_small_train_flops():
    report = main_flops("small", "mlm", 1_450_000, 128, 128)
    assert _rel(report["train_flops"], 1.419e18) < 0.01


def test_bert_base_train_flops():
    report = main_flops("base", "mlm", 1_000_000, 256, 512)
    assert _rel(report["train_flops"], 6.43e19) < 0.01


def test_electra_small_infer_flops():
    report = main_flops("small", "electra", None, None, 128)
    assert _rel(report["infer_flops"], 3.68e9) < 0.01
    assert _rel(report["infer_flops_with_head"], 3.68e9) < 0.001  # the official convention
    assert report["infer_flops"] < report["infer_flops_with_head"]


def test_electra_base_matches_bert_base_compute():
    """Table 5.3: ELECTRA-Base at 766K steps costs about what BERT-Base does at 1M."""
    electra = main_flops("base", "electra", 766_000, 256, 512)["train_flops"]
    bert = main_flops("base", "mlm", 1_000_000, 256, 512)["train_flops"]
    assert _rel(electra, 6.4e19) < 0.02
    assert _rel(electra, bert) < 0.01


def test_params_match_table():
    assert _rel(encoder_params(get_preset("small").model), 14e6) < 0.04  # 13.48M
    assert _rel(encoder_params(get_preset("base").model), 110e6) < 0.02  # 108.9M


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_params_match_hugging_face_electra_model(preset):
    transformers = pytest.importorskip("transformers")
    m = get_preset(preset).model
    hf = transformers.ElectraModel(transformers.ElectraConfig(**dataclasses.asdict(m)))
    assert encoder_params(m) == sum(p.numel() for p in hf.parameters())


def test_layer_flops_by_hand():
    """Width 1, one head, length 1: every counted operation is visible in the total."""
    m = ModelConfig(vocab_size=1, embedding_size=1, hidden_size=1, num_hidden_layers=1,
                    num_attention_heads=1, intermediate_size=1)
    attention = 6 + 3 + 2 + (5 + 4 + 1) + 2 + (2 + 1) + (4 + 1 + 5)
    ffn = (2 + 1 + 8) + (2 + 1) + (4 + 1 + 5)
    assert layer_flops(m, 1) == attention + ffn


def test_linear_in_steps_and_batch():
    base = main_flops("small", "electra", 10, 4, None)
    more_steps = main_flops("small", "electra", 30, 4, None)
    more_batch = main_flops("small", "electra", 10, 12, None)
    assert more_steps["train_flops"] == pytest.approx(3 * base["train_flops"], rel=1e-12)
    assert more_batch["train_flops"] == pytest.approx(3 * base["train_flops"], rel=1e-12)
    assert base["train_flops"] == pytest.approx(10 * base["train_flops_per_step"], rel=1e-12)
    assert sum(_objective_flops("electra", batch_size=4).values()) == \
        base["train_flops_per_step"]
    assert main_flops("small", "electra", 0, None, None)["train_flops"] == 0


def test_generator_costs_less_than_discriminator():
    parts = main_flops("small", "electra", None, None, None)["breakdown"]
    gen_total = sum(v for k, v in parts.items() if k.startswith("generator."))
    disc_total = sum(v for k, v in parts.items() if k.startswith("discriminator."))
    assert 0 < gen_total < disc_total


def test_mlm_head_scales_with_output_frac():
    model, _ = _models("small")
    none = mlm_head_flops(model, 128, 0.0)
    full = mlm_head_flops(model, 128, 1.0)
    assert none == 0
    assert mlm_head_flops(model, 128, OFFICIAL_OUTPUT_FRAC) == pytest.approx(
        OFFICIAL_OUTPUT_FRAC * full)
    # BERT at 15% masking computes its output at the official 20/128 of the positions
    assert _objective_flops("mlm")["model.mlm_head"] == pytest.approx(
        flops.TRAIN_PASSES * 128 * OFFICIAL_OUTPUT_FRAC * full)


def test_main_flops_defaults_from_preset():
    out = main_flops("small", "electra", None, None, None)
    json.dumps(out)
    assert (out["steps"], out["batch_size"], out["seq_len"]) == (1_000_000, 128, 128)
    assert _rel(out["train_flops"], 1.294e18) < 0.01
    bert = main_flops("small", "mlm", None, None, None)
    assert bert["steps"] == 1_450_000
    assert _rel(bert["train_flops"], 1.419e18) < 0.01
    custom = main_flops("tiny", "electra", 7, 3, 64, vocab_size=1000)
    assert (custom["steps"], custom["batch_size"], custom["seq_len"]) == (7, 3, 64)
    assert custom["train_flops"] == pytest.approx(7 * custom["train_flops_per_step"])


def test_errors():
    with pytest.raises(ElectraError, match="max_position_embeddings"):
        main_flops("small", "mlm", None, None, 1024)
    with pytest.raises(ElectraError, match="steps >= 0"):
        main_flops("small", "electra", -1, None, None)
    with pytest.raises(ElectraError, match="preset"):
        main_flops("huge", "electra", None, None, None)
    with pytest.raises(ElectraError, match="objective"):
        main_flops("small", "bert", None, None, None)


# --- per-objective accounting (objective classes' step_flops_breakdown) ----------------------


def _objective_flops(name: str, preset: str = "small", batch_size: int = 128,
                     **kw) -> dict[str, float]:
    p = get_preset(preset)
    cfg = ObjectiveConfig(name=name, mask_prob=p.mask_prob,
                          generator_multiplier=kw.pop("generator_multiplier",
                                                      p.generator_multiplier), **kw)
    return objective_step_flops(p.model, cfg, batch_size, 128)


def test_output_frac_is_official_at_15_percent():
    from electra.flops import output_frac_for

    assert output_frac_for(0.15) == OFFICIAL_OUTPUT_FRAC
    assert output_frac_for(0.25) == pytest.approx(OFFICIAL_OUTPUT_FRAC * 25 / 15)


def test_electra_and_mlm_are_their_networks_counts():
    """ELECTRA: an RTD discriminator plus an MLM generator with its own embedding lookups and
    E->H projection (as the official accounting); BERT: one MLM."""
    disc, gen = _models("small")
    assert _objective_flops("electra") == {
        **flops.discriminator_breakdown("discriminator", disc, 128, 128),
        **flops.mlm_model_breakdown("generator", gen, 128, 128, OFFICIAL_OUTPUT_FRAC)}
    assert _objective_flops("mlm") == flops.mlm_model_breakdown(
        "model", disc, 128, 128, OFFICIAL_OUTPUT_FRAC, head="mlm_head")


def test_network_free_generators_cost_nothing():
    for kind in ("unigram", "uniform"):
        parts = _objective_flops("electra", generator=kind)
        assert not any(k.startswith("generator.") for k in parts)
        assert parts == {k: v for k, v in _objective_flops("electra").items()
                         if k.startswith("discriminator.")}


def test_generator_depth_and_width_are_counted():
    full = _objective_flops("electra", generator_multiplier=1.0)
    shallow = _objective_flops("electra", generator_multiplier=1.0, generator_layers=3)
    assert shallow["generator.layers"] == pytest.approx(full["generator.layers"] / 4)
    assert full["generator.layers"] == full["discriminator.layers"]
    assert shallow["generator.embeddings"] == full["generator.embeddings"]


def test_replace_mlm_head_on_masked_positions_all_tokens_everywhere_plus_copy_head():
    model, _ = _models("small")
    replace = _objective_flops("replace-mlm")
    all_tokens = _objective_flops("all-tokens-mlm")
    mlm = _objective_flops("mlm")
    assert replace["model.mlm_head"] == mlm["model.mlm_head"]
    assert all_tokens["model.mlm_head"] == flops.TRAIN_PASSES * 128 * mlm_head_flops(
        model, 128, 1.0)
    assert all_tokens["model.copy_head"] == 2 * 128 * 128 * (2 * 256 + 9)
    electra = _objective_flops("electra")
    for part in ("generator.embeddings", "generator.layers", "generator.head"):
        assert replace[part] == all_tokens[part] == electra[part]


def test_two_stage_counts_the_mean_of_its_two_stages():
    full = _objective_flops("electra", generator_multiplier=1.0)
    two = _objective_flops("electra", generator_multiplier=1.0, algorithm="two-stage")
    # stage 1: generator forward+backward; stage 2: generator forward, discriminator both
    for k, v in full.items():
        expected = 0.5 * v if k.startswith("discriminator.") else 0.75 * v
        assert two[k] == pytest.approx(expected)


def test_flops_command_per_objective_and_generator_options(capsys):
    from electra.cli import main

    assert main(["flops", "--objective", "replace-mlm", "--generator", "unigram"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective"] == "replace-mlm" and out["generator_params"] == 0
    assert "model.mlm_head" in out["breakdown"]
    assert not any(k.startswith("generator.") for k in out["breakdown"])
    assert main(["flops", "--generator-multiplier", "0.5", "--set",
                 "objective.generator_layers=6"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective_config"]["generator_layers"] == 6
    assert out["train_flops"] == pytest.approx(1e6 * sum(_objective_flops(
        "electra", generator_multiplier=0.5, generator_layers=6).values()))
    assert main(["flops", "--set", "objective.sharing=all"]) == 1
    assert "generator_multiplier=1.0" in capsys.readouterr().err
    assert main(["flops", "--set", "train.steps=3"]) == 0  # every section, as pretrain's
    assert json.loads(capsys.readouterr().out)["steps"] == 3
    assert main(["flops", "--set", "optimizer.lr=3"]) == 1
    assert "unknown section 'optimizer'" in capsys.readouterr().err


def test_generator_params_follow_each_objectives_generator():
    """`generator_params` is the generator network each objective declares: ELECTRA's MLM
    generator, TEAMS' half-depth full-width one (shared layers included), the two towers of
    Electric and ELECTRA-TT; none for BERT or a network-free sampler."""
    from electra.objectives.teams import teams_generator_config

    model, gen = _models("small")
    out = {name: main_flops("small", name, None, None, None)["generator_params"]
           for name in ("electra", "electra-15", "replace-mlm", "mlm", "teams", "electric",
                        "electra-tt")}
    assert out["electra"] == out["electra-15"] == out["replace-mlm"] == encoder_params(gen)
    assert out["mlm"] == 0
    assert main_flops("small", "electra", None, None, None,
                      overrides={"generator": "unigram"})["generator_params"] == 0
    teams = teams_generator_config(model, ObjectiveConfig(name="teams"))
    assert (teams.hidden_size, teams.num_hidden_layers) == (256, 6)
    assert out["teams"] == encoder_params(teams)
    towers = dataclasses.replace(gen, num_hidden_layers=2 * gen.num_hidden_layers)
    assert out["electric"] == out["electra-tt"] == encoder_params(towers)


def test_flops_rules_import_no_objective_and_config_no_torch():
    """flops.py holds the rules; the objectives compose them (no import circle). The config
    and its objective names load without torch, so `electra --help` stays fast."""
    import subprocess
    import sys

    code = ("import sys, electra.flops, electra.config; "
            "print(sorted(m for m in sys.modules "
            "if m.startswith('electra.objectives') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"

"""`electra pretrain --init-from`: continued pre-training from checkpoints written by
`transformers` itself (random weights from a config, `save_pretrained`), by a finished run, or
a single encoder; the starting model computes exactly what transformers computes, training
continues and exports, and every bad input is one error with nothing written under OUT."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from electra.cli import main
from electra.config import PretrainConfig
from electra.model.hf import load_pretrained
from electra.objectives import build_objective
from electra.pretraining.init_from import adopt_checkpoint, find_source, load_weights

transformers = pytest.importorskip("transformers")

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")


def _vocab_size(vocab_dir: Path) -> int:
    return sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))


def _save(model, out: Path, vocab_dir: Path | None) -> Path:
    model.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES if vocab_dir is not None else ():
        if (vocab_dir / name).is_file():
            shutil.copy(vocab_dir / name, out / name)
    return out


def _electra_config(vocab_size: int, hidden: int, heads: int, ffn: int):
    return transformers.ElectraConfig(vocab_size=vocab_size, embedding_size=32,
                                      hidden_size=hidden, num_hidden_layers=2,
                                      num_attention_heads=heads, intermediate_size=ffn,
                                      max_position_embeddings=64)


@pytest.fixture(scope="module")
def released(tmp_path_factory, vocab_dir) -> dict[str, Path]:
    """An ELECTRA pair as released (a generator of half the width sharing the discriminator's
    embeddings), a bare ElectraModel and a BertForMaskedLM, written by transformers."""
    root = tmp_path_factory.mktemp("released")
    n = _vocab_size(vocab_dir)
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(_electra_config(n, 64, 2, 128)).eval()
    gen = transformers.ElectraForMaskedLM(_electra_config(n, 32, 1, 64)).eval()
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=n, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64)).eval()
    encoder = transformers.ElectraModel(_electra_config(n, 64, 2, 128)).eval()
    return {"disc": _save(disc, root / "disc", vocab_dir),
            "gen": _save(gen, root / "gen", vocab_dir),
            "bert": _save(bert, root / "bert", vocab_dir),
            "encoder": _save(encoder, root / "encoder", vocab_dir)}


def _batch(vocab_size: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(5, vocab_size, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}


def _started(source_dirs: tuple, objective: str = "electra"):
    source = find_source(source_dirs[0], source_dirs[1] if len(source_dirs) > 1 else None,
                         objective)
    cfg = PretrainConfig.from_preset("tiny")
    cfg.objective.name = objective
    adopt_checkpoint(cfg, source)
    cfg.validate()
    model = build_objective(cfg.model, cfg.objective)
    load_weights(model, source)
    return model.eval(), cfg


def _assert_same_logits(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> None:
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], rtol=1e-5, atol=1e-5)


def test_released_pair_computes_what_transformers_computes(released, vocab_dir):
    objective, cfg = _started((released["disc"], released["gen"]))
    assert cfg.objective.generator_multiplier == 0.5 and cfg.model.hidden_size == 64
    batch = _batch(_vocab_size(vocab_dir))
    args = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    with torch.no_grad():
        disc = transformers.ElectraForPreTraining.from_pretrained(released["disc"]).eval()
        gen = transformers.ElectraForMaskedLM.from_pretrained(released["gen"]).eval()
        _assert_same_logits(objective.discriminator(*args), disc(**batch).logits,
                            batch["attention_mask"])
        _assert_same_logits(objective.generator(*args), gen(**batch).logits,
                            batch["attention_mask"])


def test_bert_mlm_computes_what_transformers_computes(released, vocab_dir):
    objective, cfg = _started((released["bert"],), "mlm")
    assert cfg.model.embedding_size == cfg.model.hidden_size == 32
    batch = _batch(_vocab_size(vocab_dir))
    with torch.no_grad():
        bert = transformers.BertForMaskedLM.from_pretrained(released["bert"]).eval()
        ours = objective.model(batch["input_ids"], batch["token_type_ids"],
                               batch["attention_mask"])
        _assert_same_logits(ours, bert(**batch).logits, batch["attention_mask"])


def _pretrain(*args: str) -> int:
    return main(["pretrain", "--steps", "2", "--batch-size", "4", "--log-every", "1",
                 "--eval-every", "0", "--quiet", *map(str, args)])


def test_continued_pair_trains_exports_and_loads_back(released, data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert _pretrain("--init-from", released["disc"], "--init-generator", released["gen"],
                     "--data", data_dir, "--out", out) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["init"] == {"from": str(released["disc"]), "generator": str(released["gen"]),
                           "train_flops": None}
    settings = json.loads((out / "settings.json").read_text())
    assert settings["preset"] == "tiny"  # inferred from the hidden size (64)
    assert settings["objective"]["generator_multiplier"] == 0.5
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["flops"] > 0
    for name, arch in (("discriminator", "ElectraForPreTraining"),
                       ("generator", "ElectraForMaskedLM")):
        loaded = getattr(transformers, arch).from_pretrained(out / "final" / name)
        assert loaded.config.hidden_size == (64 if name == "discriminator" else 32)
        assert load_pretrained(out / "final" / name).config.vocab_size == loaded.config.vocab_size


def test_bert_mlm_continues_under_the_mlm_objective(released, data_dir, tmp_path):
    out = tmp_path / "bert"
    assert _pretrain("--init-from", released["bert"], "--objective", "mlm", "--data", data_dir,
                     "--out", out) == 0
    assert transformers.ElectraForMaskedLM.from_pretrained(out / "final" / "model")


def test_bare_encoder_gets_a_new_head_and_generator(released, data_dir, tmp_path, capsys):
    out = tmp_path / "enc"
    assert _pretrain("--init-from", released["encoder"], "--data", data_dir, "--out", out) == 0
    err = capsys.readouterr().err
    assert "a new one is trained at 0.5 of the discriminator's width" in err
    disc = load_pretrained(out / "final" / "discriminator")
    started = transformers.ElectraModel.from_pretrained(released["encoder"])
    assert disc.config.hidden_size == started.config.hidden_size


def test_a_finished_run_continues_and_keeps_its_flops(data_dir, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert _pretrain("--preset", "tiny-local", "--data", data_dir, "--out", first) == 0
    recorded = json.loads((first / "final" / "discriminator" / "config.json").read_text())
    assert _pretrain("--init-from", first, "--data", data_dir, "--out", second) == 0
    run = json.loads((second / "run.json").read_text())
    assert run["init"]["train_flops"] == recorded["electra_toolkit"]["train_flops"] > 0
    settings = json.loads((second / "settings.json").read_text())
    assert settings["model"]["position_bias"] == "alibi"  # from the checkpoint
    assert run["init"]["generator"] == str(first / "final" / "generator")
    assert (second / "final" / "discriminator" / "model.safetensors").is_file()


@pytest.mark.parametrize("extra, message", [
    (("--preset", "tiny"), "model.embedding_size: --preset tiny asks for 128, but the checkpoint"),
    (("--set", "model.num_hidden_layers=4"), "model.num_hidden_layers: --set"),
    (("--set", "objective.generator_multiplier=0.25"), "objective.generator_multiplier"),
    (("--objective", "teams"), "--init-generator: objective 'teams' starts its generator fresh"),
])
def test_contradictions_are_one_error_and_nothing_written(released, data_dir, tmp_path, capsys,
                                                          extra, message):
    out = tmp_path / "out"
    assert _pretrain("--init-from", released["disc"], "--init-generator", released["gen"],
                     "--data", data_dir, "--out", out, *extra) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_other_vocabulary_not_a_model_and_unshareable_generator(released, data_dir, tmp_path,
                                                               capsys, vocab_dir):
    other = tmp_path / "other"
    shutil.copytree(released["disc"], other)
    (other / "vocab.txt").write_text((vocab_dir / "vocab.txt").read_text().replace(
        "the\n", "thee\n", 1))
    (other / "tokenizer.json").unlink()
    wide = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        vocab_size=_vocab_size(vocab_dir), embedding_size=16, hidden_size=32,
        num_hidden_layers=2, num_attention_heads=1, intermediate_size=64,
        max_position_embeddings=64))
    unshareable = _save(wide, tmp_path / "wide", vocab_dir)
    capsys.readouterr()  # transformers' own progress lines
    cases = [(("--init-from", other), "prepared with another vocabulary"),
             (("--init-from", tmp_path), "not a model directory"),
             (("--init-from", released["disc"], "--init-generator", unshareable),
              "cannot share embeddings"),
             (("--init-generator", released["gen"]), "--init-generator needs --init-from")]
    for args, message in cases:
        out = tmp_path / "out"
        assert _pretrain(*args, "--data", data_dir, "--out", out) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (args, err)
        assert not out.exists()


def test_interrupted_continued_run_resumes_exactly(released, data_dir, tmp_path, monkeypatch):
    """Resume restores the checkpoint, not the starting weights: bit-identical to a straight
    run (the starting point is loaded only before the first step)."""
    from resume_helpers import interrupted_and_resumed
    from safetensors.torch import load_file

    from electra.pretraining.loop import pretrain

    def run(out: Path, resume: bool = False) -> Path:
        source = find_source(released["disc"], released["gen"], "electra")
        cfg = PretrainConfig.from_preset("tiny")
        adopt_checkpoint(cfg, source)
        cfg.train.steps, cfg.train.batch_size, cfg.train.save_every = 4, 4, 2
        cfg.train.eval_every = 0
        pretrain(cfg, data_dir, out, resume=resume, device="cpu", show_progress=False,
                 init=source)
        return out / "final"

    straight = run(tmp_path / "a")
    resumed = interrupted_and_resumed(run, tmp_path / "b", monkeypatch)
    for name in ("discriminator", "generator"):
        a = load_file(str(straight / name / "model.safetensors"))
        b = load_file(str(resumed / name / "model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a), name


@pytest.mark.parametrize("objective", ["teams", "electric"])
def test_objectives_with_their_own_generator_start_from_the_discriminator(
        objective, released, data_dir, tmp_path, capsys):
    out = tmp_path / objective
    assert _pretrain("--init-from", released["disc"], "--objective", objective, "--data",
                     data_dir, "--out", out) == 0
    assert f"objective '{objective}' starts from the discriminator" in capsys.readouterr().err
    started = load_pretrained(released["disc"]).state_dict()
    continued = load_pretrained(out / "final" / "discriminator").state_dict()
    assert started.keys() == continued.keys()
    # two warm-up steps moved every weight a little from where the checkpoint had it
    assert all((started[k] - continued[k]).abs().max() < 1e-3 for k in started)
    assert any(not torch.equal(started[k], continued[k]) for k in started)


def test_each_objective_declares_what_init_from_continues():
    """The registry's classes hold the fact (`Objective.continues`), and `electra flops`' step
    budget (`Objective.step_budget`): BERT's longer schedule for the MLM baseline only."""
    from electra.objectives import REGISTRY, objective_class

    kinds = {name: objective_class(name).continues for name in REGISTRY}
    assert kinds == {"electra": "discriminator+generator",
                     "electra-15": "discriminator+generator",
                     "mlm": "mlm", "replace-mlm": "mlm", "all-tokens-mlm": "mlm",
                     "electric": "discriminator", "electra-tt": "discriminator",
                     "teams": "discriminator"}
    budgets = {name: objective_class(name).step_budget for name in REGISTRY}
    assert budgets == {**dict.fromkeys(REGISTRY, "electra"), "mlm": "bert"}

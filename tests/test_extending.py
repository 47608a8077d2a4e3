"""docs/extending.md's worked examples, run as written: a new objective (one module and one
registry line), a GLUE-shaped task (one record), a preset of a new size (one record) and an
encoder architecture (one module registering one record)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from cvt_helpers import TINY
from safetensors.torch import load_file

from electra import architectures, config, flops, presets
from electra.cli import main
from electra.config import ModelConfig, ObjectiveConfig, PretrainConfig, merge
from electra.cvt.tasks import CVTTask
from electra.data.dataset import PretrainingDataset
from electra.errors import ElectraError
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings
from electra.model.hf import save_pretrained, to_hf_state_dict
from electra.objectives import build_objective, objective_step_flops
from electra.pretraining.flops_report import main_flops
from electra.pretraining.init_from import adopt_checkpoint, find_source
from electra.pretraining.loop import pretrain
from electra.tasks import get_task, glue, tagging

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)


def registry_entry(fragment: str, namespace: dict) -> dict:
    """A `"name": Record(...),` line of the guide, evaluated as the dict entry it is."""
    return eval("{" + fragment + "}", namespace)  # noqa: S307 - our own documentation


def test_the_guide_has_its_examples():
    assert len(python_blocks()) == 7


def test_new_objective_is_one_module_and_one_line(monkeypatch, data_dir, tmp_path):
    module_code, registry_line = python_blocks()[:2]
    module = types.ModuleType("electra.objectives.random_detection")
    exec(compile(module_code, str(GUIDE), "exec"), module.__dict__)  # noqa: S102
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for name, spec in registry_entry(registry_line, vars(config)).items():
        monkeypatch.setitem(config.OBJECTIVES, name, spec)

    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg, {"model": {"hidden_size": 32, "embedding_size": 32, "intermediate_size": 64,
                          "num_hidden_layers": 2},
                "objective": {"name": "random-detection"},
                "train": {"steps": 4, "batch_size": 8, "log_every": 2, "eval_every": 2}})
    summary = pretrain(cfg, data_dir, tmp_path / "run", device="cpu", show_progress=False)

    assert set(summary["final"]) == {"discriminator"}
    assert (tmp_path / "run" / "final" / "discriminator" / "model.safetensors").is_file()
    log = (tmp_path / "run" / "metrics.jsonl").read_text()
    rows = [json.loads(line) for line in log.splitlines()]
    trained = [r for r in rows if "rtd_loss" in r]
    assert [r["step"] for r in trained] == [2, 4]
    assert all(0.0 <= r["rtd_acc"] <= 1.0 for r in trained)
    assert any("heldout_auc_unigram" in r for r in rows)  # the probes work for it too
    data = PretrainingDataset(data_dir)
    model = dataclasses.replace(cfg.model, vocab_size=data.vocab_size)  # the run's, its data's
    step_flops = sum(flops.discriminator_breakdown("d", model, 8, data.seq_len).values())
    assert trained[-1]["flops"] == 4 * step_flops
    assert main_flops("tiny", "random-detection", 10, 8, 128)["train_flops"] > 0
    assert main_flops("tiny", "random-detection", None, 8, 128)["steps"] == \
        presets.PRESETS["tiny"].electra_steps  # its step_budget, the default

    # --init-from the discriminator it exported: the new run starts from those weights
    source = find_source(tmp_path / "run", None, "random-detection")
    assert source.main_head == "discriminator" and source.generator is None
    adopt_checkpoint(cfg, source)
    cfg.train.steps = 1
    before = load_file(str(tmp_path / "run" / "final" / "discriminator" / "model.safetensors"))
    seen = {}
    monkeypatch.setattr(module.RandomDetectionObjective, "on_step_start",
                        lambda self, step, total: seen.setdefault(
                            "weights", {k: v.clone() for k, v in
                                        to_hf_state_dict(self.discriminator).items()}))
    pretrain(cfg, data_dir, tmp_path / "continued", device="cpu", show_progress=False,
             init=source)
    assert seen["weights"].keys() == before.keys()
    assert all(torch.equal(seen["weights"][k], before[k]) for k in before)


def _scitail(root: Path) -> Path:
    folder = root / "SciTail"
    folder.mkdir(parents=True)
    for split, n in (("train", 24), ("dev", 8)):
        rows = ["premise\thypothesis\tlabel"] + [
            f"the cell {i} divides\tthe cell {i} {'divides' if i % 2 else 'sleeps'}\t"
            f"{'entails' if i % 2 else 'neutral'}" for i in range(n)]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root


def test_new_glue_shaped_task_is_one_record(monkeypatch, tiny_model, tmp_path):
    (record,) = registry_entry(python_blocks()[2].strip().rstrip(",")
                               .replace("GlueSpec(", '"SciTail": GlueSpec(', 1),
                               vars(glue)).values()
    monkeypatch.setitem(glue.SPECS, record.name, record)
    data = _scitail(tmp_path / "data")

    task = get_task("scitail")
    assert task.name == "SciTail" and len(task.read(data, "train")) == 24
    res = finetune(tiny_model, "SciTail", data, tmp_path / "out",
                   FinetuneSettings(epochs=1, batch_size=8, device="cpu"))
    assert res["task"] == "SciTail" and res["num_eval_examples"] == {"dev": 8}
    assert 0.0 <= res["median"]["accuracy"] <= 1.0
    assert glue.glue_score({"SciTail": 1.0}) is None  # not a GLUE-score task


def _wnut(folder: Path) -> Path:
    folder.mkdir(parents=True)
    sentences = [[("Hanna", "B-person"), ("flew", "O"), ("to", "O"), ("Lagos", "B-location")],
                 [("the", "O"), ("new", "O"), ("Pixel", "B-product"), ("Fold", "I-product")]]
    text = "\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences * 6) + "\n"
    for name in ("wnut17train.conll", "emerging.dev.conll", "emerging.test.annotated"):
        (folder / name).write_text(text)
    return folder


def test_new_tagging_dataset_is_one_record_for_finetuning_and_cvt(monkeypatch, tiny_model,
                                                                  tmp_path):
    for name, record in registry_entry(python_blocks()[3], vars(tagging)).items():
        monkeypatch.setitem(tagging.DATASETS, name, record)
    data = _wnut(tmp_path / "wnut")

    res = finetune(tiny_model, "wnut17", data, tmp_path / "ft",
                   FinetuneSettings(epochs=1, batch_size=8, device="cpu"))
    assert res["task"] == "wnut17" and res["num_eval_examples"] == {"dev": 12}
    assert 0.0 <= res["median"]["f1"] <= 1.0

    sets = [a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]
    assert main(["cvt", "--tasks", "wnut17", "--data", str(data), "--no-cvt",
                 "--out", str(tmp_path / "cvt"), "--epochs", "1", *sets, "--quiet"]) == 0
    scores = json.loads((tmp_path / "cvt" / "results.json").read_text())["scores"]["wnut17"]
    assert set(scores) == {"f1", "precision", "recall"}
    task = CVTTask("wnut17")
    gold = task.read_file(data / "emerging.dev.conll")
    assert task.score(gold, [s.tags for s in gold])["f1"] == 1.0  # IOB2 read as given


def test_new_preset_is_one_record(monkeypatch):
    entry = registry_entry(python_blocks()[4], vars(presets))
    monkeypatch.setattr(presets, "PRESETS", {**presets.PRESETS, **entry})
    monkeypatch.setattr(presets, "SIZES", (*presets.SIZES, "medium"))

    cfg = PretrainConfig.from_preset("medium")
    cfg.validate()
    assert cfg.model.hidden_size == 512 and cfg.train.batch_size == 256
    assert cfg.model.scaled(cfg.objective.generator_multiplier).hidden_size == 128
    assert main_flops("medium", "electra", None, None, None)["train_flops"] > 0
    assert presets.finetune_defaults("medium") == (2e-4, 0.8)
    assert presets.multitask_defaults("medium") == (2e-4, 0.9)
    assert presets.infer_size(512) == "medium" and presets.infer_size(768) == "base"


def test_new_architecture_is_one_record(monkeypatch, tmp_path, data_dir):
    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))
    module = types.ModuleType("prenorm")
    exec(compile(python_blocks()[5], str(GUIDE), "exec"), module.__dict__)  # noqa: S102
    sizes = {"vocab_size": 90, "embedding_size": 32, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
    cfg, bert = ModelConfig(architecture="prenorm", **sizes), ModelConfig(**sizes)
    cfg.validate()

    torch.manual_seed(0)
    ids = torch.randint(5, 90, (4, 24))
    mask = torch.ones_like(ids)
    mask[1, 18:] = 0
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}
    for name in ("electra", "electric", "teams", "mlm"):
        obj_cfg = ObjectiveConfig(name=name, generator_multiplier=0.5)
        objective = build_objective(cfg, obj_cfg)
        optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-3)
        before = {k: v.clone() for k, v in objective.state_dict().items()}
        loss = objective(batch).loss
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
        assert any(not torch.equal(v, objective.state_dict()[k]) for k, v in before.items())
        encoders = [m for m in objective.modules() if isinstance(m, module.PreNormEncoder)]
        assert encoders and all(isinstance(layer, module.PreNormLayer)
                                for e in encoders for layer in e.layers)
        # its FLOPs: the BERT architecture's plus a LayerNorm after the last layer
        # (5 per element, as every LayerNorm with a bias), in each network but TEAMS', whose
        # extra layer carries one more
        step = sum(objective_step_flops(cfg, obj_cfg, 4, 24).values())
        assert step > sum(objective_step_flops(bert, obj_cfg, 4, 24).values())

    assert flops.encoder_flops(cfg, 24) == flops.encoder_flops(bert, 24) + 5 * 32 * 24
    encoder = module.PreNormEncoder(cfg)
    assert flops.encoder_params(cfg) == sum(p.numel() for p in encoder.parameters())
    assert isinstance(FinetuneModel(encoder, "sequence", 3).task_head.out, torch.nn.Linear)
    with pytest.raises(ElectraError, match="'prenorm' architecture's record has no"):
        save_pretrained(objective.model, tmp_path / "mlm")
    # a pre-training run ends in its export, so it is refused before it trains
    run = PretrainConfig.from_preset("tiny")
    run.model = cfg
    with pytest.raises(ElectraError, match="'prenorm' architecture's record has no"):
        pretrain(run, data_dir, tmp_path / "run", device="cpu", show_progress=False)
    assert not (tmp_path / "run").exists()


def test_new_backend_is_one_record(monkeypatch, capsys):
    """The guide's XPU record: asked by name it is refused where there is none, `auto` passes
    it by, and every question about hardware reads it (here with the device faked present)."""
    from electra import device as device_mod
    from electra.precision import resolve_precision
    from electra.runtime import checkpoint

    monkeypatch.setattr(device_mod, "BACKENDS", dict(device_mod.BACKENDS))
    monkeypatch.setattr(device_mod, "AUTO_ORDER", list(device_mod.AUTO_ORDER))
    monkeypatch.setattr(checkpoint, "BACKENDS", device_mod.BACKENDS)
    exec(compile(python_blocks()[6], str(GUIDE), "exec"), {})  # noqa: S102
    xpu = device_mod.BACKENDS["xpu"]
    assert device_mod.AUTO_ORDER.index("xpu") == device_mod.AUTO_ORDER.index("cpu") - 1
    if not xpu.available():
        with pytest.raises(ElectraError, match="--device xpu: no xpu device is available here"):
            device_mod.resolve_device("xpu")
        assert device_mod.resolve_device("auto").type != "xpu"
    assert resolve_precision("auto", torch.device("xpu")) == "bf16"
    assert device_mod.backend_of("xpu:0") is xpu and xpu.ddp_backend == "xccl"
    states = []
    monkeypatch.setitem(device_mod.BACKENDS, "xpu", dataclasses.replace(
        xpu, available=lambda: True, get_rng=lambda: "state", set_rng=states.append))
    assert checkpoint.rng_state()["xpu"] == "state"
    checkpoint.set_rng_state({**checkpoint.rng_state(), "xpu": "restored"})
    assert states == ["restored"]

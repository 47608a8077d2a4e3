"""`electra export --onnx`: every kind of model as a graph ONNX Runtime runs like PyTorch
(1e-4 in fp32, on shapes other than the traced one), int8 copies, `--hf` for one task of a
multi-task model, and the bad inputs (one line, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from export_helpers import finetuned_dir, small_config

from electra.cli import main as electra
from electra.exporting.serving import INPUT_NAMES, load_served
from electra.finetuning.heads import MultitaskModel
from electra.finetuning.model_io import load_finetuned, save_finetuned
from electra.model.encoder import Encoder, init_weights
from electra.model.hf import save_pretrained
from electra.model.networks import Discriminator, Generator
from electra.model.task_heads import SequenceHead, TokenHead

for package in ("onnx", "onnxruntime", "onnxscript"):
    pytest.importorskip(package, reason=f"{package} is not installed (pip install -e "
                        "'.[onnx]'); CI installs it with the test extra")


def _pretrained(root: Path, vocab_dir: Path, cls, alibi: bool) -> Path:
    torch.manual_seed(2)
    model = cls(small_config(vocab_dir, alibi))
    init_weights(model, 0.02)
    return save_pretrained(model, root / f"{cls.__name__}-{alibi}", vocab_dir)


def _runtime_vs_torch(model_dir: Path, onnx_path: Path) -> float:
    """Difference on a batch shaped unlike the traced one: 5 rows of 20, random padding."""
    import onnxruntime

    served = load_served(model_dir)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (5, 20), generator=generator)
    lengths = torch.tensor([20, 3, 11, 20, 7])
    mask = (torch.arange(20)[None] < lengths[:, None]).long()
    types = torch.zeros_like(ids)
    types[:, 10:] = 1
    batch = {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types * mask}
    with torch.no_grad():
        expected = [t.numpy() for t in served.module(*(batch[n] for n in INPUT_NAMES))]
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: batch[n].numpy() for n in INPUT_NAMES})
    real = mask.bool().numpy()
    worst = 0.0
    for e, g in zip(expected, got, strict=True):
        assert e.shape == g.shape
        if e.ndim >= 2 and e.shape[:2] == (5, 20):  # per-token outputs: real tokens only
            e, g = e[real], g[real]
        worst = max(worst, float(np.abs(e - g).max()))
    return worst


def _transformers_encoder(root: Path, vocab_dir: Path) -> Path:
    """A bare `ElectraModel` saved by transformers itself, with our tokenizer files."""
    transformers = pytest.importorskip("transformers")
    cfg = small_config(vocab_dir, alibi=False)
    hf_config = transformers.ElectraConfig(**{k: getattr(cfg, k) for k in (
        "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
        "num_attention_heads", "intermediate_size", "max_position_embeddings")})
    torch.manual_seed(4)
    out = root / "encoder"
    transformers.ElectraModel(hf_config).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (out / name).write_bytes((vocab_dir / name).read_bytes())
    return out


@pytest.mark.parametrize("kind", ["discriminator", "generator", "encoder", "SST-2", "regression",
                                  "chunk", "squad", "squad2"])
def test_onnx_export_matches_pytorch_and_quantises(kind, tmp_path, vocab_dir):
    if kind == "discriminator":
        model_dir = _pretrained(tmp_path, vocab_dir, Discriminator, alibi=True)
    elif kind == "generator":
        model_dir = _pretrained(tmp_path, vocab_dir, Generator, alibi=True)
    elif kind == "encoder":
        model_dir = _transformers_encoder(tmp_path, vocab_dir)
    else:
        model_dir = finetuned_dir(tmp_path, vocab_dir, kind, alibi=True)
    out = tmp_path / "onnx"
    assert electra(["export", str(model_dir), "--onnx", str(out), "--int8"]) == 0
    report = json.loads((out / "export.json").read_text())
    assert report["max_abs_diff"] <= 1e-4
    assert {"model.onnx", "model.int8.onnx", "config.json", "tokenizer.json"} <= \
        {p.name for p in out.iterdir()}
    assert _runtime_vs_torch(model_dir, out / "model.onnx") <= 1e-4
    assert (out / "model.int8.onnx").stat().st_size < (out / "model.onnx").stat().st_size


def _multitask(root: Path, vocab_dir: Path) -> Path:
    torch.manual_seed(3)
    cfg = small_config(vocab_dir, alibi=True)
    model = MultitaskModel(Encoder(cfg), {"SST-2": SequenceHead(32, 2, 0.1),
                                          "chunk": TokenHead(32, 4, 0.1)})
    init_weights(model, 0.02)
    info = {"tasks": [{"task": {"name": "SST-2", "labels": ["0", "1"]}, "head_kind": "sequence",
                       "num_outputs": 2},
                      {"task": {"name": "chunk", "labels": ["B-NP", "B-VP", "I-NP", "O"]},
                       "head_kind": "token", "num_outputs": 4}],
            "settings": {"max_seq_len": 64}, "scores": {"SST-2": {"accuracy": 0.5}}}
    return save_finetuned(model, root / "multi", vocab_dir, info)


def test_one_task_of_a_multitask_model_exports_on_its_own(tmp_path, vocab_dir, capsys):
    multi = _multitask(tmp_path, vocab_dir)
    assert electra(["export", str(multi), "--hf", str(tmp_path / "sst2"), "--task",
                    "sst-2"]) == 0
    config = json.loads((tmp_path / "sst2" / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "1"}
    assert config["auto_map"]["AutoModelForSequenceClassification"].endswith(
        "ElectraToolkitForSequenceClassification")
    single, _, info = load_finetuned(tmp_path / "sst2")
    whole, _, _ = load_finetuned(multi)
    assert info["task"]["name"] == "SST-2" and info["scores"] == {"accuracy": 0.5}
    for name, tensor in whole.task_heads["SST-2"].state_dict().items():
        assert torch.equal(single.task_head.state_dict()[name], tensor)
    # The ONNX export of one head, straight from the multi-task directory.
    assert electra(["export", str(multi), "--onnx", str(tmp_path / "chunk"), "--task",
                    "chunk"]) == 0
    assert json.loads((tmp_path / "chunk" / "export.json").read_text())["outputs"] == ["logits"]
    config = json.loads((tmp_path / "chunk" / "config.json").read_text())
    assert config["id2label"] == {"0": "B-NP", "1": "B-VP", "2": "I-NP", "3": "O"}
    assert "auto_map" not in config  # the modeling code is not in an ONNX folder
    # The Python function returns what the command prints, and prints nothing itself.
    import electra as package

    capsys.readouterr()
    result = package.export(multi, onnx=tmp_path / "api-chunk", task="chunk")
    assert capsys.readouterr() == ("", "")
    assert result.report["summary"].startswith(f"{tmp_path / 'api-chunk' / 'model.onnx'}: ")


def test_bad_inputs_are_one_line_and_write_nothing(tmp_path, vocab_dir, capsys, monkeypatch):
    multi = _multitask(tmp_path, vocab_dir)
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    cases = [
        (["export", str(not_a_model), "--onnx", str(tmp_path / "o1")], "no config.json"),
        (["export", str(multi), "--onnx", str(tmp_path / "o2")], "name one task with --task"),
        (["export", str(multi), "--onnx", str(tmp_path / "o3"), "--task", "mnli"],
         "no head for task 'mnli'"),
        (["export", str(multi), "--hf", str(tmp_path / "o4")], "name one task with --task"),
    ]
    for argv, message in cases:
        assert electra(argv) == 1
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
        assert not Path(argv[3]).exists()
    info = json.loads((multi / "finetune.json").read_text())
    info["tasks"][0]["head_kind"] = "pyramid"
    (multi / "finetune.json").write_text(json.dumps(info))
    assert electra(["export", str(multi), "--onnx", str(tmp_path / "o5"), "--task",
                    "SST-2"]) == 1
    assert "no head for 'pyramid'" in capsys.readouterr().err
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else
                        real_find_spec(name, *a))
    assert electra(["export", str(multi), "--onnx", str(tmp_path / "o6"), "--task",
                    "SST-2"]) == 1
    err = capsys.readouterr().err
    assert "needs onnxruntime: pip install -e '.[onnx]' in the electra checkout" in err
    assert not (tmp_path / "o5").exists() and not (tmp_path / "o6").exists()

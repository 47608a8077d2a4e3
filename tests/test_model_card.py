"""Every model folder electra writes carries a model card (README.md) that huggingface_hub
parses, with the metadata the Hub lists and filters by and only the facts the run recorded."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from cvt_helpers import TINY as CVT_TINY
from cvt_helpers import write_chunk, write_unlabeled
from export_helpers import small_config
from huggingface_hub import ModelCard
from test_train import BATCH, TINY

from electra.cli import main
from electra.errors import ElectraError
from electra.finetuning.heads import MultitaskModel
from electra.finetuning.model_io import save_finetuned
from electra.model import card as card_module
from electra.model.card import RunFacts, hub_id, write_model_card
from electra.model.encoder import Encoder, init_weights
from electra.model.task_heads import SequenceHead, TokenHead

EXTRA = "## Intended use\n\nA test of the card's own section."
STEPS, SEQ_LEN, SEEDS = 4, 32, 2
LICENSES = {"pt": "apache-2.0", "ft": "mit", "hf": "cc-by-4.0"}  # --license of each command


def _user_data(directory: Path) -> Path:
    directory.mkdir()
    for split, n in (("train", 48), ("dev", 24)):
        lines = ["text\tlabel"] + [f"the of {'is ' * (i % 4)}to\t{'yes' if i % 2 else 'no'}"
                                   for i in range(n)]
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir) -> Path:
    """A tiny pre-training run, a 2-seed fine-tune of its discriminator and an `electra export
    --hf` of the fine-tuned model, each with --card-extra and its own --license (LICENSES);
    and the export again without either."""
    root = tmp_path_factory.mktemp("cards")
    cfg = copy.deepcopy(TINY)
    cfg["train"]["steps"] = STEPS
    (root / "tiny.json").write_text(json.dumps(cfg))
    (root / "extra.md").write_text(EXTRA + "\n")
    extra = ["--card-extra", str(root / "extra.md")]
    assert main(["pretrain", "--config", str(root / "tiny.json"), "--data", str(data_dir),
                 "--out", str(root / "pt"), "--quiet", *extra,
                 "--license", LICENSES["pt"]]) == 0
    assert main(["finetune", "--model", str(root / "pt" / "final" / "discriminator"),
                 "--task", "user", "--text-a", "text", "--label", "label", "--data",
                 str(_user_data(root / "user")), "--out", str(root / "ft"), "--epochs", "1",
                 "--seeds", str(SEEDS), "--save-all-seeds", "--quiet", *extra,
                 "--license", LICENSES["ft"]]) == 0
    assert main(["export", str(root / "ft" / "model"), "--hf", str(root / "hf"), *extra,
                 "--license", LICENSES["hf"]]) == 0
    assert main(["export", str(root / "ft" / "model"), "--hf", str(root / "plain" / "hf")]) == 0
    return root


def _card(folder: Path) -> ModelCard:
    return ModelCard.load(folder / "README.md")


def _metrics(card: ModelCard) -> dict[str, tuple[float, str]]:
    return {r.metric_type: (r.metric_value, r.metric_name) for r in card.data.eval_results}


def test_pretraining_cards(runs, data_dir):
    final = runs / "pt" / "final"
    config = json.loads((final / "discriminator" / "config.json").read_text())
    flops = config["electra_toolkit"]["train_flops"]
    for name, pipeline in (("discriminator", "feature-extraction"), ("generator", "fill-mask")):
        card = _card(final / name)
        assert card.data.library_name == "transformers"
        assert card.data.pipeline_tag == pipeline
        assert card.data.tags == ["electra"]
        assert card.data.base_model is None and card.data.eval_results is None
        assert card.text.startswith(f"\n# pt-{name}\n")
        for line in ("- preset: `tiny`", "- objective: `electra`", f"- steps: {STEPS}",
                     f"- tokens seen: {STEPS * BATCH * SEQ_LEN:,}",
                     f"- training FLOPs: {flops:.3g} (this run)", "- corpus: `corpus.txt`",
                     f"- prepared data: `{data_dir.name}`",
                     f"- vocabulary checksum: `{config['electra_toolkit']['vocab_checksum']}`",
                     "Framework: electra 0.1.0"):
            assert line in card.text
        assert card.text.endswith(EXTRA + "\n")


def test_finetuned_card_reports_the_median_and_every_seed(runs):
    results = json.loads((runs / "ft" / "results.json").read_text())
    card = _card(runs / "ft" / "model")
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "text-classification"
    assert card.data.tags == ["electra", "user"]
    assert card.data.base_model is None  # a local path: in the text only
    assert f"- fine-tuned from: `{runs / 'pt' / 'final' / 'discriminator'}`" in card.text
    assert card.data.model_name == "ft"
    assert _metrics(card) == {m: (v, f"dev {m} (median of {SEEDS} seeds)")
                              for m, v in results["median"].items()}
    [result] = card.data.eval_results
    assert (result.task_type, result.dataset_type, result.dataset_split) == (
        "text-classification", "user", "validation")
    seeds = " | ".join(f"seed {s['seed']}" for s in results["seeds"])
    assert f"| metric | median | {seeds} |" in card.text
    assert card.text.endswith(EXTRA + "\n")
    for seed in results["seeds"]:
        own = _card(runs / "ft" / f"seed{seed['seed']}" / "model")
        assert _metrics(own) == {m: (v, f"dev {m} (seed {seed['seed']})")
                                 for m, v in seed["scores"].items()}
        assert own.text.endswith(EXTRA + "\n")


def test_license_is_stated_where_given_and_only_there(runs):
    """--license reaches every card its command writes: each OUT/final/ network, OUT/model and
    every kept seed's, an export's; the card is otherwise the one written without it."""
    folders = {"pt": [runs / "pt" / "final" / "discriminator", runs / "pt" / "final" / "generator"],
               "ft": [runs / "ft" / "model", *sorted(runs.glob("ft/seed*/model"))],
               "hf": [runs / "hf"]}
    assert len(folders["ft"]) == 1 + SEEDS
    for command, paths in folders.items():
        for folder in paths:
            assert _card(folder).data.license == LICENSES[command]
    plain, licensed = _card(runs / "plain" / "hf"), _card(runs / "hf")
    assert plain.data.license is None
    assert "license" not in (runs / "plain" / "hf" / "README.md").read_text().split("---")[1]
    assert {**plain.data.to_dict(), "license": LICENSES["hf"]} == licensed.data.to_dict()
    assert licensed.text == plain.text.rstrip("\n") + "\n\n" + EXTRA + "\n"


def test_license_ids_are_checked_before_a_run(tmp_path, tiny_model):
    for bad in ("", "apache 2.0"):
        with pytest.raises(ElectraError) as e:
            card_module.read_card_license(bad)
        assert str(e.value) == (f"--license {bad!r}: a license id without spaces, as the Hub "
                                "names them (apache-2.0, mit, cc-by-4.0, ...)")
    assert main(["export", str(tiny_model), "--hf", str(tmp_path / "out"), "--license",
                 "my license"]) == 1
    assert not (tmp_path / "out").exists()


def test_exported_hf_folder_has_the_kept_seeds_card(runs):
    info = json.loads((runs / "hf" / "finetune.json").read_text())
    card = _card(runs / "hf")
    assert (card.data.library_name, card.data.pipeline_tag) == ("transformers",
                                                                "text-classification")
    assert _metrics(card) == {m: (v, f"dev {m} (seed {info['seed']})")
                              for m, v in info["scores"].items()}
    assert "trust_remote_code=True" in card.text
    assert card.text.endswith(EXTRA + "\n")


def test_onnx_export_card(runs):
    pytest.importorskip("onnxruntime")
    out = runs / "onnx"
    assert main(["export", str(runs / "ft" / "model"), "--onnx", str(out)]) == 0
    card = _card(out)
    info = json.loads((runs / "ft" / "model" / "finetune.json").read_text())
    assert card.data.library_name == "onnx" and card.data.pipeline_tag is None
    assert card.data.tags == ["electra", "user", "onnx"]
    assert _metrics(card) == {m: (v, f"dev {m} (seed {info['seed']})")
                              for m, v in info["scores"].items()}
    assert "onnxruntime.InferenceSession" in card.text and "(`model.onnx`)" in card.text


def test_multitask_card_lists_every_task(tmp_path, vocab_dir):
    torch.manual_seed(3)
    model = MultitaskModel(Encoder(small_config(vocab_dir, alibi=False)),
                           {"SST-2": SequenceHead(32, 2, 0.1), "chunk": TokenHead(32, 4, 0.1)})
    init_weights(model, 0.02)
    seeds = [{"seed": 1, "scores": {"SST-2": {"accuracy": 0.5}, "chunk": {"f1": 0.25}}},
             {"seed": 2, "scores": {"SST-2": {"accuracy": 0.75}, "chunk": {"f1": 0.5}}},
             {"seed": 3, "scores": {"SST-2": {"accuracy": 0.25}, "chunk": {"f1": 0.125}}}]
    info = {"tasks": [{"task": {"name": "SST-2", "labels": ["0", "1"]}, "head_kind": "sequence",
                       "num_outputs": 2},
                      {"task": {"name": "chunk", "labels": ["B-NP", "B-VP", "I-NP", "O"]},
                       "head_kind": "token", "num_outputs": 4}],
            "source_model": "google/electra-small-discriminator", "seed": 2,
            "scores": seeds[1]["scores"]}
    folder = save_finetuned(model, tmp_path / "mt" / "model", vocab_dir, info)
    write_model_card(folder, RunFacts(seeds=seeds))
    card = _card(folder)
    assert card.data.pipeline_tag == "feature-extraction"  # transformers serves the encoder
    assert card.data.tags == ["electra", "multitask", "SST-2", "chunk"]
    assert card.data.base_model == "google/electra-small-discriminator"
    assert [(r.task_type, r.dataset_name, r.metric_type, r.metric_value)
            for r in card.data.eval_results] == [
        ("text-classification", "SST-2", "accuracy", 0.5),
        ("token-classification", "chunk", "f1", 0.25)]


def test_cvt_model_card(tmp_path):
    from electra.cvt.config import make_config
    from electra.cvt.run import TrainSettings, run_train

    chunk = write_chunk(tmp_path / "chunk")
    res = run_train(TrainSettings(tasks=["chunk"], data=[str(chunk)], out=str(tmp_path / "run"),
                                  config=make_config("small", CVT_TINY),
                                  unlabeled=[str(write_unlabeled(tmp_path / "raw.txt"))],
                                  steps=2, seed=3, save_every=0))
    card = _card(tmp_path / "run" / "model")
    assert card.data.library_name is None and card.data.pipeline_tag is None
    assert card.data.tags == ["electra", "cvt", "chunk"]
    assert _metrics(card) == {m: (v, f"dev {m} (seed 3)")
                              for m, v in res["scores"]["chunk"].items()}
    assert "- objective: `cvt`" in card.text and "- steps: 2" in card.text


def test_hub_ids_and_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = "/home/u/.cache/huggingface/hub/models--google--electra-base-discriminator/" \
            "snapshots/abc123"
    assert hub_id(cache) == "google/electra-base-discriminator"
    assert hub_id("google/electra-small-discriminator") == "google/electra-small-discriminator"
    (tmp_path / "runs" / "model").mkdir(parents=True)
    (tmp_path / "runs" / "model" / "finetune.json").write_text("{}")
    assert hub_id("runs/model") is None  # written by electra: a path, not an id
    assert hub_id(str(tmp_path / "runs" / "model")) is None
    assert hub_id("runs/x/final/discriminator") is None
    assert hub_id(None) is None


def test_without_huggingface_hub_no_card_and_card_extra_is_refused(tmp_path, tiny_model,
                                                                   monkeypatch):
    monkeypatch.setattr(card_module, "hub_library_available", lambda: False)
    assert write_model_card(tiny_model) is None
    assert not (tiny_model / "README.md").exists()
    (tmp_path / "extra.md").write_text(EXTRA)
    with pytest.raises(ElectraError, match="--card-extra .*extra.md: model cards need "
                                           "huggingface_hub"):
        card_module.read_card_extra(tmp_path / "extra.md")


def test_missing_card_extra_file_stops_before_writing(tmp_path, tiny_model):
    with pytest.raises(ElectraError, match="--card-extra .*nope.md: cannot read it"):
        card_module.read_card_extra(tmp_path / "nope.md")
    assert main(["export", str(tiny_model), "--hf", str(tmp_path / "out"), "--card-extra",
                 str(tmp_path / "nope.md")]) != 0
    assert not (tmp_path / "out").exists()


def test_random_init_baseline_card_says_it_is_untrained(tmp_path, tiny_model):
    from electra.finetuning.baseline import random_init

    folder = random_init(tiny_model, tmp_path / "random_init", seed=5)
    card = _card(folder)
    assert card.data.pipeline_tag == "feature-extraction" and card.data.base_model is None
    assert card.text.startswith("\n# random_init\n\nRandomly initialised weights (seed 5, as "
                                "pre-training starts), not trained")
    assert f"with the tokenizer of `{tiny_model}`." in card.text
    assert "## Training" not in card.text

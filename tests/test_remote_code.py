"""What electra writes loads and serves in `transformers`, on a machine without electra: every
check that reads a directory runs in a subprocess that imports only torch and transformers
(and fails if `electra` gets imported), against outputs computed here with electra's own
loaders, on padded batches."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from export_helpers import (
    finetuned_dir,
    finetuned_model,
    run_isolated,
    small_config,
    task_named,
)

from electra.finetuning.evaluation import predict_examples
from electra.finetuning.model_io import load_finetuned
from electra.finetuning.settings import FinetuneSettings
from electra.model.encoder import init_weights
from electra.model.hf import load_pretrained, save_pretrained
from electra.model.networks import Discriminator, Generator
from electra.model.task_heads import serving_outputs
from electra.tasks import Example
from electra.tokenizer import load_tokenizer, tokenized_batch

pytest.importorskip("transformers")

SENTENCES = ["the film was a delight from start to finish", "dull", "a plot with no surprises",
             "the actors seem to enjoy every scene of it"]


def _batch(vocab_dir: Path) -> dict[str, torch.Tensor]:
    """A padded batch as transformers' tokenizer would give it (row 2 is a pair)."""
    return tokenized_batch(load_tokenizer(vocab_dir),
                           [SENTENCES[0], SENTENCES[1], (SENTENCES[2], SENTENCES[3]),
                            (SENTENCES[1], SENTENCES[0])])


def _served(model: torch.nn.Module, info: dict | None, batch: dict) -> list[torch.Tensor]:
    """What a server gets from `model` (a Discriminator / Generator, or a fine-tuned model
    with its finetune.json) for `batch`."""
    model.eval()
    with torch.no_grad():
        if info is None:
            return [model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])]
        hidden = model.encoder(batch["input_ids"], batch["token_type_ids"],
                               batch["attention_mask"])
        return list(serving_outputs(info["head_kind"], model.task_head, hidden,
                                    batch["attention_mask"], batch["token_type_ids"],
                                    info["task"].get("label_range")))


def _expected(directory: Path, batch: dict) -> list[torch.Tensor]:
    """Our outputs for `batch`, through electra's own loaders."""
    if (directory / "finetune.json").is_file():
        model, _, info = load_finetuned(directory)
        return _served(model, info, batch)
    return _served(load_pretrained(directory), None, batch)


# Runs in a fresh interpreter: torch and transformers only.
LOADER = textwrap.dedent("""
    import json, sys
    import torch
    import transformers
    cases = json.load(open(sys.argv[1]))
    report = {}
    for case in cases:
        auto = getattr(transformers, case["auto"])
        kwargs = {"trust_remote_code": True} if case["remote"] else {}
        model = auto.from_pretrained(case["dir"], **kwargs).eval()
        batch = torch.load(case["batch"])
        expected = torch.load(case["expected"])
        with torch.no_grad():
            out = model(**batch)
        names = case["outputs"]
        diffs = [float((out[n] - e).abs().max()) for n, e in zip(names, expected, strict=True)]
        report[case["dir"]] = {"class": type(model).__name__, "max_abs_diff": max(diffs)}
    report["electra imported"] = any(m == "electra" or m.startswith("electra.")
                                     for m in sys.modules)
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, vocab_dir) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("exported")
    batch = _batch(vocab_dir)
    torch.save(batch, root / "batch.pt")
    torch.manual_seed(0)
    cases = []

    def add(directory: Path, in_memory: list[torch.Tensor], auto: str, remote: bool,
            outputs: list[str]) -> None:
        """`in_memory`: the model's outputs before it was written (what loading must give)."""
        expected = root / f"{directory.name}-expected.pt"
        torch.save(in_memory[:len(outputs)], expected)
        cases.append({"dir": str(directory), "auto": auto, "remote": remote,
                      "outputs": outputs, "batch": str(root / "batch.pt"),
                      "expected": str(expected), "in_memory": [t.clone() for t in in_memory]})

    for alibi in (True, False):
        disc = Discriminator(small_config(vocab_dir, alibi))
        gen = Generator(small_config(vocab_dir, alibi))
        init_weights(disc, 0.02)
        init_weights(gen, 0.02)
        tag = "alibi" if alibi else "abs"
        add(save_pretrained(disc, root / f"disc-{tag}", vocab_dir), _served(disc, None, batch),
            "AutoModelForPreTraining", alibi, ["logits"])
        add(save_pretrained(gen, root / f"gen-{tag}", vocab_dir), _served(gen, None, batch),
            "AutoModelForMaskedLM", alibi, ["logits"])
    for alibi in (True, False):
        for name, auto, outputs in (
                ("SST-2", "AutoModelForSequenceClassification", ["logits"]),
                ("STS-B", "AutoModelForSequenceClassification", ["logits"]),
                ("regression", "AutoModelForSequenceClassification", ["logits"]),
                ("chunk", "AutoModelForTokenClassification", ["logits"]),
                ("squad", "AutoModelForQuestionAnswering", ["start_logits", "end_logits"]),
                ("squad2", "AutoModelForQuestionAnswering", ["start_logits", "end_logits"])):
            model, info = finetuned_model(vocab_dir, name, alibi)
            native = name == "chunk" and not alibi
            add(finetuned_dir(root, vocab_dir, name, alibi), _served(model, info, batch), auto,
                not native, outputs)
    return root, cases


def test_every_export_loads_in_transformers_alone_with_our_outputs(exported, tmp_path):
    """Issue acceptance: tiny-local discriminator and generator, fine-tuned classification,
    regression (linear and sigmoid heads), tagging and SQuAD models, padded batch, 1e-5."""
    root, cases = exported
    (root / "cases.json").write_text(json.dumps(
        [{k: v for k, v in case.items() if k != "in_memory"} for case in cases]))
    report = run_isolated(LOADER, [str(root / "cases.json")], tmp_path)
    assert report.pop("electra imported") is False
    classes = {Path(d).name: r["class"] for d, r in report.items()}
    assert classes["disc-alibi"] == "ElectraToolkitForPreTraining"
    assert classes["disc-abs"] == "ElectraForPreTraining"  # transformers' own class
    assert classes["chunk-abs"] == "ElectraForTokenClassification"
    assert classes["chunk-alibi"] == "ElectraToolkitForTokenClassification"
    assert classes["SST-2-abs"] == "ElectraToolkitForSequenceClassification"
    assert classes["squad-alibi"] == "ElectraToolkitForQuestionAnswering"
    worst = {d: r["max_abs_diff"] for d, r in report.items()}
    assert max(worst.values()) <= 1e-5, worst


def test_export_directories_round_trip_through_electra(exported):
    """Both layouts read back into electra with the outputs the model had before it was
    written, bit for bit."""
    root, cases = exported
    for case in cases:
        loaded = _expected(Path(case["dir"]), torch.load(case["batch"]))
        assert len(loaded) == len(case["in_memory"])
        for got, want in zip(loaded, case["in_memory"], strict=True):
            assert torch.equal(got, want), case["dir"]


def test_served_squad_logits_are_masked_as_training_masks_them(vocab_dir):
    """The serving mask, built from what a server has (token types, attention mask), is the
    p_mask electra's SQuAD features carry in training, so the served start logits equal the
    head's own and the end logits follow a start inside the context."""
    from electra.tasks.squad.data import (
        SquadAnswer,
        SquadExample,
        collate_features,
        convert_examples_to_features,
    )

    examples = [SquadExample("q1", "who enjoys every scene?", SENTENCES[3],
                             [SquadAnswer("the actors", 0)]),
                SquadExample("q2", "how was the film?", SENTENCES[0],
                             [SquadAnswer("a delight", 13)])]
    features = convert_examples_to_features(examples, load_tokenizer(vocab_dir), 64, 32, 16)
    batch = collate_features(features)
    model, info = finetuned_model(vocab_dir, "squad", alibi=True)
    start, end = _served(model, info, batch)
    with torch.no_grad():
        hidden = model.encoder(batch["input_ids"], batch["token_type_ids"],
                               batch["attention_mask"])
        own_start = model.task_head.start_logits(hidden, batch["p_mask"])
    assert torch.equal(start, own_start)
    masked = torch.finfo(start.dtype).min
    assert torch.equal(start == masked, batch["p_mask"].bool())
    assert not batch["p_mask"].bool().gather(1, start.argmax(-1, keepdim=True)).any()
    assert torch.equal(end == masked, batch["p_mask"].bool())


def test_serving_mask_does_not_depend_on_the_padding_side():
    from electra.model.squad_head import serving_p_mask

    # [CLS] q q [SEP] c c [SEP], then the same row padded on the left
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 1, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1, 1, 1]])
    p_mask = serving_p_mask(mask, types).long()
    assert p_mask[0].tolist() == [0, 1, 1, 1, 0, 0, 1, 1, 1]
    assert p_mask[1].tolist() == [1, 1, 0, 1, 1, 1, 0, 0, 1]


PIPELINES = textwrap.dedent("""
    import json, sys
    from transformers import pipeline
    args = json.load(open(sys.argv[1]))
    out = {}
    clf = pipeline("text-classification", model=args["sst2"], trust_remote_code=True)
    out["sst2"] = [r["label"] for r in clf(args["sentences"])]
    reg = pipeline("text-classification", model=args["regression"], trust_remote_code=True)
    out["regression"] = [r["score"] for r in reg(args["sentences"])]
    tagger = pipeline("token-classification", model=args["chunk"], trust_remote_code=True,
                      ignore_labels=[])
    out["chunk"] = [{t["start"]: t["entity"] for t in r} for r in tagger(args["sentences"])]
    out["electra imported"] = any(m == "electra" or m.startswith("electra.")
                                  for m in sys.modules)
    print(json.dumps(out))
""")


def test_pipelines_give_electra_predicts_labels(exported, tmp_path):
    """text-classification (labels; regression scores on the label scale) and
    token-classification. transformers 5 has no question-answering pipeline; the SQuAD model's
    start/end logits are checked above."""
    root, _ = exported
    dirs = {"sst2": root / "SST-2-alibi", "regression": root / "regression-alibi",
            "chunk": root / "chunk-alibi"}
    (tmp_path / "args.json").write_text(json.dumps(
        {**{k: str(v) for k, v in dirs.items()}, "sentences": SENTENCES}))
    got = run_isolated(PIPELINES, [str(tmp_path / "args.json")], tmp_path)
    assert got.pop("electra imported") is False

    settings = FinetuneSettings(max_seq_len=64)

    def ours(directory: Path, task_name: str, examples: list[Example]) -> list:
        model, tokenizer, _ = load_finetuned(directory)
        return predict_examples(model, task_named(task_name), examples, tokenizer, settings,
                                torch.device("cpu"))

    sentences = [Example(i, texts=(s,)) for i, s in enumerate(SENTENCES)]
    # served under the task's class names (the Hub's), where electra predict writes the TSVs'
    served = {"0": "negative", "1": "positive"}
    assert got["sst2"] == [served[label] for label in ours(dirs["sst2"], "SST-2", sentences)]
    assert got["regression"] == pytest.approx(ours(dirs["regression"], "regression", sentences),
                                              abs=1e-5)
    words = [Example(i, words=s.split()) for i, s in enumerate(SENTENCES)]
    # Each word's tag is its first sub-token's label, as electra's tagger decides it.
    for by_start, sentence, tags in zip(got["chunk"], SENTENCES, ours(dirs["chunk"], "chunk",
                                                                       words), strict=True):
        starts = [i for i, c in enumerate(sentence) if c != " " and (i == 0 or
                                                                     sentence[i - 1] == " ")]
        assert [by_start[str(start)] for start in starts] == tags


def test_directories_in_the_earlier_layout_still_load(tmp_path, vocab_dir):
    """Fine-tuned directories written before the remote-code layout: the encoder under
    transformers' names, the head under `task_head.`, architectures ["ElectraModel"]."""
    from safetensors.torch import save_file

    from electra.model.hf import encoder_to_hf, hf_config

    current = finetuned_dir(tmp_path, vocab_dir, "SST-2", alibi=True)
    model, _, info = load_finetuned(current)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    state = {**encoder_to_hf(model.encoder.state_dict()),
             **{f"task_head.{k}": v for k, v in model.task_head.state_dict().items()}}
    save_file({k: v.contiguous() for k, v in state.items()}, str(earlier / "model.safetensors"))
    (earlier / "config.json").write_text(json.dumps(hf_config(model.encoder.config,
                                                              "ElectraModel")))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "finetune.json"):
        (earlier / name).write_bytes((current / name).read_bytes())
    batch = _batch(vocab_dir)
    assert torch.equal(_expected(earlier, batch)[0], _expected(current, batch)[0])
    # `electra export --hf` rewrites it in the current layout, which transformers serves.
    from electra.cli import main as electra

    assert electra(["export", str(earlier), "--hf", str(tmp_path / "upgraded")]) == 0
    upgraded = json.loads((tmp_path / "upgraded" / "config.json").read_text())
    assert upgraded["model_type"] == "electra-toolkit" and upgraded["id2label"]
    assert torch.equal(_expected(tmp_path / "upgraded", batch)[0], _expected(current, batch)[0])


def test_remote_code_files_import_only_torch_numpy_transformers_and_the_standard_library():
    """What `transformers` checks before it runs remote code: every import must be installed
    on the serving machine, which has no electra."""
    import ast

    from electra.model import hf

    allowed = {"torch", "numpy", "transformers", *sys.stdlib_module_names}
    for name in hf.REMOTE_CODE_FILES:
        tree = ast.parse(Path(hf.__file__).with_name(name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = {node.module.split(".")[0]}
            else:
                continue
            assert tops <= allowed, f"{name} imports {tops - allowed}"

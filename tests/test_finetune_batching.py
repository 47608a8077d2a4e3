"""Length-sorted training batches and length-sorted evaluation (docs/finetuning.md):
every example once per epoch, less padding, deterministic for a seed, predictions back in input
order."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from electra.finetuning.data import eval_batches, padded_tokens, train_batches
from electra.finetuning.evaluation import predict_examples
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.model_io import load_source
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings
from electra.tasks import get_task
from electra.tasks.base import Example
from electra.tasks.sentence import SentenceTask

GLUE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "glue"


def _lengths(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(4, 128) for _ in range(n)]


@pytest.mark.parametrize("sorted_", [True, False])
def test_every_example_once_per_epoch(sorted_: bool) -> None:
    lengths = _lengths(1003)
    batches = train_batches(lengths, 32, torch.Generator().manual_seed(3), sorted_,
                            chunk_batches=5)
    assert sorted(i for b in batches for i in b) == list(range(1003))
    assert len(batches) == math.ceil(1003 / 32)  # same steps per epoch as plain shuffling
    assert sorted(len(b) for b in batches)[1:] == [32] * (len(batches) - 1)  # one short batch


def test_sorted_batches_pad_less() -> None:
    lengths = _lengths(2000)
    gen = torch.Generator().manual_seed(1)
    plain = padded_tokens(lengths, train_batches(lengths, 32, gen, length_sorted=False))
    grouped = padded_tokens(lengths, train_batches(lengths, 32, gen, length_sorted=True))
    assert grouped < plain / 10  # uniform lengths 4..128: 3.8k vs 118k padding tokens
    # hand case: one chunk holding everything -> the two short and the two long ones pair up
    batches = train_batches([1, 10, 1, 10], 2, torch.Generator().manual_seed(0))
    assert sorted(sorted(b) for b in batches) == [[0, 2], [1, 3]]
    assert padded_tokens([1, 10, 1, 10], batches) == 0
    assert padded_tokens([1, 10, 1, 10], [[0, 1], [2, 3]]) == 18


def test_sorted_within_chunks_and_batch_order_shuffled() -> None:
    lengths = list(range(640))  # distinct lengths: a batch's members are consecutive lengths
    batches = train_batches(lengths, 8, torch.Generator().manual_seed(5), chunk_batches=80)
    for b in batches:
        assert b == sorted(b) and max(b) - min(b) == 7  # one chunk = whole epoch: exact sort
    starts = [min(b) for b in batches]
    assert sorted(starts) == list(range(0, 640, 8)) and starts != sorted(starts)


def test_deterministic_for_a_seed() -> None:
    lengths = _lengths(500)
    a = train_batches(lengths, 16, torch.Generator().manual_seed(7))
    b = train_batches(lengths, 16, torch.Generator().manual_seed(7))
    c = train_batches(lengths, 16, torch.Generator().manual_seed(8))
    assert a == b and a != c
    # the unsorted order is the previous behaviour: one randperm cut into batches
    plain = train_batches(lengths, 16, torch.Generator().manual_seed(7), length_sorted=False)
    perm = torch.randperm(500, generator=torch.Generator().manual_seed(7)).tolist()
    assert plain == [perm[s:s + 16] for s in range(0, 500, 16)]


def test_evaluation_restores_input_order(tiny_model: Path) -> None:
    """STS-B regression gives one distinct real number per example: predictions from
    length-sorted batches of 4 equal those of one example at a time, in input order."""
    encoder, tokenizer, _ = load_source(tiny_model)
    task = get_task("STS-B")
    rng = random.Random(0)
    words = "the of and to in is was that for on with as by at from".split()
    examples = [Example(index=i, texts=(" ".join(rng.choices(words, k=n)),
                                        " ".join(rng.choices(words, k=3))), label=1.0)
                for i, n in enumerate([9, 2, 14, 5, 1, 11, 3, 7, 6, 12])]
    feats = task.featurize(examples, tokenizer, 128)
    assert [i for b in eval_batches(feats, 4) for i in b] != list(range(10))  # really reordered
    torch.manual_seed(0)
    model = FinetuneModel(encoder, "sequence", 1)
    dev = torch.device("cpu")
    batched = predict_examples(model, task, examples, tokenizer,
                               FinetuneSettings(eval_batch_size=4, max_seq_len=128), dev)
    single = [predict_examples(model, task, [ex], tokenizer,
                               FinetuneSettings(eval_batch_size=1, max_seq_len=128), dev)[0]
              for ex in examples]
    assert batched == pytest.approx(single, abs=1e-5)
    assert len(set(round(p, 6) for p in batched)) == 10


@pytest.mark.skipif(not (GLUE / "SST-2").is_dir(), reason=f"SST-2 absent ({GLUE})")
def test_training_uses_length_sorted_batches(tiny_model: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The setting reaches the loop: the padded shapes it trains on shrink with sorting, the
    same examples are seen, and a rerun with the same seed gives identical dev predictions."""
    seen: list[tuple[int, int]] = []
    real = SentenceTask.collate

    def recording(self, features, pad_id=0):
        batch = real(self, features, pad_id)
        if len(features) <= 32:  # training batches (eval batches are 128)
            seen.append((batch["attention_mask"].numel(), int(batch["attention_mask"].sum())))
        return batch

    monkeypatch.setattr(SentenceTask, "collate", recording)
    base = dict(max_train_examples=320, max_eval_examples=64, eval_batch_size=128, epochs=1)
    totals = {}
    for sorted_ in (True, False):
        seen.clear()
        finetune(tiny_model, "SST-2", GLUE, tmp_path / str(sorted_),
                 FinetuneSettings(length_sorted=sorted_, **base))
        assert len(seen) == 10
        totals[sorted_] = (sum(s for s, _ in seen), sum(r for _, r in seen))
    assert totals[True][1] == totals[False][1]  # the same real tokens
    assert totals[True][0] < 0.8 * totals[False][0]  # SST-2 lengths vary: far less padding
    again = finetune(tiny_model, "SST-2", GLUE, tmp_path / "again",
                     FinetuneSettings(length_sorted=True, **base))
    first = (tmp_path / "True" / "seed1" / "dev_predictions.jsonl").read_text()
    assert Path(again["seeds"][0]["predictions"]["dev"]).read_text() == first


@pytest.mark.skipif(not (GLUE / "SST-2").is_dir(), reason=f"SST-2 absent ({GLUE})")
def test_cli_flag_turns_sorting_off(tiny_model: Path, tmp_path: Path) -> None:
    from electra.cli import main

    common = ["finetune", "--model", str(tiny_model), "--task", "SST-2", "--data", str(GLUE),
              "--max-train-examples", "64", "--max-eval-examples", "16", "--epochs", "1",
              "--quiet"]
    assert main([*common, "--out", str(tmp_path / "on")]) == 0
    assert main([*common, "--out", str(tmp_path / "off"), "--no-length-sort"]) == 0
    on = json.loads((tmp_path / "on" / "results.json").read_text())["settings"]
    off = json.loads((tmp_path / "off" / "results.json").read_text())["settings"]
    assert (on["length_sorted"], off["length_sorted"]) == (True, False)

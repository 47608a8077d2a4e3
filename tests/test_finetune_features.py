"""Features and batches: first-sub-token labels for tagging, pair encoding, dynamic padding and
length-sorted evaluation batches."""

from __future__ import annotations

from pathlib import Path

import torch

from electra.finetuning.data import collate, eval_batches
from electra.tasks import get_task
from electra.tasks.base import Example
from electra.tokenizer import load_tokenizer


def test_tagging_labels_on_first_subtoken_only(vocab_dir: Path) -> None:
    tok = load_tokenizer(vocab_dir)
    task = get_task("chunk")
    task.labels = ["B-NP", "I-NP", "O"]
    words = ["Zürich", "kalomirentasvorqui", "the"]
    ex = Example(index=0, words=words, tags=["B-NP", "I-NP", "O"])
    (feat,) = task.featurize([ex], tok, 128)
    enc = tok.encode(words, is_pretokenized=True)
    assert len(enc.ids) > len(words) + 2  # the long word is split into several pieces
    firsts = [enc.word_ids.index(w) for w in range(3)]
    assert [feat["labels"][p] for p in firsts] == [0, 1, 2]
    assert all(lab == -100 for p, lab in enumerate(feat["labels"]) if p not in firsts)
    assert feat["first_positions"] == list(zip(range(3), firsts, strict=True))
    # truncated words still get a (fallback) prediction
    (short,) = task.featurize([ex], tok, 4)
    present = {w for w, _ in short["first_positions"]}
    assert 0 in present and 2 not in present
    out = torch.zeros(4, 3).numpy()  # argmax 0: "B-NP" wherever the model sees the word
    (pred,) = task.postprocess([ex], [short], [out])
    assert pred == ["B-NP" if w in present else "O" for w in range(3)]


def test_pair_encoding_and_labels(vocab_dir: Path) -> None:
    tok = load_tokenizer(vocab_dir)
    task = get_task("RTE")
    ex = [Example(index=0, texts=("the of", "and to in"), label="not_entailment")]
    (feat,) = task.featurize(ex, tok, 128)
    assert feat["labels"] == 1 and feat["example_index"] == 0
    assert feat["token_type_ids"].count(1) == len(tok.encode("and to in").ids) - 1
    assert feat["input_ids"][0] == tok.token_to_id("[CLS]")


def test_dynamic_padding_and_sorted_eval_batches() -> None:
    feats = [{"input_ids": [1] * n, "token_type_ids": [0] * n, "labels": n % 2}
             for n in (5, 2, 9, 3)]
    batch = collate(feats[:2])
    assert batch["input_ids"].shape == (2, 5)  # padded to the longest in the batch, not 128
    assert batch["attention_mask"].tolist() == [[1] * 5, [1, 1, 0, 0, 0]]
    assert eval_batches(feats, 2) == [[1, 3], [0, 2]]
    tagged = [{"input_ids": [1, 2, 3], "token_type_ids": [0] * 3, "labels": [-100, 4, -100]},
              {"input_ids": [1], "token_type_ids": [0], "labels": [-100]}]
    assert collate(tagged)["labels"].tolist() == [[-100, 4, -100], [-100, -100, -100]]

"""SQuAD reader and windowed features, on the real dev-v1.1 file and crafted cases."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from electra.data.vocab import train_vocab
from electra.errors import ElectraError
from electra.tasks.squad.data import (
    SquadAnswer,
    SquadExample,
    collate_features,
    convert_examples_to_features,
    examples_from_json,
    load_squad_json,
    read_squad,
    train_dev_split_by_article,
)
from electra.tokenizer import load_tokenizer

DEV = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad" / "dev-v1.1.json.gz"
needs_dev = pytest.mark.skipif(not DEV.is_file(), reason=f"SQuAD dev set not found at {DEV}")


def squad_tokenizer(tmp: Path, examples: list[SquadExample]) -> Tokenizer:
    """A small WordPiece vocabulary trained on the examples' contexts (no hub, no BERT vocab)."""
    contexts = dict.fromkeys(ex.context.replace("\n", " ") for ex in examples)
    corpus = tmp / "contexts.txt"
    corpus.write_text("\n\n".join(contexts), encoding="utf-8")
    return load_tokenizer(train_vocab([corpus], 3000, tmp / "tok", show_progress=False))


@pytest.fixture(scope="module")
def dev() -> tuple[list[SquadExample], object]:
    if not DEV.is_file():
        pytest.skip(f"SQuAD dev set not found at {DEV}")
    return read_squad(DEV)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory, dev) -> Tokenizer:
    return squad_tokenizer(tmp_path_factory.mktemp("squad_tok"), dev[0])


@needs_dev
def test_reader_on_real_dev(dev) -> None:
    examples, stats = dev
    assert stats.questions == len(examples) == 10570
    assert stats.articles == 48 and stats.paragraphs == 2067
    assert stats.answers == 34726
    assert stats.mismatched_answers == 0 and stats.impossible == 0
    assert len({ex.qid for ex in examples}) == 10570
    ex = examples[0]
    assert ex.title == "Super_Bowl_50" and ex.answers[0].text == "Denver Broncos"
    assert ex.context[ex.answers[0].start:].startswith("Denver Broncos")


def _v2_json() -> dict:
    context = "The cat sat on the mat."
    paragraph = {"context": context, "qas": [
        {"id": "a", "question": "Where?", "is_impossible": False,
         "answers": [{"text": "the mat", "answer_start": 15}]},
        {"id": "b", "question": "Who?", "is_impossible": True, "answers": [],
         "plausible_answers": [{"text": "cat", "answer_start": 4}]},
        {"id": "c", "question": "What?", "answers": [{"text": "dog", "answer_start": 4}]},
    ]}
    return {"version": "v2.0", "data": [{"title": "Cats", "paragraphs": [paragraph]}]}


def test_reader_v2_impossible_and_mismatch_counted(tmp_path: Path) -> None:
    path = tmp_path / "train-v2.0.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(_v2_json(), handle)
    with pytest.warns(UserWarning, match=r"train-v2.0.json.gz: 1 of 2 answers do not match.*c\)"):
        examples, stats = read_squad(path)
    assert [ex.qid for ex in examples] == ["a", "b", "c"]  # the mismatched one is kept
    assert examples[1].is_impossible and examples[1].answers == []
    assert examples[0].answers == [SquadAnswer("the mat", 15)]
    assert (stats.impossible, stats.mismatched_answers, stats.mismatched_ids) == (1, 1, ["c"])


def test_reader_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ElectraError, match="does not exist: .*nope.json"):
        read_squad(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ElectraError, match="bad.json: not a readable SQuAD JSON"):
        load_squad_json(bad)
    bad.write_text('{"data": [{"paragraphs": [{"qas": []}]}]}', encoding="utf-8")
    with pytest.raises(ElectraError, match="bad.json: malformed SQuAD data .*context"):
        read_squad(bad)
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [
        {"id": "z", "question": "?", "is_impossible": True,
         "answers": [{"text": "x", "answer_start": 0}]}]}]}]}), encoding="utf-8")
    with pytest.raises(ElectraError, match="bad.json: question z is_impossible but has answers"):
        read_squad(bad)
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ElectraError, match="bad.json: not a SQuAD file"):
        read_squad(bad)


@needs_dev
def test_reader_plain_json_equals_gz(tmp_path: Path) -> None:
    plain = tmp_path / "dev-v1.1.json"
    with gzip.open(DEV, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert read_squad(plain)[0] == read_squad(DEV)[0]


@needs_dev
def test_split_by_article(dev) -> None:
    data = load_squad_json(DEV)
    train, dev_part = train_dev_split_by_article(data, 0.25, seed=3)
    titles_train = {a["title"] for a in train["data"]}
    titles_dev = {a["title"] for a in dev_part["data"]}
    assert len(titles_dev) == 12 and len(titles_train) == 36 and not titles_train & titles_dev
    n_train = len(examples_from_json(train)[0])
    n_dev = len(examples_from_json(dev_part)[0])
    assert n_train + n_dev == 10570
    assert train_dev_split_by_article(data, 0.25, seed=3) == (train, dev_part)  # deterministic
    assert train_dev_split_by_article(data, 0.25, seed=4)[1] != dev_part
    with pytest.raises(ElectraError, match="dev_fraction"):
        train_dev_split_by_article(data, 1.0)


@needs_dev
def test_windows_cover_context_and_labels_recover_answers(dev, tokenizer: Tokenizer) -> None:
    examples = dev[0][:600]
    max_seq_len, stride, max_query = 64, 16, 12
    features = convert_examples_to_features(examples, tokenizer, max_seq_len=max_seq_len,
                                            doc_stride=stride, max_query_len=max_query)
    by_example: dict[int, list] = {}
    for f in features:
        by_example.setdefault(f.example_index, []).append(f)
        n = len(f.input_ids)
        assert n <= max_seq_len
        assert len(f.token_type_ids) == len(f.p_mask) == len(f.offsets) == len(f.max_context) == n
        query_len = f.token_type_ids.index(1) - 2
        assert query_len <= max_query
        assert f.input_ids[0] == tokenizer.token_to_id("[CLS]")
        assert f.input_ids[query_len + 1] == f.input_ids[-1] == tokenizer.token_to_id("[SEP]")
        assert f.p_mask == [0] + [1] * (query_len + 1) + [0] * (n - query_len - 3) + [1]
        assert all((o is None) == bool(m) for o, m in zip(f.offsets[1:], f.p_mask[1:],
                                                          strict=True))
    assert len(by_example) == len(examples) and len(features) > 2 * len(examples)  # windows

    exact = 0
    for index, feats in by_example.items():
        example = examples[index]
        n_ctx = len(tokenizer.encode(example.context, add_special_tokens=False).ids)
        covered = [o for f in feats for o in f.offsets if o is not None]
        best = [o for f in feats for o, m in zip(f.offsets, f.max_context, strict=True) if m]
        # Every context token is in some window, and has exactly one max-context window.
        assert len(set(covered)) == n_ctx and sorted(best) == sorted(set(covered))
        labelled = [f for f in feats if not f.is_impossible]
        assert labelled, f"answer of {example.qid} in no window"
        for f in feats:
            if f.is_impossible:
                assert f.start_position == f.end_position == 0
        f = labelled[0]
        text = example.context[f.offsets[f.start_position][0]:f.offsets[f.end_position][1]]
        gold = example.answers[0].text
        exact += text == gold
        assert gold in text  # otherwise only token boundaries (e.g. "8" inside "18") differ
    assert exact / len(by_example) > 0.98


def test_is_max_context_prefers_the_centred_window(tokenizer_small: Tokenizer) -> None:
    context = " ".join(f"w{i}" for i in range(10))
    example = SquadExample("q", "w3", context, [SquadAnswer("w6", context.index("w6"))])
    # 1 question token -> 4 context tokens per window; stride 2: windows at 0, 2, 4, 6.
    features = convert_examples_to_features([example], tokenizer_small, max_seq_len=8,
                                            doc_stride=2, max_query_len=1)
    starts = [0, 2, 4, 6]
    assert len(features) == 4
    owner = {}
    for f, start in zip(features, starts, strict=True):
        for i, m in enumerate(f.max_context[3:-1]):
            if m:
                owner[start + i] = f.window_index
    # BERT's rule: score = min(left, right) + 0.01 * length; earliest window wins ties.
    assert owner == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 2, 6: 2, 7: 3, 8: 3, 9: 3}
    labelled = [f.window_index for f in features if not f.is_impossible]
    assert labelled == [2, 3]  # windows 0..3, 2..5, 4..7, 6..9: token 6 is in the last two
    f = features[2]
    assert (f.start_position, f.end_position) == (5, 5)


@pytest.fixture(scope="module")
def tokenizer_small(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    tmp = tmp_path_factory.mktemp("tok_small")
    (tmp / "c.txt").write_text((" ".join(f"w{i}" for i in range(10)) + "\n") * 5,
                               encoding="utf-8")
    return load_tokenizer(train_vocab([tmp / "c.txt"], 100, tmp / "tok", show_progress=False,
                                      min_frequency=1))


def test_feature_errors(tokenizer_small: Tokenizer) -> None:
    example = SquadExample("q", "w1 w2 w3", "w4 w5", [])
    with pytest.raises(ElectraError, match="no room for the context"):
        convert_examples_to_features([example], tokenizer_small, max_seq_len=6, max_query_len=3)
    features = convert_examples_to_features([example], tokenizer_small, max_seq_len=16)
    assert features[0].is_impossible and features[0].start_position == 0


def test_collate_pads_and_masks(tokenizer_small: Tokenizer) -> None:
    examples = [SquadExample("a", "w1", "w2 w3 w4", [SquadAnswer("w3", 3)]),
                SquadExample("b", "w1 w2", "w5", [], is_impossible=True)]
    features = convert_examples_to_features(examples, tokenizer_small, max_seq_len=16)
    assert [len(f.input_ids) for f in features] == [7, 6]
    batch = collate_features(features)
    assert batch["input_ids"].shape == (2, 7) and batch["input_ids"].dtype == torch.long
    assert batch["input_ids"][1, 6] == 0  # [PAD]
    assert batch["attention_mask"].tolist() == [[1] * 7, [1] * 6 + [0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0]]
    assert batch["p_mask"].tolist() == [[0, 1, 1, 0, 0, 0, 1], [0, 1, 1, 1, 0, 1, 1]]
    assert batch["start_positions"].tolist() == [4, 0]
    assert batch["end_positions"].tolist() == [4, 0]
    assert batch["is_impossible"].tolist() == [0.0, 1.0]

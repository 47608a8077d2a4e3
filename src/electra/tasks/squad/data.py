"""SQuAD v1.1/v2.0: the official JSON (or the Hub's rows) -> examples -> windowed features for
a span head.

Features follow BERT's `run_squad.py` (the recipe ELECTRA's `qa_tasks.py` reuses): the question
is cut to `max_query_len` tokens, the context is covered by windows `doc_stride` tokens apart,
each input is [CLS] question [SEP] window [SEP], and every context token is scored only in the
window where it has the most context (`_check_is_max_context`). Unlike BERT we tokenize the
raw context once with the fast tokenizer and keep its character offsets, so a predicted span
maps straight back to the original text.
"""

from __future__ import annotations

import gzip
import json
import random
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from electra.errors import ElectraError
from electra.tokenizer import special_token_ids


@dataclass(frozen=True)
class SquadAnswer:
    text: str
    start: int  # character offset into the context


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[SquadAnswer]
    is_impossible: bool = False
    title: str = ""


@dataclass
class ReadStats:
    """What the reader saw. Mismatched answers (text != context[start:start+len]) are kept, not
    dropped: the metric scores text, so they still count at evaluation."""

    articles: int = 0
    paragraphs: int = 0
    questions: int = 0
    answers: int = 0
    impossible: int = 0
    mismatched_answers: int = 0
    mismatched_ids: list[str] = field(default_factory=list)


def load_squad_json(path: str | Path) -> dict[str, Any]:
    """The official file's JSON (.json or .json.gz), with errors that name the file."""
    path = Path(path)
    if not path.is_file():
        raise ElectraError(f"SQuAD file does not exist: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ElectraError(f"{path}: not a readable SQuAD JSON file ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ElectraError(f"{path}: not a SQuAD file (expected an object with a 'data' list)")
    return data


def read_squad(path: str | Path) -> tuple[list[SquadExample], ReadStats]:
    """Examples and stats from an official SQuAD file (v1.1 or v2.0)."""
    return examples_from_json(load_squad_json(path), source=str(path))


def examples_from_json(dataset_json: Mapping[str, Any],
                       source: str = "<SQuAD JSON>") -> tuple[list[SquadExample], ReadStats]:
    """Examples from an official-format data set; warns once if answers do not match their
    context span, and says where."""
    stats = ReadStats()
    examples: list[SquadExample] = []
    try:
        for article in dataset_json["data"]:
            stats.articles += 1
            title = article.get("title", "")
            for paragraph in article["paragraphs"]:
                stats.paragraphs += 1
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    impossible = bool(qa.get("is_impossible", False))
                    answers = [SquadAnswer(a["text"], int(a["answer_start"]))
                               for a in qa.get("answers", [])]
                    if impossible and answers:
                        raise ElectraError(
                            f"{source}: question {qa['id']} is_impossible but has answers")
                    for answer in answers:
                        stats.answers += 1
                        if context[answer.start:answer.start + len(answer.text)] != answer.text:
                            stats.mismatched_answers += 1
                            stats.mismatched_ids.append(qa["id"])
                    stats.questions += 1
                    stats.impossible += impossible
                    examples.append(SquadExample(qa["id"], qa["question"], context, answers,
                                                 impossible, title))
    except (KeyError, TypeError, ValueError) as err:
        raise ElectraError(f"{source}: malformed SQuAD data ({type(err).__name__}: {err})"
                           ) from None
    if stats.mismatched_answers:
        warnings.warn(f"{source}: {stats.mismatched_answers} of {stats.answers} answers do not "
                      f"match context[answer_start:answer_start+len(text)] (first in question "
                      f"{stats.mismatched_ids[0]})", stacklevel=2)
    return examples, stats


HUB_COLUMNS = ("id", "question", "context", "answers")


def examples_from_rows(rows: Iterable[tuple[str, Mapping[str, Any]]], v2: bool,
                       source: str) -> tuple[list[SquadExample], ReadStats]:
    """Examples from rows in the Hub's columns (`id`, `title`, `context`, `question`, `answers`
    with `text` and `answer_start` lists): consecutive rows of one title and context become
    one article and paragraph, and the official-format reader does the rest, so both give
    the same examples. A v2.0 question without answers is unanswerable."""
    articles: list[dict[str, Any]] = []
    for where, row in rows:
        answers = row["answers"] or {}
        texts, starts = answers.get("text") or [], answers.get("answer_start") or []
        if len(texts) != len(starts):
            raise ElectraError(f"{where}: {len(texts)} answer texts but {len(starts)} "
                               "answer_start values")
        qa = {"id": row["id"], "question": row["question"],
              "answers": [{"text": t, "answer_start": a} for t, a in zip(texts, starts,
                                                                         strict=True)]}
        if v2:
            qa["is_impossible"] = not texts
        title = row.get("title") or ""
        if not articles or articles[-1]["title"] != title:
            articles.append({"title": title, "paragraphs": []})
        paragraphs = articles[-1]["paragraphs"]
        if not paragraphs or paragraphs[-1]["context"] != row["context"]:
            paragraphs.append({"context": row["context"], "qas": []})
        paragraphs[-1]["qas"].append(qa)
    return examples_from_json({"data": articles}, source)


def train_dev_split_by_article(dataset_json: Mapping[str, Any], dev_fraction: float,
                               seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split whole articles (never questions of one paragraph) into two official-format data
    sets, so a model cannot be scored on a passage it was trained on. We only have SQuAD dev."""
    if not 0.0 < dev_fraction < 1.0:
        raise ElectraError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    articles = list(dataset_json["data"])
    if len(articles) < 2:
        raise ElectraError(f"need at least 2 articles to split, got {len(articles)}")
    order = list(range(len(articles)))
    random.Random(seed).shuffle(order)
    n_dev = min(len(articles) - 1, max(1, round(dev_fraction * len(articles))))
    dev_ids = set(order[:n_dev])
    version = dataset_json.get("version", "")
    train = {"version": version, "data": [a for i, a in enumerate(articles) if i not in dev_ids]}
    dev = {"version": version, "data": [a for i, a in enumerate(articles) if i in dev_ids]}
    return train, dev


@dataclass
class SquadFeature:
    """One window of one example. Positions index `input_ids`; 0 is [CLS], the "no answer in
    this window" target (as in BERT and XLNet)."""

    example_index: int
    qid: str
    window_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    p_mask: list[int]  # 1 where no answer may start/end (question, [SEP]); [CLS] and context 0
    offsets: list[tuple[int, int] | None]  # context char span per token, None off the context
    max_context: list[bool]  # True where this window is the token's best (see module doc)
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = True


def _is_max_context(windows: Sequence[tuple[int, int]], current: int, position: int) -> bool:
    """BERT's `_check_is_max_context`: a token's best window maximises
    min(left context, right context) + 0.01 * window length (first wins ties)."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return current == best_index


def _windows(num_tokens: int, max_len: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) windows as in BERT: step by `stride` until one reaches the end."""
    windows: list[tuple[int, int]] = []
    start = 0
    while True:
        length = min(num_tokens - start, max_len)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, stride)


def _answer_token_span(offsets: Sequence[tuple[int, int]], char_start: int,
                       char_end: int) -> tuple[int, int] | None:
    """First and last context tokens overlapping [char_start, char_end), or None."""
    start = next((i for i, (s, e) in enumerate(offsets) if e > char_start), None)
    end = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < char_end), None)
    if start is None or end is None or end < start:
        return None
    return start, end


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer: Tokenizer,
    max_seq_len: int = 384,
    doc_stride: int = 128,
    max_query_len: int = 64,
) -> list[SquadFeature]:
    """Windowed features with labels from each example's first answer (the training target in
    BERT/XLNet/ELECTRA); a window without the whole answer is labelled impossible ([CLS])."""
    special = special_token_ids(tokenizer)  # by role: [CLS]/[SEP], <s>/</s>, ...
    cls_id, sep_id = special["cls"], special["sep"]
    if doc_stride < 1 or max_query_len < 1:
        raise ElectraError("doc_stride and max_query_len must be positive")
    # One encoding per distinct context (SQuAD has ~5 questions per paragraph).
    contexts = list(dict.fromkeys(ex.context for ex in examples))
    encoded = tokenizer.encode_batch(contexts, add_special_tokens=False)
    context_tokens = {c: (enc.ids, enc.offsets) for c, enc in zip(contexts, encoded, strict=True)}
    questions = tokenizer.encode_batch([ex.question for ex in examples], add_special_tokens=False)

    features: list[SquadFeature] = []
    for index, (example, question) in enumerate(zip(examples, questions, strict=True)):
        query = question.ids[:max_query_len]
        doc_ids, doc_offsets = context_tokens[example.context]
        max_doc = max_seq_len - len(query) - 3
        if max_doc < 1:
            raise ElectraError(f"max_seq_len {max_seq_len} leaves no room for the context after "
                               f"a {len(query)}-token question (max_query_len {max_query_len})")
        span = None
        if example.answers and not example.is_impossible:
            answer = example.answers[0]
            span = _answer_token_span(doc_offsets, answer.start, answer.start + len(answer.text))
        windows = _windows(len(doc_ids), max_doc, doc_stride)
        prefix = len(query) + 2  # [CLS] question [SEP]
        for w, (start, length) in enumerate(windows):
            ids = [cls_id, *query, sep_id, *doc_ids[start:start + length], sep_id]
            types = [0] * prefix + [1] * (length + 1)
            p_mask = [0] + [1] * (len(query) + 1) + [0] * length + [1]
            offsets: list[tuple[int, int] | None] = (
                [None] * prefix + list(doc_offsets[start:start + length]) + [None])
            max_context = ([False] * prefix
                           + [_is_max_context(windows, w, start + i) for i in range(length)]
                           + [False])
            feature = SquadFeature(index, example.qid, w, ids, types, p_mask, offsets,
                                   max_context)
            if span is not None and start <= span[0] and span[1] < start + length:
                feature.start_position = span[0] - start + prefix
                feature.end_position = span[1] - start + prefix
                feature.is_impossible = False
            features.append(feature)
    return features


def collate_features(features: Iterable[SquadFeature], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest feature: input_ids, token_type_ids, attention_mask, p_mask
    (padding is masked), start/end positions and is_impossible (float, for BCE)."""
    batch = list(features)
    length = max(len(f.input_ids) for f in batch)

    def padded(rows: list[list[int]], value: int) -> torch.Tensor:
        return torch.tensor([row + [value] * (length - len(row)) for row in rows])

    return {
        "input_ids": padded([f.input_ids for f in batch], pad_id),
        "token_type_ids": padded([f.token_type_ids for f in batch], 0),
        "attention_mask": padded([[1] * len(f.input_ids) for f in batch], 0),
        "p_mask": padded([f.p_mask for f in batch], 1),
        "start_positions": torch.tensor([f.start_position for f in batch]),
        "end_positions": torch.tensor([f.end_position for f in batch]),
        "is_impossible": torch.tensor([float(f.is_impossible) for f in batch]),
    }

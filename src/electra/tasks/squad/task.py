"""SQuAD v1.1 and v2.0 as fine-tuning tasks: the span-task side of `electra.tasks.base.Task`.

Files: DIR/{train,dev,test}-v1.1.json (or v2.0), gzipped or not, or the Hub's layouts
(`electra.tasks.hub_layout`). Each example's `label` is its `SquadExample`; features are the
strided windows of `squad.data` (one example, several windows); the head is XLNet's
`SquadHead` (head kind "span"; the modern architecture's is BERT's start/end head,
`electra.finetuning.heads.StartEndSpanHead`); post-processing picks one answer per question and
scoring runs the official v1.1/v2.0 metrics. Predictions are written in the official JSON
format ({qid: answer}) plus, for v2.0, the na_prob file the threshold search reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import torch

from electra.errors import ElectraError
from electra.model.squad_head import SquadHeadOutput
from electra.tasks.base import Example, Task
from electra.tasks.hub_layout import find_layout, split_names
from electra.tasks.squad.data import (
    HUB_COLUMNS,
    collate_features,
    convert_examples_to_features,
    examples_from_rows,
    load_squad_json,
    read_squad,
    train_dev_split_by_article,
)
from electra.tasks.squad.head import (
    postprocess_predictions,
    write_na_probs,
)
from electra.tasks.squad.head import write_predictions as write_answers
from electra.tasks.squad.metrics import evaluate_v1, evaluate_v2

VERSIONS = {"squad": "1.1", "squad2": "2.0"}
# The Hub's config folders (rajpurkar/squad, rajpurkar/squad_v2)
HUB_CONFIGS = {"1.1": ("plain_text",), "2.0": ("squad_v2",)}


class SpanPrediction(NamedTuple):
    text: str  # "" means "no answer" (v2.0)
    na_prob: float | None  # v2.0 only


class SquadTask(Task):
    head_kind = "span"
    primary_metric = "f1"
    default_epochs = 2  # Table 5.2
    default_max_seq_len = 384

    def __init__(self, version: str = "1.1", doc_stride: int = 128, max_query_len: int = 64,
                 max_answer_len: int = 30):
        if version not in VERSIONS.values():
            raise ElectraError(f"SQuAD version must be 1.1 or 2.0, got {version!r}")
        self.version = version
        self.v2 = version == "2.0"
        self.name = "squad2" if self.v2 else "squad"
        self.hub_configs = HUB_CONFIGS[version]
        self.metric_names = (("exact", "f1", "best_exact", "best_f1") if self.v2
                             else ("exact_match", "f1"))
        self.options = {"version": version, "doc_stride": doc_stride,
                        "max_query_len": max_query_len, "max_answer_len": max_answer_len}

    @property
    def num_outputs(self) -> int:
        """Scores per window: start and end, plus answerability for v2.0 (picks the head)."""
        return 3 if self.v2 else 2

    def state(self) -> dict:
        return {**super().state(), "options": self.options}

    def path(self, data_dir: str | Path, split: str) -> Path:
        plain = Path(data_dir) / f"{split}-v{self.version}.json"
        for path in (plain, plain.with_name(plain.name + ".gz")):
            if path.is_file():
                return path
        raise ElectraError(f"{data_dir}: no {plain.name} or {plain.name}.gz for {self.name}")

    def read(self, data_dir: str | Path, split: str) -> list[Example]:
        """The official file, or the Hub's rows (rajpurkar/squad's `plain_text/`,
        squad_v2's `squad_v2/`) when DATA has no official file."""
        try:
            path = self.path(data_dir, split)
        except ElectraError:
            layout = find_layout(data_dir, self.hub_configs)
            if layout is None:
                raise
            hub = layout.split(split_names(split))
            squad, _ = examples_from_rows(hub.rows(HUB_COLUMNS, ("title",)), self.v2, hub.where)
            source = hub.where
        else:
            squad, _ = read_squad(path)
            source = str(path)
        return [Example(i, texts=(ex.question, ex.context), label=ex, uid=ex.qid,
                        where=f"{source}:{ex.qid}") for i, ex in enumerate(squad)]

    def featurize(self, examples: list[Example], tokenizer, max_seq_len: int) -> list[dict]:
        tokenizer.no_truncation()  # windows do the cutting
        windows = convert_examples_to_features(
            [ex.label for ex in examples], tokenizer, max_seq_len,
            self.options["doc_stride"], self.options["max_query_len"])
        # `span` carries p_mask, offsets and targets; `collate` batches it.
        return [{"input_ids": w.input_ids, "token_type_ids": w.token_type_ids,
                 "example_index": w.example_index, "span": w} for w in windows]

    def collate(self, features: list[dict], pad_id: int = 0) -> dict[str, torch.Tensor]:
        """p_mask and the start/end/is_impossible targets of each window."""
        return collate_features([f["span"] for f in features], pad_id)

    def loss(self, logits: SquadHeadOutput, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return logits.loss  # the head computes it from the gold positions in the batch

    def loss_units(self, batch: dict[str, torch.Tensor]) -> int:
        return len(batch["input_ids"])  # the head's losses are means over windows

    def hits(self, logits: SquadHeadOutput, batch: dict[str, torch.Tensor]) -> tuple[int, int]:
        return 0, 0  # no per-step accuracy for spans

    def postprocess(self, examples: list[Example], features: list[dict],
                    outputs: list[Any]) -> list[SpanPrediction]:
        """outputs are the windows' beams (`squad.head.RawPrediction`), not arrays."""
        answers, na_probs = postprocess_predictions(
            [ex.label for ex in examples], [f["span"] for f in features], outputs,
            self.options["max_answer_len"])
        return [SpanPrediction(answers[ex.uid], na_probs.get(ex.uid)) for ex in examples]

    def score(self, examples: list[Example], preds: list[SpanPrediction]) -> dict[str, float]:
        """The official scripts' numbers on exactly these questions."""
        answers = {ex.uid: p.text for ex, p in zip(examples, preds, strict=True)}
        dataset = dataset_json(examples)
        if self.v2:
            na_probs = {ex.uid: p.na_prob for ex, p in zip(examples, preds, strict=True)}
            return evaluate_v2(dataset, answers, na_probs)
        return evaluate_v1(dataset, answers)

    def gold(self, example: Example) -> list[str]:
        return [a.text for a in example.label.answers]

    def format_prediction(self, pred: SpanPrediction) -> str:
        return pred.text

    def write_predictions(self, out_dir: Path, stem: str, examples: list[Example],
                          preds: list[SpanPrediction]) -> dict[str, str]:
        """OUT/STEM_predictions.json ({qid: answer}) and, for v2.0, OUT/STEM_na_probs.json;
        returns {"predictions": path, "na_probs": path}."""
        paths = {"predictions": str(write_answers(
            out_dir / f"{stem}_predictions.json",
            {ex.uid: p.text for ex, p in zip(examples, preds, strict=True)}))}
        if self.v2:
            paths["na_probs"] = str(write_na_probs(
                out_dir / f"{stem}_na_probs.json",
                {ex.uid: p.na_prob for ex, p in zip(examples, preds, strict=True)}))
        return paths


def dataset_json(examples: list[Example]) -> dict[str, Any]:
    """An official-format data set holding just these questions (what the metrics read)."""
    qas = [{"id": ex.uid, "answers": [{"text": a.text, "answer_start": a.start}
                                      for a in ex.label.answers]} for ex in examples]
    return {"data": [{"paragraphs": [{"qas": qas}]}]}


def split_squad_file(path: str | Path, out_dir: str | Path, dev_fraction: float, seed: int = 0,
                     version: str = "1.1") -> tuple[Path, Path]:
    """Split one official file by article into OUT/train-vX.json and OUT/dev-vX.json (we only
    have SQuAD dev here); returns their paths."""
    train, dev = train_dev_split_by_article(load_squad_json(path), dev_fraction, seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = out / f"train-v{version}.json", out / f"dev-v{version}.json"
    for data, target in zip((train, dev), paths, strict=True):
        target.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return paths

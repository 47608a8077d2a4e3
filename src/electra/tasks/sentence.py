"""Sentence and sentence-pair tasks: classification over labels or regression on a real score.
GLUE and user CSV/TSV/JSONL tasks share this; they differ only in how files are read."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from electra.errors import ElectraError
from electra.tasks import metrics as M
from electra.tasks.base import Example, Task


class SentenceTask(Task):
    """[CLS] A [SEP] (B [SEP]) -> one label (or one number when `regression`).

    A regression task given `label_range` (lo, hi) trains on labels normalised to [0, 1] with a
    size-1 sigmoid head (dissertation section 3.2.1, the multi-task setup); without it, a
    linear head on the raw labels (the single-task recipe)."""

    regression = False
    label_range: tuple[float, float] | None = None

    @property
    def head_kind(self) -> str:
        return "regression" if self.regression and self.label_range else "sequence"

    @property
    def num_outputs(self) -> int:
        return 1 if self.regression else len(self.labels)

    def normalize(self, value: float) -> float:
        if not self.label_range:
            return value
        lo, hi = self.label_range
        return (value - lo) / (hi - lo)

    def denormalize(self, value: float) -> float:
        if not self.label_range:
            return value
        lo, hi = self.label_range
        return lo + value * (hi - lo)

    def state(self) -> dict:
        state = super().state()
        if self.label_range:
            state["label_range"] = list(self.label_range)
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        if state.get("label_range"):
            self.label_range = tuple(state["label_range"])

    def check_label(self, raw: str, where: str) -> Any:
        """The label as stored on an Example; an error naming file:line if it is not valid."""
        if self.regression:
            try:
                return float(raw)
            except ValueError:
                raise ElectraError(f"{where}: label {raw!r} is not a number") from None
        if raw not in self.labels:
            raise ElectraError(f"{where}: label {raw!r} is not one of {self.labels}")
        return raw

    def featurize(self, examples: list[Example], tokenizer, max_seq_len: int) -> list[dict]:
        tokenizer.enable_truncation(max_seq_len, strategy="longest_first")
        tokenizer.no_padding()
        inputs = [ex.texts[0] if len(ex.texts) == 1 else tuple(ex.texts) for ex in examples]
        encodings = tokenizer.encode_batch(inputs)
        label_ids = {label: i for i, label in enumerate(self.labels)}
        feats = []
        for i, (ex, enc) in enumerate(zip(examples, encodings, strict=True)):
            if ex.label is None:
                label: Any = 0.0 if self.regression else -100
            else:
                label = (self.normalize(float(ex.label)) if self.regression
                         else label_ids[ex.label])
            feats.append({"input_ids": enc.ids, "token_type_ids": enc.type_ids,
                          "labels": label, "example_index": i})
        return feats

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.regression:  # L2, to the gold value or a distillation target (section 3.2.2)
            target = batch.get("targets", batch["labels"])
            return F.mse_loss(logits.float().squeeze(-1), target.float())
        return super().loss(logits, batch)

    def loss_units(self, batch: dict[str, torch.Tensor]) -> int:
        return len(batch["labels"]) if self.regression else super().loss_units(batch)

    def hits(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[int, int]:
        return (0, 0) if self.regression else super().hits(logits, batch)

    def postprocess(self, examples, features, outputs) -> list[Any]:
        preds: list[Any] = [None] * len(examples)
        for feat, out in zip(features, outputs, strict=True):
            if self.regression:
                preds[feat["example_index"]] = self.denormalize(float(out[0]))
            else:
                preds[feat["example_index"]] = self.labels[int(np.argmax(out))]
        return preds

    def format_prediction(self, pred: Any) -> str:
        return f"{pred:.4f}" if self.regression else str(pred)

    def score(self, examples: list[Example], preds: list[Any]) -> dict[str, float]:
        golds = [ex.label for ex in examples]
        out: dict[str, float] = {}
        for name in self.metric_names:
            out[name] = METRICS[name](preds, golds)
        return out


METRICS = {
    "accuracy": M.accuracy,
    "f1": M.binary_f1,
    "mcc": M.matthews_corrcoef,
    "pearson": M.pearson,
    "spearman": M.spearman,
}

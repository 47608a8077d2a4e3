"""The head registry and the encoder + head models (the heads themselves are
`electra.model.task_heads` and `electra.model.squad_head`, kept portable for export).

Every head takes (hidden states, batch) and splits its batched output into per-feature rows
(`rows`), so the loop never asks which kind of head it runs. Which heads an architecture has is
its record's `task_heads` (`electra.architectures`): a `TaskHeads` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from electra.errors import ElectraError
from electra.model.encoder import Encoder, init_weights
from electra.model.squad_head import SquadHead, SquadHeadOutput
from electra.model.task_heads import (
    PredictionHead,
    RegressionHead,
    SequenceHead,
    StartEndHead,
    TokenHead,
)
from electra.model_config import ModelConfig
from electra.tasks.squad.head import split_outputs


class SpanRows:
    """Span heads' per-feature rows: the windows' beams (`electra.tasks.squad.head`)."""

    def rows(self, output: SquadHeadOutput, lengths: list[int]) -> list:
        return split_outputs(output)


class SpanHead(SpanRows, SquadHead):
    """`SquadHead` behind the head interface: num_outputs 2 (start, end) or 3 (+ answerability,
    SQuAD 2.0); no dropout, as in ELECTRA's `qa_tasks.py`. In training mode it reads the gold
    positions from the batch and returns the loss; in eval mode the start/end beams."""

    def __init__(self, hidden: int, num_outputs: int, dropout: float):
        super().__init__(hidden, v2=num_outputs == 3)

    def forward(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> SquadHeadOutput:
        if not self.training:
            return super().forward(hidden, batch["p_mask"])
        return super().forward(hidden, batch["p_mask"], batch["start_positions"],
                               batch["end_positions"], batch["is_impossible"])


class StartEndSpanHead(SpanRows, StartEndHead):
    """`StartEndHead` behind the head interface, the modern architecture's SQuAD 1.1 head. In
    training mode the loss is BERT's, (start CE + end CE) / 2 on the gold positions; in eval
    mode the beams `electra.tasks.squad.head` decodes: the top `n_top` starts, each paired with
    the same top `n_top` ends (the end does not depend on the start here); 20 is BERT's
    n_best_size."""

    n_top = 20

    def __init__(self, hidden: int, num_outputs: int, dropout: float, transform: nn.Module):
        super().__init__(hidden, 2, dropout, transform)  # `check_head` refused SQuAD 2.0

    def forward(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> SquadHeadOutput:
        start, end = self.span_logits(hidden, batch["p_mask"])
        if self.training:
            loss = (F.cross_entropy(start, batch["start_positions"])
                    + F.cross_entropy(end, batch["end_positions"])) / 2
            return SquadHeadOutput(loss=loss, start_logits=start, end_logits=end)
        k = min(self.n_top, start.shape[1])
        start_log_probs, start_index = start.log_softmax(-1).topk(k, dim=-1)
        end_log_probs, end_index = end.log_softmax(-1).topk(k, dim=-1)
        return SquadHeadOutput(start_top_log_probs=start_log_probs, start_top_index=start_index,
                               end_top_log_probs=end_log_probs[:, None].expand(-1, k, -1),
                               end_top_index=end_index[:, None].expand(-1, k, -1))


HEADS = {"sequence": SequenceHead, "regression": RegressionHead, "token": TokenHead,
         "span": SpanHead}


@dataclass(frozen=True)
class TaskHeads:
    """An architecture's fine-tuning heads: the class of each kind (HEADS' keys), built as
    cls(hidden, num_outputs, dropout) or, with `prediction_head`, with ModernBERT's prediction
    head (dense, GELU, LayerNorm) before the output as a last argument, as its task classes
    compute; `refuse(kind, num_outputs, single_task)` raises ElectraError for a head the
    architecture's exports cannot carry."""

    classes: dict[str, type[nn.Module]]
    prediction_head: bool = False
    refuse: Callable[[str, int, bool], None] | None = None


def _refuse_without_modernbert_class(kind: str, num_outputs: int, single_task: bool) -> None:
    """The modern architecture's models are ModernBert classes, which have no answerability
    classifier (SQuAD 2.0) and no sigmoid regression on normalised labels (a single-task
    model's; a multi-task one is served as its encoder)."""
    if kind == "span" and num_outputs != 2:
        raise ElectraError("SQuAD 2.0 is not supported for the modern architecture: "
                           "ModernBertForQuestionAnswering has no answerability classifier; "
                           "fine-tune on SQuAD 1.1 (--task squad)")
    if kind == "regression" and single_task:
        raise ElectraError("the sigmoid regression head (labels normalised to [0, 1]) has no "
                           "ModernBert class to export a single-task model of the modern "
                           "architecture to; fine-tune without a label range (a linear "
                           "regression head) or in `electra multitask`")


ELECTRA_TASK_HEADS = TaskHeads(HEADS)
# Where the modern architecture's heads differ: the ones its ModernBert classes compute.
MODERNBERT_TASK_HEADS = TaskHeads({**HEADS, "span": StartEndSpanHead}, prediction_head=True,
                                  refuse=_refuse_without_modernbert_class)


def check_head(cfg: ModelConfig, kind: str, num_outputs: int, single_task: bool) -> None:
    """Refuse, in one line, a head the encoder's architecture cannot carry (the fine-tuning
    loops call it before reading any data)."""
    if kind not in HEADS:
        raise ElectraError(f"no head for {kind!r} tasks (have {', '.join(HEADS)})")
    heads: TaskHeads = cfg.arch.load("task_heads")
    if heads.refuse is not None:
        heads.refuse(kind, num_outputs, single_task)


def make_head(kind: str, cfg: ModelConfig, num_outputs: int, dropout: float) -> nn.Module:
    """A task head for an encoder of config `cfg`, of its architecture's `TaskHeads` (the
    modern architecture's put ModernBERT's prediction head before the classifier, as its task
    classes do)."""
    check_head(cfg, kind, num_outputs, single_task=False)
    heads: TaskHeads = cfg.arch.load("task_heads")
    if heads.prediction_head:
        head = heads.classes[kind](cfg.hidden_size, num_outputs, dropout,
                                   PredictionHead(cfg.hidden_size, cfg.layer_norm_eps,
                                                  cfg.num_hidden_layers))
    else:
        head = heads.classes[kind](cfg.hidden_size, num_outputs, dropout)
    init_weights(head, cfg.initializer_range)
    return head


class FinetuneModel(nn.Module):
    """Encoder + task head; `task_head` is the name the layer-wise LR rule looks for."""

    def __init__(self, encoder: Encoder, head_kind: str, num_outputs: int, dropout: float = 0.1,
                 head: nn.Module | None = None):
        super().__init__()
        if head is None:
            check_head(encoder.config, head_kind, num_outputs, single_task=True)
        self.encoder = encoder
        self.task_head = head or make_head(head_kind, encoder.config, num_outputs, dropout)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | SquadHeadOutput:
        hidden = self.encoder(batch["input_ids"], batch["token_type_ids"],
                              batch["attention_mask"])
        return self.task_head(hidden, batch)


class MultitaskModel(nn.Module):
    """One shared encoder, one head per task (`task_heads.<task>`, layer-wise LR depth 0, as
    `task_head`). A batch mixes tasks (section 3.2.1: "shuffled together, even within
    minibatches"): the encoder runs once over all rows, each head over the rows of its task
    (the official code runs every head on every row and masks the losses; same result)."""

    def __init__(self, encoder: Encoder, heads: dict[str, nn.Module]):
        super().__init__()
        self.encoder = encoder
        self.task_heads = nn.ModuleDict(heads)

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        hidden = self.encoder(batch["input_ids"], batch["token_type_ids"],
                              batch["attention_mask"])
        return {name: self.task_heads[name](hidden[part["rows"]], part)
                for name, part in batch["tasks"].items()}

    def single(self, name: str) -> FinetuneModel:
        """A single-task view sharing this model's encoder and `name`'s head (for prediction)."""
        if name not in self.task_heads:
            raise ElectraError(f"the model has no head for task {name!r} (it has "
                               f"{', '.join(self.task_heads)})")
        return FinetuneModel(self.encoder, "", 0, head=self.task_heads[name])

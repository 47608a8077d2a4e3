"""Task heads and the encoder + head model.

Table 5.2 / the official implementation: a linear layer on the final hidden state of [CLS]
(no pooler) with dropout 0.1 for sentence tasks; the same per token for tagging; XLNet's SQuAD
head for span extraction (ELECTRA paper section 3.1).
"""

from __future__ import annotations

import torch
from torch import nn

from electra.errors import ElectraError
from electra.model.encoder import Encoder, init_weights
from electra.tasks.squad_head import SquadHead, SquadHeadOutput


class SequenceHead(nn.Module):
    def __init__(self, hidden: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, num_outputs)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(hidden[:, 0]))


class TokenHead(nn.Module):
    def __init__(self, hidden: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, num_outputs)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(hidden))


class SpanHead(SquadHead):
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


HEADS = {"sequence": SequenceHead, "token": TokenHead, "span": SpanHead}


class FinetuneModel(nn.Module):
    """Encoder + task head; `task_head` is the name the layer-wise LR rule looks for."""

    def __init__(self, encoder: Encoder, head_kind: str, num_outputs: int, dropout: float = 0.1):
        super().__init__()
        if head_kind not in HEADS:
            raise ElectraError(f"no head for {head_kind!r} tasks (have {', '.join(HEADS)})")
        self.encoder = encoder
        self.task_head = HEADS[head_kind](encoder.config.hidden_size, num_outputs, dropout)
        init_weights(self.task_head, encoder.config.initializer_range)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | SquadHeadOutput:
        hidden = self.encoder(batch["input_ids"], batch["token_type_ids"],
                              batch["attention_mask"])
        if isinstance(self.task_head, SpanHead):
            return self.task_head(hidden, batch)
        return self.task_head(hidden)

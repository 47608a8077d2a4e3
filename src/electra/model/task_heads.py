"""The fine-tuning heads on an encoder's hidden states, and what a server reads from them.

Table 5.2 / the official implementation: a linear layer on the final hidden state of [CLS]
(no pooler) with dropout 0.1 for sentence tasks; the same per token for tagging; for
multi-task regression a size-1 layer with a sigmoid on labels normalised to [0, 1]
(dissertation section 3.2.1). The SQuAD head is `squad_head.SquadHead` (XLNet's); the modern
architecture's is `StartEndHead` (BERT's, the one ModernBertForQuestionAnswering computes).

Every head splits its batched output into per-feature rows (`rows`), so the fine-tuning loop
never asks which kind of head it runs.

Portable: imports only torch, numpy, the standard library and the files beside it (copied
beside exported weights as remote code; see `encoder`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .encoder import modern_head_init
from .squad_head import masked_logits, serving_p_mask


class PredictionHead(nn.Module):
    """ModernBERT's prediction head (ModernBertPredictionHead): dense H->H without bias, GELU,
    LayerNorm without bias; its task classes put it between the encoder and the classifier."""

    def __init__(self, hidden: int, eps: float, num_layers: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden, bias=False)
        self.norm = nn.LayerNorm(hidden, eps=eps, bias=False)
        self.num_layers = num_layers  # the encoder's: ModernBERT scales the init by it

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(hidden)))


class SequenceHead(nn.Module):
    """`transform`: None for the BERT architecture (ELECTRA's linear layer on [CLS]); the
    modern architecture's `PredictionHead` (ModernBertForSequenceClassification's head with
    "cls" pooling)."""

    def __init__(self, hidden: int, num_outputs: int, dropout: float,
                 transform: nn.Module | None = None):
        super().__init__()
        self.transform = transform
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, num_outputs)

    def scale_init(self, std: float) -> None:
        """ModernBERT's initialisation (its `_init_weights`) where its head is used: the
        prediction head's dense layer at std / sqrt(2 x layers), the classifier at
        hidden**-0.5."""
        if self.transform is not None:
            modern_head_init(self.transform.dense, self.out, std, self.transform.num_layers)

    def features(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden if self.transform is None else self.transform(hidden)

    def forward(self, hidden: torch.Tensor, batch: dict | None = None) -> torch.Tensor:
        return self.out(self.dropout(self.features(hidden[:, 0])))

    def rows(self, output: torch.Tensor, lengths: list[int]) -> list[np.ndarray]:
        values = output.float().cpu().numpy()
        return list(values)


class RegressionHead(SequenceHead):
    """sigmoid(w^T c): a prediction in [0, 1], the normalised label scale (section 3.2.1)."""

    def forward(self, hidden: torch.Tensor, batch: dict | None = None) -> torch.Tensor:
        return torch.sigmoid(super().forward(hidden, batch).float())


class TokenHead(SequenceHead):
    def forward(self, hidden: torch.Tensor, batch: dict | None = None) -> torch.Tensor:
        return self.out(self.dropout(self.features(hidden)))

    def rows(self, output: torch.Tensor, lengths: list[int]) -> list[np.ndarray]:
        values = output.float().cpu().numpy()
        return [values[row, :n] for row, n in enumerate(lengths)]


class StartEndHead(TokenHead):
    """BERT's SQuAD head (Devlin et al. 2019, section 4.2): a start and an end logit per token,
    scored independently. Behind the modern architecture's prediction head it is exactly
    ModernBertForQuestionAnswering's (prediction head, dropout, a two-label classifier), which
    has no place for XLNet's joint end scorer or answerability classifier."""

    def start_end_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end logits [B, S] in fp32, unmasked."""
        start, end = TokenHead.forward(self, hidden).float().unbind(-1)
        return start, end

    def span_logits(self, hidden: torch.Tensor, p_mask: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end logits masked where no answer may lie (what training and `electra
        predict` use)."""
        start, end = self.start_end_logits(hidden)
        return masked_logits(start, p_mask), masked_logits(end, p_mask)

    def serving_logits(self, hidden: torch.Tensor, p_mask: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, None]:
        """Start and end logits as ModernBertForQuestionAnswering returns them, unmasked, so
        that the ONNX graph and the transformers class agree (servers such as transformers'
        question-answering pipeline mask the question themselves); no answerability logit.
        `p_mask` is not used."""
        return (*self.start_end_logits(hidden), None)


def serving_outputs(head_kind: str, head: nn.Module, hidden: torch.Tensor,
                    attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                    label_range: tuple[float, float] | None = None) -> tuple[torch.Tensor, ...]:
    """What a server gets from a head (the transformers classes and the ONNX graph both return
    this): the classifier's logits [B, C] (a regression task's prediction [B, 1]; for the
    sigmoid head on labels normalised from `label_range`, mapped back to that range); the
    tagger's per-token logits [B, S, C]; the span head's start and end logits [B, S] (and the
    unanswerable logit [B] for SQuAD 2.0), masked where training masked them when token types
    are given (padding only without), see `squad_head.serving_p_mask`; the modern
    architecture's `StartEndHead` unmasked, as its transformers class returns them."""
    if head_kind == "span":
        outputs = head.serving_logits(hidden, serving_p_mask(attention_mask, token_type_ids))
        return tuple(t for t in outputs if t is not None)
    output = head(hidden)
    if head_kind == "regression" and label_range is not None:
        lo, hi = label_range
        output = lo + (hi - lo) * output
    return (output,)

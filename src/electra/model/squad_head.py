"""The XLNet question-answering head ELECTRA uses for SQuAD.

ELECTRA paper section 3.1 (dissertation section 5.2.4): "For SQuAD, we add the
question-answering module from XLNet on top of ELECTRA, which is slightly more sophisticated than
BERT's in that it jointly rather than independently predicts the start and end positions and has
a 'answerability' classifier added for SQuAD 2.0." Following XLNet (`PoolerStartLogits`,
`PoolerEndLogits`, `PoolerAnswerClass`; fine-tuning uses 2 epochs for SQuAD, Table 5.2):

- start logits: one linear layer per token;
- end logits: dense(concat(token state, start state)) -> tanh -> LayerNorm -> linear, so the end
  distribution depends on the start; training uses the gold start, inference a beam over the
  top `start_n_top` starts, each with its top `end_n_top` ends;
- answerability (v2.0): dense(concat(start-probability-weighted state, [CLS] state)) -> tanh ->
  linear, trained with BCE on "is impossible" (weight 0.5, as XLNet's and ELECTRA's
  `answerable_weight`). As in ELECTRA's `qa_tasks.py`, the weighted state uses the predicted
  start distribution at training too, so the classifier sees the same input at inference.

Portable: imports only torch and the standard library (copied beside exported weights as
remote code; see `electra.model.encoder`). Post-processing is `electra.tasks.squad.head`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {"tanh": torch.tanh, "gelu": F.gelu}


def masked_logits(logits: torch.Tensor, p_mask: torch.Tensor) -> torch.Tensor:
    """Logits with impossible positions at the dtype's minimum (exp -> 0, no inf - inf NaNs)."""
    return logits.masked_fill(p_mask.bool(), torch.finfo(logits.dtype).min)


def serving_p_mask(attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
                   ) -> torch.Tensor:
    """Where no answer may start or end, from what a server has: inputs laid out as electra's
    SQuAD features are, [CLS] question [SEP] context [SEP] (question first, in segment 0),
    padded on either side. Masked: the question and its [SEP] (segment 0 after [CLS]), the
    final [SEP] and padding, as `electra.tasks.squad.data` marks them in training. Without
    token types, padding only."""
    p_mask = attention_mask == 0
    if token_type_ids is None:
        return p_mask
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    first = attention_mask.argmax(dim=1, keepdim=True)  # [CLS]: the first real position
    last = (positions * attention_mask).amax(dim=1, keepdim=True)  # the final [SEP]
    return p_mask | ((token_type_ids == 0) & (positions != first)) | (positions == last)


@dataclass
class SquadHeadOutput:
    """Training fills loss/start_logits/end_logits; inference fills the beam tensors.
    cls_logits (v2 only): the logit that the question is unanswerable in this window."""

    loss: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None  # [B, S]
    end_logits: torch.Tensor | None = None  # [B, S], given the gold start
    cls_logits: torch.Tensor | None = None  # [B]
    start_top_log_probs: torch.Tensor | None = None  # [B, k_start]
    start_top_index: torch.Tensor | None = None  # [B, k_start]
    end_top_log_probs: torch.Tensor | None = None  # [B, k_start, k_end]
    end_top_index: torch.Tensor | None = None  # [B, k_start, k_end]


class PoolerStartLogits(nn.Module):
    """XLNet's start scorer: one linear layer per token."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor, p_mask: torch.Tensor) -> torch.Tensor:
        return masked_logits(self.dense(hidden).squeeze(-1), p_mask)


class PoolerEndLogits(nn.Module):
    """XLNet's end scorer: dense(concat(token, start)) -> activation -> LayerNorm -> dense."""

    def __init__(self, hidden_size: int, activation: str, layer_norm_eps: float):
        super().__init__()
        self.dense_0 = nn.Linear(2 * hidden_size, hidden_size)
        self.activation = _ACTIVATIONS[activation]
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dense_1 = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor, start_states: torch.Tensor,
                p_mask: torch.Tensor) -> torch.Tensor:
        """End logits [B, k, S] for start states [B, k, 1, H] over hidden [B, S, H].

        dense_0(concat(h, s)) = W_h h + W_s s + b, so both halves are projected before the
        broadcast: the [B, k, S, 2H] concat is never built, and the token half is computed once
        for all k starts (the same math, k times fewer FLOPs in dense_0)."""
        w_token, w_start = self.dense_0.weight.split(hidden.shape[-1], dim=1)
        token_part = F.linear(hidden, w_token, self.dense_0.bias).unsqueeze(-3)
        x = self.LayerNorm(self.activation(token_part + F.linear(start_states, w_start)))
        return masked_logits(self.dense_1(x).squeeze(-1), p_mask)


class PoolerAnswerClass(nn.Module):
    """XLNet's answerability scorer: dense(concat(start-weighted state, [CLS])) -> activation
    -> dense (no bias); a logit that the question is unanswerable."""

    def __init__(self, hidden_size: int, activation: str):
        super().__init__()
        self.dense_0 = nn.Linear(2 * hidden_size, hidden_size)
        self.activation = _ACTIVATIONS[activation]
        self.dense_1 = nn.Linear(hidden_size, 1, bias=False)

    def forward(self, hidden: torch.Tensor, start_logits: torch.Tensor) -> torch.Tensor:
        weights = start_logits.float().softmax(dim=-1).to(hidden.dtype)
        start_states = torch.einsum("bs,bsh->bh", weights, hidden)
        x = self.activation(self.dense_0(torch.cat([start_states, hidden[:, 0]], -1)))
        return self.dense_1(x).squeeze(-1)


class SquadHead(nn.Module):
    """XLNet's SQuAD head on an encoder's hidden states [B, S, H]. Parameter names are those of
    Hugging Face's XLNet/XLM `SQuADHead` (start_logits.dense, end_logits.dense_0, ...)."""

    def __init__(self, hidden_size: int, v2: bool = False, start_n_top: int = 5,
                 end_n_top: int = 5, activation: str = "tanh", layer_norm_eps: float = 1e-12,
                 answerable_weight: float = 0.5):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got "
                             f"{activation!r}")
        self.v2 = v2
        self.start_n_top = start_n_top
        self.end_n_top = end_n_top
        self.answerable_weight = answerable_weight
        self.start_logits = PoolerStartLogits(hidden_size)
        self.end_logits = PoolerEndLogits(hidden_size, activation, layer_norm_eps)
        self.answer_class = PoolerAnswerClass(hidden_size, activation) if v2 else None

    def forward(self, hidden: torch.Tensor, p_mask: torch.Tensor,
                start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None,
                is_impossible: torch.Tensor | None = None) -> SquadHeadOutput:
        """With gold positions: the training loss, (start CE + end CE) / 2 (+ weighted BCE on
        is_impossible for v2). Without: the start/end beam for post-processing."""
        start_logits = self.start_logits(hidden, p_mask)
        cls_logits = None if self.answer_class is None else self.answer_class(hidden, start_logits)
        if start_positions is not None:
            if end_positions is None:
                raise ValueError("end_positions are needed with start_positions")
            index = start_positions[:, None, None].expand(-1, 1, hidden.shape[-1])
            start_states = hidden.gather(1, index)[:, :, None]  # [B, 1, 1, H]: gold start
            end_logits = self.end_logits(hidden, start_states, p_mask[:, None]).squeeze(1)
            loss = (F.cross_entropy(start_logits.float(), start_positions)
                    + F.cross_entropy(end_logits.float(), end_positions)) / 2
            if cls_logits is not None:
                if is_impossible is None:
                    raise ValueError("a v2 head needs is_impossible labels for its loss")
                loss = loss + self.answerable_weight * F.binary_cross_entropy_with_logits(
                    cls_logits.float(), is_impossible.float())
            return SquadHeadOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                   cls_logits=cls_logits)

        seq_len = hidden.shape[1]
        k_start, k_end = min(self.start_n_top, seq_len), min(self.end_n_top, seq_len)
        start_log_probs = start_logits.float().log_softmax(dim=-1)
        start_top_log_probs, start_top_index = start_log_probs.topk(k_start, dim=-1)
        index = start_top_index[:, :, None].expand(-1, -1, hidden.shape[-1])
        start_states = hidden.gather(1, index)[:, :, None]  # [B, k, 1, H]
        end_logits = self.end_logits(hidden, start_states, p_mask[:, None])  # [B, k, S]
        end_top_log_probs, end_top_index = end_logits.float().log_softmax(-1).topk(k_end, dim=-1)
        return SquadHeadOutput(cls_logits=cls_logits, start_top_log_probs=start_top_log_probs,
                               start_top_index=start_top_index,
                               end_top_log_probs=end_top_log_probs, end_top_index=end_top_index)

    def serving_logits(self, hidden: torch.Tensor, p_mask: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Start logits [B, S], end logits [B, S] given each row's most likely start, and (v2)
        the unanswerable logit [B]: independent start and end scores, for servers that decode
        spans themselves (`transformers`' question-answering pipeline, ONNX Runtime). Exact
        for the top start; `forward`'s beam, which `electra predict` decodes, also tries the
        next `start_n_top - 1` starts with their own end distributions."""
        start_logits = self.start_logits(hidden, p_mask)
        cls_logits = None if self.answer_class is None else self.answer_class(hidden, start_logits)
        index = start_logits.argmax(-1)[:, None, None].expand(-1, 1, hidden.shape[-1])
        start_states = hidden.gather(1, index)[:, :, None]  # [B, 1, 1, H]
        end_logits = self.end_logits(hidden, start_states, p_mask[:, None]).squeeze(1)
        return start_logits, end_logits, cls_logits

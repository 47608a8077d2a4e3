"""`transformers` classes for the models electra writes that `transformers`' own ELECTRA classes
cannot express: an ALiBi attention bias (`tiny-local`), and the official ELECTRA task heads
(the [CLS] classifier without a pooler, the sigmoid regression head, XLNet's SQuAD head).

This file, `encoder.py`, `task_heads.py` and `squad_head.py` are copied verbatim beside the
weights, with an `auto_map` in config.json, so that

    AutoModelForSequenceClassification.from_pretrained(DIR, trust_remote_code=True)

builds the exact model on a machine without electra installed (the convention MosaicBERT and
other ALiBi encoders use). The modules are the package's own, never a second copy: these
classes only adapt them to `transformers`' calling convention and output types. Imports:
torch, transformers and the files beside this one.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .encoder import DiscriminatorHead, Encoder, GeneratorHead, init_weights
from .squad_head import SquadHead
from .task_heads import RegressionHead, SequenceHead, TokenHead, serving_outputs


class ElectraToolkitConfig(PretrainedConfig):
    """ElectraConfig's fields, `position_embedding_type` "absolute" or "alibi" (with
    `alibi_max_slope`), and `head_kind` for fine-tuned models: "sequence", "regression",
    "token" or "span"."""

    model_type = "electra-toolkit"

    def __init__(self, vocab_size: int = 30522, embedding_size: int = 128,
                 hidden_size: int = 256, num_hidden_layers: int = 12,
                 num_attention_heads: int = 4, intermediate_size: int = 1024,
                 max_position_embeddings: int = 512, type_vocab_size: int = 2,
                 hidden_dropout_prob: float = 0.1, attention_probs_dropout_prob: float = 0.1,
                 layer_norm_eps: float = 1e-12, initializer_range: float = 0.02,
                 position_embedding_type: str = "absolute",
                 alibi_max_slope: float | None = None, head_kind: str | None = None,
                 **kwargs):
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.position_embedding_type = position_embedding_type
        self.alibi_max_slope = alibi_max_slope
        self.head_kind = head_kind
        super().__init__(**kwargs)

    @property
    def position_bias(self) -> str:
        """The name `encoder.Encoder` reads ("none" for learned absolute positions only)."""
        return "none" if self.position_embedding_type == "absolute" else \
            self.position_embedding_type


class ElectraToolkitPreTrainedModel(PreTrainedModel):
    config_class = ElectraToolkitConfig
    base_model_prefix = "electra"

    def _init_weights(self, module: nn.Module) -> None:
        """BERT's initialisation, for weights a checkpoint lacks (a new task head). Leaf
        modules only: `transformers` calls this per module and skips loaded ones."""
        if isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm)):
            init_weights(module, self.config.initializer_range)

    def _encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                token_type_ids: torch.Tensor | None, labels: dict
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(last hidden states, the attention mask used). These classes serve a model; they
        compute no loss, so labels are refused rather than silently ignored."""
        given = [name for name, value in labels.items() if value is not None]
        if given:
            raise ValueError(f"{type(self).__name__} serves a model electra trained and "
                             f"computes no loss ({', '.join(given)} given); fine-tune with "
                             "`electra finetune`")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return self.electra(input_ids, token_type_ids, attention_mask), attention_mask


class ElectraToolkitModel(ElectraToolkitPreTrainedModel):
    """The encoder alone: the last hidden states (of any directory: heads are ignored)."""

    _keys_to_ignore_on_load_unexpected = [r"^(task_heads?|discriminator_predictions|"
                                          r"generator_predictions)\.", r"^output_bias$"]

    def __init__(self, config: ElectraToolkitConfig):
        super().__init__(config)
        self.electra = Encoder(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **kwargs):
        hidden, _ = self._encode(input_ids, attention_mask, token_type_ids, {})
        return BaseModelOutput(last_hidden_state=hidden)


class ElectraToolkitForPreTraining(ElectraToolkitPreTrainedModel):
    """The discriminator: one replaced-token logit per position, [B, S]."""

    def __init__(self, config: ElectraToolkitConfig):
        super().__init__(config)
        self.electra = Encoder(config)
        self.discriminator_predictions = DiscriminatorHead(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                **kwargs):
        hidden, _ = self._encode(input_ids, attention_mask, token_type_ids, {"labels": labels})
        return TokenClassifierOutput(logits=self.discriminator_predictions(hidden))


class ElectraToolkitForMaskedLM(ElectraToolkitPreTrainedModel):
    """The generator: vocabulary logits per position, [B, S, V], through the tied input
    embeddings (tied by construction: the head reads the embedding matrix itself)."""

    def __init__(self, config: ElectraToolkitConfig):
        super().__init__(config)
        self.electra = Encoder(config)
        self.generator_predictions = GeneratorHead(config)
        self.output_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                **kwargs):
        hidden, _ = self._encode(input_ids, attention_mask, token_type_ids, {"labels": labels})
        logits = self.generator_predictions(
            hidden, self.electra.embeddings.word_embeddings.weight, self.output_bias)
        return MaskedLMOutput(logits=logits)


class _WithTaskHead(ElectraToolkitPreTrainedModel):
    def __init__(self, config: ElectraToolkitConfig):
        super().__init__(config)
        self.electra = Encoder(config)
        self.task_head = self.make_head(config)
        self.post_init()

    def make_head(self, config: ElectraToolkitConfig) -> nn.Module:
        head = RegressionHead if config.head_kind == "regression" else SequenceHead
        return head(config.hidden_size, config.num_labels, config.hidden_dropout_prob)

    def _head_outputs(self, input_ids, attention_mask, token_type_ids, labels: dict):
        hidden, attention_mask = self._encode(input_ids, attention_mask, token_type_ids, labels)
        return serving_outputs(self.config.head_kind, self.task_head, hidden, attention_mask,
                               token_type_ids, getattr(self.config, "label_range", None))


class ElectraToolkitForSequenceClassification(_WithTaskHead):
    """Classification logits [B, C], or a regression task's prediction [B, 1] on its label
    scale (config.json's problem_type "regression", so pipelines leave it as it is)."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                **kwargs):
        (logits,) = self._head_outputs(input_ids, attention_mask, token_type_ids,
                                       {"labels": labels})
        return SequenceClassifierOutput(logits=logits)


class ElectraToolkitForTokenClassification(_WithTaskHead):
    def make_head(self, config: ElectraToolkitConfig) -> nn.Module:
        return TokenHead(config.hidden_size, config.num_labels, config.hidden_dropout_prob)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                **kwargs):
        (logits,) = self._head_outputs(input_ids, attention_mask, token_type_ids,
                                       {"labels": labels})
        return TokenClassifierOutput(logits=logits)


class ElectraToolkitForQuestionAnswering(_WithTaskHead):
    """Start and end logits [B, S]; given `token_type_ids` (question first, as electra's
    features), masked where training masked them (the question, its [SEP], the final [SEP],
    padding), else padding only; the end logits are those given each row's most likely start
    (see `SquadHead.serving_logits`)."""

    def make_head(self, config: ElectraToolkitConfig) -> nn.Module:
        return SquadHead(config.hidden_size, v2=config.num_labels == 3)  # 3: SQuAD 2.0

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None, **kwargs):
        start_logits, end_logits, *_ = self._head_outputs(
            input_ids, attention_mask, token_type_ids,
            {"start_positions": start_positions, "end_positions": end_positions})
        return QuestionAnsweringModelOutput(start_logits=start_logits, end_logits=end_logits)

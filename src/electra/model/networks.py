"""The networks pre-training trains: an encoder of the configured architecture (its record in
`electra.architectures` names the classes: the BERT one in `electra.model.encoder`, ModernBERT's
in `electra.model.modern`) with ELECTRA's discriminator or generator head (the heads live beside
the BERT encoder, whose file is copied as remote code)."""

from __future__ import annotations

import torch
from torch import nn

from electra.model.encoder import DiscriminatorHead, Encoder, GeneratorHead
from electra.model_config import ModelConfig


def build_encoder(cfg: ModelConfig, embeddings: nn.Module | None = None) -> Encoder:
    """The encoder `cfg` describes: its architecture's (`electra.model.encoder.Encoder`, or one
    with the same interface: `embeddings`, `layers`, `embed`, `attention_bias`, `after_layers`,
    forward)."""
    return cfg.arch.load("encoder")(cfg, embeddings)


def make_layer(cfg: ModelConfig, index: int) -> nn.Module:
    """Layer `index` of an encoder of config `cfg` (for networks built of layers, beside an
    encoder: TEAMS' extra RTD layer, the two-tower generator's towers)."""
    return cfg.arch.load("layer")(cfg, index)


class Discriminator(nn.Module):
    def __init__(self, cfg: ModelConfig, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.electra = build_encoder(cfg, embeddings)
        self.discriminator_predictions = DiscriminatorHead(cfg, biases=cfg.arch.biases)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        return self.discriminator_predictions(
            self.electra(input_ids, token_type_ids, attention_mask))


class Generator(nn.Module):
    """A masked language model whose output matrix is its input word embeddings."""

    def __init__(self, cfg: ModelConfig, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.electra = build_encoder(cfg, embeddings)
        self.generator_predictions = GeneratorHead(cfg, biases=cfg.arch.biases)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, S, V]; or [M, V] at flat indices `positions` into B*S (computing the
        vocabulary softmax only where it is needed, as the official implementation does)."""
        hidden = self.electra(input_ids, token_type_ids, attention_mask)
        if positions is not None:
            hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)
        return self.generator_predictions(
            hidden, self.electra.embeddings.word_embeddings.weight, self.output_bias)

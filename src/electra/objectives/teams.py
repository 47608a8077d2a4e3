"""TEAMS: ELECTRA augmented with multi-word selection (Shen et al., 2021, section 3).

- Generator: an MLM of the discriminator's *width* (section 3.2, "Partial Layer Sharing"), half
  as deep ("generator network size 1/2 of the discriminator", section 4.1) unless
  `generator_layers` says otherwise; its bottom `teams_shared_layers` Transformer layers
  (None: the bottom half of the generator, as in the ablation "we tie the bottom half of
  generator with the discriminator") are the discriminator's own modules, as are the
  embeddings and the embedding projection. `generator_multiplier` is not used.
- For each masked position the generator supplies a replacement (one sample) and a candidate
  set: the original token plus K = `teams_candidates` non-original tokens drawn from its
  distribution without replacement (section 3.2, "Sampled" strategy).
- Discriminator, attention-based task-specific heads (section 3.2, footnote 6; TF Model Garden's
  TeamsPretrainer): the last layer's output feeds multi-word selection, and the output of layer
  L-1 feeds one extra Transformer layer that feeds replaced token detection. MWS scores each
  candidate by e(x')^T h (Eq. 7) with the tied word embeddings, after a dense -> GELU ->
  LayerNorm projection from H to E.
- loss = gen_weight * MLM + disc_weight * RTD + mws_weight * MWS (Eq. 9; lambda_1 = 5,
  lambda_2 = 2 in section 4.1).

Export: the discriminator (embeddings, L layers, whose last output is the MWS representation the
paper fine-tunes, footnote 3) as an HF ElectraForPreTraining directory, and the generator as an
ElectraForMaskedLM (shared layers copied in). The extra RTD layer and the MWS projection are
pre-training heads and are dropped; the exported `discriminator_predictions` are the RTD head's
weights, which in pre-training read the extra layer, not layer L, so its logits are not
meaningful RTD predictions.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.model.encoder import init_weights
from electra.model.networks import Discriminator, Generator, make_layer
from electra.objectives.base import Objective, ObjectiveContext, ObjectiveOutput
from electra.objectives.core import (
    DISCRIMINATOR_METRICS,
    GENERATOR_METRICS,
    corrupt,
    discriminate,
    mlm_loss,
)


def teams_layers(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> tuple[int, int]:
    """(generator depth, shared bottom layers), validated."""
    depth = model_cfg.num_hidden_layers
    if depth < 2:
        raise ElectraError("objective 'teams' needs model.num_hidden_layers >= 2 (its RTD head "
                           "reads layer L-1)")
    gen_layers = obj_cfg.generator_layers or max(1, depth // 2)
    shared = (obj_cfg.teams_shared_layers if obj_cfg.teams_shared_layers is not None
              else gen_layers // 2)
    if not 0 <= shared <= gen_layers:
        raise ElectraError(f"objective.teams_shared_layers ({shared}) must be between 0 and "
                           f"the generator's depth ({gen_layers})")
    return gen_layers, shared


def teams_generator_config(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> ModelConfig:
    return dataclasses.replace(model_cfg, num_hidden_layers=teams_layers(model_cfg, obj_cfg)[0])


def sample_candidates(logits: torch.Tensor, originals: torch.Tensor, k: int,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """[M, K+1] candidate sets: column 0 the original token, columns 1..K distinct tokens drawn
    from softmax(logits) without replacement, never the original. Gumbel-top-k (adding Gumbel
    noise and keeping the K largest) is exactly sequential sampling without replacement; fp32,
    no gradient, like ELECTRA's sampler."""
    if k > logits.shape[-1] - 1:
        raise ElectraError(f"objective.teams_candidates ({k}) must be smaller than the "
                           f"vocabulary ({logits.shape[-1]})")
    with torch.no_grad():
        scores = logits.detach().float()
        uniform = torch.rand(scores.shape, generator=generator, device=scores.device)
        scores = scores - torch.log(-torch.log(uniform + 1e-9) + 1e-9)
        scores = scores.scatter(1, originals[:, None], float("-inf"))
        others = scores.topk(k, dim=1).indices
        return torch.cat([originals[:, None], others], dim=1)


def mws_loss(hidden: torch.Tensor, candidates: torch.Tensor, embedding_weight: torch.Tensor,
             weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-word selection (Eq. 7-8): softmax over e(x')^T h for x' in the candidate set, the
    original token in column 0. Returns (mean loss over the rows of weight True, [M, K+1]
    logits)."""
    cand = embedding_weight[candidates]  # [M, K+1, E]
    logits = torch.einsum("me,mce->mc", hidden.float(), cand.float())
    target = torch.zeros(candidates.shape[0], dtype=torch.long, device=candidates.device)
    return mlm_loss(logits, target, weights), logits


class MwsHead(nn.Module):
    """dense H->E, GELU, LayerNorm: h in the embedding space for Eq. 7 (no output bias)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(hidden)))


class TeamsObjective(Objective):
    # mws_acc: the original token scores highest among its K + 1 candidates.
    metrics = {**GENERATOR_METRICS, **DISCRIMINATOR_METRICS, "mws_acc": ("mws_correct", "masked")}
    continues = "discriminator"  # its shared generator layers and heads start new
    # An MLM generator sharing the embeddings and teams_shared_layers layers, trained jointly.
    generators, sharings, algorithms = ("mlm",), ("embeddings",), ("joint",)

    def __init__(self, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                 context: ObjectiveContext | None = None):
        super().__init__(obj_cfg, context)
        obj_cfg = self.cfg
        self.check_supported(obj_cfg)
        gen_layers, shared = teams_layers(model_cfg, obj_cfg)
        if obj_cfg.teams_candidates >= model_cfg.vocab_size:
            raise ElectraError(f"objective.teams_candidates ({obj_cfg.teams_candidates}) must be "
                               f"smaller than the vocabulary ({model_cfg.vocab_size})")
        self.discriminator = Discriminator(model_cfg)
        # Attention-based task-specific head for RTD, fed by layer L-1 (section 3.2): a second
        # top layer (for the modern architecture, of the top layer's kind).
        self.rtd_layer = make_layer(model_cfg, model_cfg.num_hidden_layers - 1)
        self.mws_head = MwsHead(model_cfg)
        disc_encoder = self.discriminator.electra
        self.generator = Generator(dataclasses.replace(model_cfg, num_hidden_layers=gen_layers),
                                   embeddings=disc_encoder.embeddings)
        # Same width, so the discriminator's embedding projection and bottom layers fit.
        self.generator.electra.embeddings_project = disc_encoder.embeddings_project
        for i in range(shared):
            self.generator.electra.layers[i] = disc_encoder.layers[i]
        self.shared_layers = shared
        init_weights(self, model_cfg.initializer_range)

    @staticmethod
    def step_flops_breakdown(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                             seq_len: int) -> dict[str, float]:
        """Section 5.2.2 rules. Shared generator layers still run on the generator's own
        (masked) input, so they are counted in both networks. MWS: H->E projection and K+1
        dot products at the masked fraction: the official 20/128 at 15% masking, scaled with
        the masking rate as for ELECTRA's MLM output."""
        scale = flops.TRAIN_PASSES * batch_size
        gen = teams_generator_config(model_cfg, obj_cfg)
        frac = flops.OFFICIAL_OUTPUT_FRAC * obj_cfg.mask_prob / 0.15
        e, h, c = model_cfg.embedding_size, model_cfg.hidden_size, obj_cfg.teams_candidates + 1
        mws_per_token = (2 * h * e + e + flops.ACTIVATION_FLOPS * e + flops.LAYER_NORM_FLOPS * e
                         + 2 * e * c + flops.SOFTMAX_FLOPS * c + 2 * c)
        return {
            "discriminator.embeddings": scale * flops.embedding_flops(model_cfg, seq_len),
            "discriminator.layers": scale * flops.layers_flops(model_cfg, seq_len),
            "discriminator.rtd_layer": scale * (
                flops.layer_flops_at(model_cfg, seq_len, model_cfg.num_hidden_layers - 1)
                + flops.final_norm_flops(model_cfg, seq_len)),
            "discriminator.head": scale * flops.binary_head_flops(model_cfg, seq_len),
            "discriminator.mws_head": scale * frac * mws_per_token * seq_len,
            "generator.embeddings": scale * flops.embedding_flops(gen, seq_len),
            "generator.layers": scale * flops.layers_flops(gen, seq_len),
            "generator.head": scale * flops.mlm_head_flops(gen, seq_len, frac),
        }

    def exportable(self):
        return {"discriminator": self.discriminator, "generator": self.generator}

    def discriminator_states(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                             attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(MWS representations: layer L's output, RTD representations: the extra layer over
        layer L-1's output; each followed by what follows the encoder's last layer)."""
        enc = self.discriminator.electra
        x = enc.embed(input_ids, token_type_ids)
        bias = enc.attention_bias(attention_mask, x)  # as Encoder.forward: ALiBi too
        below_top = x
        for i, layer in enumerate(enc.layers):
            if i == len(enc.layers) - 1:
                below_top = x
            x = layer(x, bias)
        return enc.after_layers(x), enc.after_layers(self.rtd_layer(below_top, bias))

    @staticmethod
    def generator_model_config(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> ModelConfig:
        return teams_generator_config(model_cfg, obj_cfg)

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        token_type_ids = batch["token_type_ids"]
        attention_mask = batch["attention_mask"]
        c = corrupt(batch, self.cfg, self.special, self.generator)  # RTD labels as in ELECTRA
        with torch.no_grad():
            candidates = sample_candidates(c.gen_logits.detach().float() / self.cfg.temperature,
                                           c.targets, self.cfg.teams_candidates)

        mws_states, rtd_states = self.discriminator_states(c.noised, token_type_ids,
                                                           attention_mask)
        d = discriminate(self.discriminator.discriminator_predictions(rtd_states),
                         c.is_replaced, attention_mask.bool())
        mws_hidden = self.mws_head(
            mws_states.reshape(-1, mws_states.shape[-1]).index_select(0, c.positions))
        word_emb = self.discriminator.electra.embeddings.word_embeddings.weight
        mws, mws_logits = mws_loss(mws_hidden, candidates, word_emb, c.weights)

        loss = (self.cfg.gen_weight * c.gen_loss + self.cfg.disc_weight * d.loss
                + self.cfg.mws_weight * mws)
        counts = {**c.counts, **d.counts,
                  "mws_correct": ((mws_logits.detach().argmax(-1) == 0) & c.weights).sum().float()}
        return ObjectiveOutput(
            loss=loss,
            losses={"gen_loss": c.gen_loss.detach(), "disc_loss": d.loss.detach(),
                    "mws_loss": mws.detach()},
            counts=counts,
            # Rows of candidates and mws_logits: the masked slots; those of weight False are
            # the fixed shape's padding.
            details={**d.details, "candidates": candidates, "mws_logits": mws_logits.detach(),
                     "slot_weights": c.weights},
        )

"""Generators and how they share weights with the model they train (dissertation 5.3.1-5.3.2).

Shared by the ELECTRA family (electra, electra-15, replace-mlm, all-tokens-mlm). The kinds and
the sharing modes are registries in electra.config (GENERATORS, WEIGHT_SHARING), whose lines name
the functions here:

- an MLM generator of any width multiplier (1.0 included) and depth (`generator_layers`);
- network-free samplers: "unigram" (corpus token frequencies, section 5.3.2) and "uniform"
  (the official `uniform_generator`), never producing special tokens;
- sampling from softmax(logits / temperature) in float64 (inverse CDF, the distribution of the
  official Gumbel-max), optionally never the original token (official `disallow_correct`,
  `temperature` in run_pretraining._get_fake_data);
- weight sharing: "embeddings" (one embedding module), "none", "all" (one encoder) and "gdes"
  (DeBERTa-V3's gradient-disentangled embedding sharing).
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from electra import flops
from electra.config import GENERATORS, WEIGHT_SHARING, ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.model.encoder import Embeddings
from electra.model.networks import Discriminator, Generator
from electra.objectives import load_target
from electra.objectives.base import ObjectiveContext
from electra.objectives.masking import SpecialIds, categorical_sample, non_special_ids


def generator_config(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> ModelConfig:
    """The MLM generator's config: width x `generator_multiplier` (Table 5.1), depth
    `generator_layers` (None: as deep as the model), same embedding size (tied embeddings)."""
    cfg = model_cfg.scaled(obj_cfg.generator_multiplier)
    if obj_cfg.generator_layers is not None:
        cfg = dataclasses.replace(cfg, num_hidden_layers=obj_cfg.generator_layers)
    return cfg


def mlm_generator_config(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig
                         ) -> ModelConfig | None:
    """The ELECTRA family's generator network (`Objective.generator_model_config`): the MLM
    generator's config, None for a network-free sampler."""
    return generator_config(model_cfg, obj_cfg) if GENERATORS[obj_cfg.generator].network else None


def same_size(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> bool:
    return generator_config(model_cfg, obj_cfg) == model_cfg


def check_embedding_sharing(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> None:
    """An architecture without an embedding projection (the modern one): a generator that shares
    its token embeddings must be as wide as the model."""
    narrower = model_cfg.scaled(obj_cfg.generator_multiplier).hidden_size != model_cfg.hidden_size
    if (not model_cfg.arch.embedding_projection and obj_cfg.sharing in ("embeddings", "gdes")
            and narrower):
        raise ElectraError(
            f"objective.sharing={obj_cfg.sharing!r} shares the token embeddings, and the "
            f"{model_cfg.architecture} architecture has no embedding projection, so its "
            "generator must be as wide as the "
            f"model: objective.generator_multiplier=1.0 (got {obj_cfg.generator_multiplier}; "
            "make it shallower with objective.generator_layers), or objective.sharing='none'")


def check_generator_options(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> None:
    """Combinations that cannot work, as ElectraError naming the fields."""
    if not GENERATORS[obj_cfg.generator].network and obj_cfg.sharing != "embeddings":
        raise ElectraError(f"objective.sharing={obj_cfg.sharing!r} needs objective.generator="
                           f"'mlm' (a {obj_cfg.generator} sampler has no weights to share)")
    check_embedding_sharing(model_cfg, obj_cfg)
    if WEIGHT_SHARING[obj_cfg.sharing].whole_encoder and not same_size(model_cfg, obj_cfg):
        raise ElectraError(
            f"objective.sharing={obj_cfg.sharing!r} ties every encoder weight, so the generator "
            "must be the model's size: objective.generator_multiplier=1.0 and "
            "objective.generator_layers "
            f"unset or {model_cfg.num_hidden_layers} (got {obj_cfg.generator_multiplier}, "
            f"{obj_cfg.generator_layers})")


def sample_from_logits(logits: torch.Tensor, temperature: float = 1.0,
                       disallow: torch.Tensor | None = None) -> torch.Tensor:
    """Token ids drawn from softmax(logits / temperature) in float64, no gradient (inverse CDF:
    the distribution of the official Gumbel-max, see `categorical_sample`).

    `disallow` [N] holds one id per row that must never be drawn (the original token, official
    `disallow_correct`; we use -inf where the official code subtracts 1000). A row with nothing
    left to draw returns its disallowed id."""
    with torch.no_grad():
        scaled = logits.detach().float()
        if temperature != 1.0:  # the default: skip a pass over [masked positions x vocab]
            scaled = scaled / temperature
        if disallow is not None:  # scatter copies: the caller's logits stay untouched
            scaled = scaled.scatter(-1, disallow.unsqueeze(-1), float("-inf"))
        samples = categorical_sample(scaled)
        if disallow is not None:
            empty = torch.isinf(scaled).all(dim=-1)
            samples = torch.where(empty, disallow, samples)
        return samples


class TokenSampler(nn.Module):
    """A generator without a network: fixed log-probabilities over the vocabulary.

    "unigram": proportional to corpus frequencies (`ObjectiveContext.token_counts()`);
    "uniform": equal over the vocabulary. Special tokens get probability 0 in both."""

    def __init__(self, log_probs: torch.Tensor):
        super().__init__()
        # Not persistent: recomputed from the data at start-up, so checkpoints stay the same
        # whatever the corpus' size.
        self.register_buffer("log_probs", log_probs.float(), persistent=False)

    def logits(self, count: int) -> torch.Tensor:
        return self.log_probs.unsqueeze(0).expand(count, -1)


def uniform_weights(allowed: torch.Tensor, context: ObjectiveContext) -> torch.Tensor:
    """"uniform": every allowed token alike."""
    return allowed.double()


def unigram_weights(allowed: torch.Tensor, context: ObjectiveContext) -> torch.Tensor:
    """"unigram": the allowed tokens' corpus frequencies (section 5.3.2)."""
    if context.token_counts is None:
        raise ElectraError("objective.generator='unigram' needs corpus token counts (the "
                           "training data's token_counts)")
    counts = torch.as_tensor(context.token_counts(), dtype=torch.float64)
    if counts.shape != allowed.shape:
        raise ElectraError(f"objective.generator='unigram': token counts have shape "
                           f"{tuple(counts.shape)}, expected ({allowed.shape[0]},)")
    weights = counts.clamp(min=0) * allowed
    if not weights.sum() > 0:
        raise ElectraError("objective.generator='unigram': the corpus has no non-special "
                           "tokens to sample from")
    return weights


def build_sampler(kind: str, vocab_size: int, special: SpecialIds,
                  context: ObjectiveContext) -> TokenSampler:
    """The network-free sampler `kind` (a `GENERATORS` line with token weights)."""
    spec = GENERATORS.get(kind)
    if spec is None or spec.sampler is None:
        raise ElectraError(f"objective.generator={kind!r} is not a network-free sampler")
    allowed = torch.zeros(vocab_size, dtype=torch.bool)
    allowed[non_special_ids(vocab_size, special)] = True
    weights = load_target(spec.sampler)(allowed, context)
    return TokenSampler(torch.log(weights / weights.sum()))


class GdesEmbeddings(nn.Module):
    """Gradient-disentangled embedding sharing (DeBERTa-V3, He et al. 2021, section 4.2):
    the discriminator's embedding parameters are E_D = sg(E_G) + E_delta, with E_G the
    generator's (updated only by the MLM loss) and E_delta zero-initialised (updated only by
    the discriminator loss). We apply this to every parameter of the embedding module (token,
    position and token-type tables and the embedding LayerNorm); DeBERTa applies it to the
    token and absolute position tables, its only embedding parameters of that kind."""

    def __init__(self, shared: Embeddings):
        super().__init__()
        self._shared = (shared,)  # a tuple: the generator owns and registers this module
        self.deltas = nn.ParameterDict({
            name.replace(".", "__"): nn.Parameter(torch.zeros_like(p))
            for name, p in shared.named_parameters()})

    @property
    def shared(self) -> Embeddings:
        return self._shared[0]

    def effective_parameters(self) -> dict[str, torch.Tensor]:
        return {name: p.detach() + self.deltas[name.replace(".", "__")]
                for name, p in self.shared.named_parameters()}

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        return functional_call(self.shared, self.effective_parameters(),
                               (input_ids, token_type_ids))

    @torch.no_grad()
    def materialize(self) -> Embeddings:
        """A plain Embeddings module holding E_D, for export."""
        plain = copy.deepcopy(self.shared)
        plain.load_state_dict(self.effective_parameters())
        return plain


def share_embeddings(main: Discriminator | Generator, gen_cfg: ModelConfig) -> Generator:
    """"embeddings": token/position/type embeddings and the embedding LayerNorm are one module
    (section 5.3.1; the generator adds an E -> H_gen projection when its width differs)."""
    return Generator(gen_cfg, embeddings=main.electra.embeddings)


def share_nothing(main: Discriminator | Generator, gen_cfg: ModelConfig) -> Generator:
    """"none": separate embeddings."""
    return Generator(gen_cfg)


def share_encoder(main: Discriminator | Generator, gen_cfg: ModelConfig) -> Generator:
    """"all": the generator's encoder IS main's encoder (same size required); only the MLM head
    is its own."""
    generator = Generator(gen_cfg)
    generator.electra = main.electra
    return generator


def share_gdes(main: Discriminator | Generator, gen_cfg: ModelConfig) -> Generator:
    """"gdes": the generator owns the embeddings and main's become GdesEmbeddings over them
    (main's own embedding module is replaced)."""
    generator = Generator(gen_cfg)
    main.electra.embeddings = GdesEmbeddings(generator.electra.embeddings)
    return generator


def attach_generator(main: Discriminator | Generator, model_cfg: ModelConfig,
                     obj_cfg: ObjectiveConfig) -> Generator:
    """Build the MLM generator for `main` (the network to fine-tune) with `obj_cfg.sharing`
    (its `WEIGHT_SHARING` line)."""
    check_generator_options(model_cfg, obj_cfg)
    gen_cfg = generator_config(model_cfg, obj_cfg)
    return load_target(WEIGHT_SHARING[obj_cfg.sharing].target)(main, gen_cfg)


def generator_or_sampler(main: Discriminator | Generator, model_cfg: ModelConfig,
                         obj_cfg: ObjectiveConfig, context: ObjectiveContext | None
                         ) -> tuple[Generator | None, TokenSampler | None]:
    """Where the ELECTRA family's replacements come from: (an MLM generator attached to `main`
    with `obj_cfg.sharing`, None) or (None, a network-free sampler)."""
    if GENERATORS[obj_cfg.generator].network:
        return attach_generator(main, model_cfg, obj_cfg), None
    context = context or ObjectiveContext()
    return None, build_sampler(obj_cfg.generator, model_cfg.vocab_size, context.special, context)


def exportable_main(main: Discriminator | Generator) -> Discriminator | Generator:
    """`main` itself, or for GDES a plain copy whose embeddings hold E_D = E_G + E_delta, so
    that the exported directory is an ordinary Hugging Face ELECTRA model."""
    embeddings = main.electra.embeddings
    if not isinstance(embeddings, GdesEmbeddings):
        return main
    plain = type(main)(main.config)
    state = {k: v for k, v in main.state_dict().items() if not k.startswith("electra.embeddings.")}
    state.update({f"electra.embeddings.{k}": v
                  for k, v in embeddings.materialize().state_dict().items()})
    plain.load_state_dict(state)
    return plain.to(embeddings.shared.word_embeddings.weight.device)


def mlm_hidden_and_logits(generator: Generator, input_ids: torch.Tensor,
                          token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                          positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The generator's encoder outputs [M, H_gen] and MLM logits [M, V] at flat `positions`
    (the adversarial baseline reads the former, section 5.3.4)."""
    hidden = generator.electra(input_ids, token_type_ids, attention_mask)
    hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)
    logits = generator.generator_predictions(
        hidden, generator.electra.embeddings.word_embeddings.weight, generator.output_bias)
    return hidden, logits


def masked_log_probs(logits: torch.Tensor, temperature: float,
                     disallow: torch.Tensor | None) -> torch.Tensor:
    """log q of the distribution `sample_from_logits` draws from, with gradient."""
    scaled = logits.float() / temperature
    if disallow is not None:
        scaled = scaled.scatter(-1, disallow.unsqueeze(-1), float("-inf"))
    return F.log_softmax(scaled, dim=-1)


def generator_step_flops(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                         seq_len: int, passes: int = flops.TRAIN_PASSES) -> dict[str, float]:
    """FLOPs of the generator per step: an MLM generator's embeddings, layers (its own depth)
    and head on the masked positions; nothing for a network-free sampler (unigram/uniform)."""
    gen = mlm_generator_config(model_cfg, obj_cfg)
    if gen is None:
        return {}
    frac = flops.output_frac_for(obj_cfg.mask_prob)
    return flops.mlm_model_breakdown("generator", gen, batch_size, seq_len, frac, passes)

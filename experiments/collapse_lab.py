"""Why a tiny discriminator never learns context: a fast, self-contained reproduction.

Trains a replaced-token detector on unigram-sampled fakes (only context separates them from
real tokens) for a few hundred steps, and reports on the fixed held-out probe
(`electra.pretraining.heldout`) the AUC, plus for the transformer the token-vector cosine per layer
and the norms of layer 1's attention and FFN outputs against its input. Two models:

- `window`: embeddings of (previous, token, next), LayerNorm, one GELU MLP; no attention;
- `transformer`: the `tiny` preset's discriminator (4 layers, 128 wide), as pre-training uses it.

Both with AdamW; the schedule is constant after warm-up unless `--schedule electra` (linear
decay to 0 at the last step, as `electra pretrain`). Uses the demo's data (prepared by
`experiments/context_study.py` under --data). Prints JSON.

    .venv/bin/python -m experiments.collapse_lab --model transformer --lr 1e-3 --steps 300
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from torch import nn

from electra.config import PretrainConfig
from electra.data.dataset import PretrainingDataset, iterate_batches
from electra.model.encoder import additive_bias, init_weights
from electra.model.networks import Discriminator
from electra.objectives.base import ObjectiveContext
from electra.objectives.generators import build_sampler
from electra.objectives.masking import gumbel_sample, select_positions
from electra.pretraining.heldout import build_fixed_corruptions, mean_token_cosine
from electra.pretraining.loop import special_ids_for
from electra.runtime.optim import lr_multiplier


class WindowDetector(nn.Module):
    """Concatenated (previous, token, next) embeddings -> LayerNorm -> GELU MLP -> logit."""

    def __init__(self, vocab_size: int, dim: int = 128, hidden: int = 256):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(3 * dim, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, ids, token_type_ids=None, attention_mask=None):
        return self.mlp(neighbour_window(self.norm(self.embed(ids)))).squeeze(-1)


def neighbour_window(x: torch.Tensor) -> torch.Tensor:
    """[B, S, D] -> [B, S, 3D]: each position's (previous, own, next) vectors, zero-padded."""
    padded = F.pad(x, (0, 0, 1, 1))
    seq = x.shape[1]
    return torch.cat([padded[:, :seq], padded[:, 1:seq + 1], padded[:, 2:]], -1)


def add_window_stem(encoder) -> None:
    """Replace the encoder's embedding output by W [e(t-1); e(t); e(t+1)] (a width-3 conv)."""
    cfg = encoder.config
    encoder.embeddings_project = nn.Linear(3 * cfg.embedding_size, cfg.hidden_size)
    plain_embed = encoder.embeddings

    def embed(input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return encoder.embeddings_project(neighbour_window(plain_embed(input_ids,
                                                                      token_type_ids)))

    encoder.embed = embed


def restrict_attention(encoder, window: int) -> None:
    """Every layer attends only within `window` positions (padding still hidden)."""
    plain_bias = encoder.attention_bias

    def local_bias(attention_mask, x):
        pos = torch.arange(x.shape[1])
        far = (pos[None, :] - pos[:, None]).abs() > window
        local = torch.zeros(far.shape, dtype=x.dtype).masked_fill_(far, torch.finfo(x.dtype).min)
        bias = plain_bias(attention_mask, x)  # None, a boolean key mask or additive
        if bias is None:
            return local[None, None]
        return (additive_bias(bias, x.dtype) + local).clamp_(min=torch.finfo(x.dtype).min)

    encoder.attention_bias = local_bias


def centre_residuals(encoder) -> None:
    """Each block's LayerNorms see x - mean over the sequence of x (an experiment)."""
    for layer in encoder.layers:
        for name in ("attention_norm", "ffn_norm"):
            norm = getattr(layer, name)
            setattr(layer, name, nn.Sequential(_Centre(), norm))


def use_rezero(encoder) -> None:
    """Each block becomes x + a_attn * Attn(x), then + a_ffn * FFN(x); a_* start at 0."""
    for layer in encoder.layers:
        layer.gates = nn.Parameter(torch.zeros(2))
        layer.forward = _rezero_forward.__get__(layer)


def _rezero_forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    x = x + self.gates[0] * self.attention_out(self.attention(x, bias))
    return x + self.gates[1] * self.ffn_out(F.gelu(self.ffn_in(x)))


class _Centre(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=1, keepdim=True)


@torch.no_grad()
def anatomy(model: Discriminator, probe) -> dict:
    """Token cosine after the embeddings and each layer; layer 1's input/attention/FFN norms."""
    enc, rows = model.electra, slice(0, 16)
    ids, mask, keep = probe.input_ids[rows], probe.attention_mask[rows], probe.scored[rows]
    x = enc.embed(ids, probe.token_type_ids[rows])
    bias = enc.attention_bias(mask, x)
    first = enc.layers[0]
    attn = first.attention_out(first.attention(x, bias))
    ffn = first.ffn_out(F.gelu(first.ffn_in(first.attention_norm(x + attn))))
    cosines = [round(mean_token_cosine(x, keep), 3)]
    for layer in enc.layers:
        x = layer(x, bias)
        cosines.append(round(mean_token_cosine(x, keep), 3))
    norm = lambda t: round(float(t[keep].norm(dim=-1).mean()), 2)  # noqa: E731
    return {"token_cosine_by_layer": cosines, "layer1_input_norm": norm(enc.embed(ids)),
            "layer1_attention_norm": norm(attn), "layer1_ffn_norm": norm(ffn)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="runs/context_study/data")
    parser.add_argument("--model", choices=["window", "transformer"], default="transformer")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--schedule", choices=["constant", "electra"], default="constant")
    parser.add_argument("--head-bias", action="store_true",
                        help="start the transformer's output bias at the base-rate logit")
    parser.add_argument("--zero-head", action="store_true",
                        help="start the transformer's output weights at 0: constant logits, "
                             "no random per-token variance for the optimizer to suppress")
    parser.add_argument("--window-stem", action="store_true",
                        help="the transformer's first-layer input is a projection of the "
                             "(previous, token, next) embeddings, as the window model's")
    parser.add_argument("--centre", action="store_true",
                        help="subtract the mean over the sequence's tokens from the residual "
                             "stream before each LayerNorm (removes any shared component)")
    parser.add_argument("--rezero", action="store_true",
                        help="ReZero blocks (Bachlechner et al. 2020): x + a * f(x) with a "
                             "learned scalar a starting at 0, no LayerNorm in the blocks")
    parser.add_argument("--layers", type=int, default=None,
                        help="transformer depth (default: the tiny preset's 4)")
    parser.add_argument("--alibi", action="store_true",
                        help="the encoder's ALiBi position bias (model.position_bias=alibi)")
    parser.add_argument("--alibi-max-slope", type=float, default=None,
                        help="with --alibi: model.alibi_max_slope, the steepest head's slope "
                             "(1.0 gives tiny's two heads 1 and 1/16)")
    parser.add_argument("--local-window", type=int, default=None,
                        help="hard local attention: each token attends only to tokens at "
                             "distance <= K (an additive -inf bias beyond)")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    train = PretrainingDataset(args.data, "train")
    special = special_ids_for(train.data_dir)
    counts = train.token_counts()
    probe = build_fixed_corruptions(PretrainingDataset(args.data, "heldout"), counts,
                                    special)["unigram"]
    sampler = build_sampler("unigram", train.vocab_size, special,
                            ObjectiveContext(special, lambda: counts))
    if args.model == "window":
        model = WindowDetector(train.vocab_size)
    else:
        cfg = PretrainConfig.from_preset("tiny").model
        cfg.vocab_size = train.vocab_size
        if args.alibi:
            cfg.position_bias = "alibi"
            cfg.alibi_max_slope = args.alibi_max_slope
        if args.layers is not None:
            cfg.num_hidden_layers = args.layers
        model = Discriminator(cfg)
        if args.local_window is not None:
            restrict_attention(model.electra, args.local_window)
        if args.window_stem:
            add_window_stem(model.electra)
        if args.centre:
            centre_residuals(model.electra)
        if args.rezero:
            use_rezero(model.electra)
        init_weights(model, cfg.initializer_range)
        if args.head_bias:  # logit of the replaced share, 0.15 * (1 - P(sample = original))
            with torch.no_grad():
                model.discriminator_predictions.dense_prediction.bias.fill_(-1.75)
        if args.zero_head:
            with torch.no_grad():
                model.discriminator_predictions.dense_prediction.weight.zero_()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    total = args.steps if args.schedule == "electra" else 10**12
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: lr_multiplier(t, args.warmup, total))

    def evaluate(step: int) -> dict:
        model.eval()
        with torch.no_grad():
            scores = model(probe.input_ids, probe.token_type_ids, probe.attention_mask)
        y = probe.is_replaced[probe.scored].numpy()
        row = {"step": step, "auc_unigram": round(float(roc_auc_score(
            y, scores[probe.scored].numpy())), 3)}
        if isinstance(model, Discriminator):
            row.update(anatomy(model, probe))
        model.train()
        return row

    curve, started = [evaluate(0)], time.perf_counter()
    batches = iterate_batches(train, 32, args.seed + 1)
    for step in range(1, args.steps + 1):
        batch = next(batches)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        masked = select_positions(ids, mask, 0.15, special)
        flat = masked.view(-1).nonzero().squeeze(1)
        fakes = gumbel_sample(sampler.logits(flat.numel()))
        inputs = ids.view(-1).index_copy(0, flat, fakes).view_as(ids)
        logits = model(inputs, batch["token_type_ids"], mask)
        per_token = F.binary_cross_entropy_with_logits(logits, (inputs != ids).float(),
                                                       reduction="none")
        loss = (per_token * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % args.eval_every == 0 or step == args.steps:
            curve.append({**evaluate(step), "train_loss": round(float(loss.detach()), 4)})
            print(json.dumps(curve[-1]), file=sys.stderr, flush=True)
    result = {"settings": vars(args), "seconds": round(time.perf_counter() - started, 1),
              "label_base_rate_entropy": round(float(_entropy(probe)), 4), "curve": curve}
    print(json.dumps(result))
    return result


def _entropy(probe) -> float:
    p = float(probe.is_replaced[probe.scored].float().mean())
    return -(p * np.log(p) + (1 - p) * np.log(1 - p))


if __name__ == "__main__":
    main()

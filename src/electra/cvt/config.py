"""CVT hyper-parameters (Table 4.1) and the presets, one `CVTConfig` record each.

`paper` is Table 4.1 plus the reference implementation's unstated details (gradient clipping
1.0, a 5,000-step linear warm-up, 128-unit parser projections). `small` keeps every rule but
shrinks the sizes so a run takes minutes on 2 CPU cores; `small-cpu` is `small` with a quarter
of the CVT loss weight. Strict merging reuses
`electra.config.merge`: an unknown key is an error.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from electra.config import merge
from electra.errors import ElectraError


@dataclass
class CVTConfig:
    # encoder (section 4.2.1, Table 4.1)
    word_dim: int = 300
    char_dim: int = 50
    char_widths: list[int] = field(default_factory=lambda: [2, 3, 4])
    char_filters: int = 100  # per width
    max_word_len: int = 20
    lstm1: int = 1024  # first Bi-LSTM, per direction
    lstm2: int = 512  # second Bi-LSTM, per direction
    projection: int = 512  # LSTM projection layers
    hidden: int = 512  # hidden layer of each prediction module
    dep_projection: int = 128  # head/dependent layers of the bilinear parser
    max_vocab: int = 100_000
    # training (section 4.1, 4.3.1, Table 4.1)
    batch_size: int = 64
    lr: float = 0.5
    lr_decay: float = 0.005  # lr / (1 + lr_decay * sqrt(t))
    warmup_steps: int = 5000  # reference implementation; not in the paper
    momentum: float = 0.9
    grad_clip: float = 1.0  # reference implementation; not in the paper
    # Table 4.1 lists "dropout 0.5 labeled, 0.8 unlabeled"; the reference code names these
    # keep probabilities (labeled_keep_prob/unlabeled_keep_prob), i.e. drop rates 0.5 / 0.2.
    keep_labeled: float = 0.5
    keep_unlabeled: float = 0.8
    ema_decay: float = 0.998
    label_smoothing: float = 0.1
    full_view_aux: bool = True  # the extra full-view module with dropout (4.3.1)
    # Not in the paper or the reference (both minimise L_sup + L_CVT, i.e. weight 1): a factor
    # on L_CVT for CPU-scale runs, where full-weight unlabeled updates pull the small shared
    # encoder away from the primary module faster than labeled updates refit it
    # (docs/experiments/cvt.md).
    cvt_weight: float = 1.0
    # Unlabeled minibatches per labeled one. The paper (4.1.1) and the reference alternate them
    # one to one; 0.5 takes an unlabeled minibatch after every second labeled one, 2 takes two.
    unlabeled_ratio: float = 1.0
    # Not in the paper (which trains every auxiliary view, 4.2.1): the views L_CVT trains, by
    # name (tagging: fwd, bwd, future, past, full; parsing: fwd-fwd, fwd-bwd, bwd-fwd, bwd-bwd,
    # full). None: all of them. For probing what each view does to a task
    # (docs/experiments/cvt.md, NER).
    aux_views: list[str] | None = None
    max_unlabeled_len: int = 100
    # Reference-code details that the paper does not state (docs/cvt.md, deviation table). Each can
    # be switched off to compare with the earlier behaviour (benchmarks/cvt_probe.py --before).
    # TensorFlow's initialisers: Glorot-uniform matrices and zero biases (tf.get_variable's
    # and tf.layers' defaults), LSTM forget-gate bias 1.0 (LSTMCell's forget_bias), as in
    # model/encoder.py, model/model_helpers.py (lstm_cell, project) and tagging_module.py.
    tf_init: bool = True
    # <start>/<end> tokens around every sentence and begin/end-of-word marks around every
    # word's characters (corpus_processing/example.py Example, minibatching._make_minibatch);
    # the extra positions are excluded from every loss and prediction (mask 0 there).
    boundary_tokens: bool = True
    # TensorFlow's MomentumOptimizer applies an embedding's gradient (IndexedSlices) to the
    # looked-up rows only: other rows keep their value and their momentum.
    sparse_embedding_momentum: bool = True
    # The reference parser (depparse_module.PredictionModule) first applies ReLU hidden layers of
    # `hidden` units with dropout, then the `dep_projection`-size bilinear projections, both
    # sides divided by a learned scale starting at dep_projection ** 0.25. Off: ReLU layers of
    # `dep_projection` units straight into the bilinear form, no dropout, no scale.
    parser_hidden_layer: bool = True

    def validate(self) -> None:
        for name in ("word_dim", "char_dim", "char_filters", "max_word_len", "lstm1", "lstm2",
                     "projection", "hidden", "dep_projection", "max_vocab", "batch_size"):
            if getattr(self, name) < 1:
                raise ElectraError(f"cvt.{name} must be positive, got {getattr(self, name)}")
        if not self.char_widths or min(self.char_widths) < 1:
            raise ElectraError("cvt.char_widths must be positive widths")
        for name in ("keep_labeled", "keep_unlabeled"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ElectraError(f"cvt.{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ElectraError(f"cvt.ema_decay must be in [0, 1), got {self.ema_decay}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ElectraError("cvt.label_smoothing must be in [0, 1)")
        if self.cvt_weight < 0:
            raise ElectraError(f"cvt.cvt_weight must be >= 0, got {self.cvt_weight}")
        if not 0.0 < self.unlabeled_ratio <= 16.0:
            raise ElectraError("cvt.unlabeled_ratio (unlabeled minibatches per labeled one) "
                               f"must be in (0, 16], got {self.unlabeled_ratio}")
        if self.aux_views is not None and not self.aux_views:
            raise ElectraError("cvt.aux_views: name at least one view, or null for all")
        if self.lr <= 0 or self.momentum < 0 or self.grad_clip < 0 or self.warmup_steps < 0:
            raise ElectraError("cvt.lr must be positive; momentum, grad_clip, warmup_steps >= 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_PAPER = CVTConfig()
_SMALL = dataclasses.replace(_PAPER, word_dim=100, char_filters=50, lstm1=256, lstm2=128,
                             projection=128, hidden=128, dep_projection=32, max_vocab=50_000,
                             warmup_steps=100)

# One record per preset, as `electra.presets` holds the encoder's.
PRESETS: dict[str, CVTConfig] = {
    "paper": _PAPER,
    "small": _SMALL,
    # The CPU-scale recipe: `small` with L_CVT at a quarter of the paper's weight. At a few
    # thousand updates the full weight costs 5 F1 early on and trails the quarter weight at
    # every measured length (docs/experiments/cvt.md, "The quarter weight on every task").
    "small-cpu": dataclasses.replace(_SMALL, cvt_weight=0.25),
}


@dataclass
class CVTTrainConfig:
    """`electra cvt`'s `train` section: how long a run trains, and how (`--set train.KEY=V`)."""

    steps: int | None = None  # labeled minibatches, each followed by unlabeled ones under CVT
    epochs: float | None = None  # or passes over the labeled training data
    cvt: bool = True  # False: the supervised baseline (--no-cvt)
    seed: int = 0
    train_sentences: int | None = None  # a fixed random subset of N labeled sentences per task
    max_unlabeled: int = 200_000  # the first N unlabeled sentences
    save_every: int = 500  # steps between checkpoints
    precision: str = "auto"  # electra.precision

    def validate(self) -> None:
        if (self.steps is None) == (self.epochs is None):
            raise ElectraError("give exactly one of --steps and --epochs (train.steps, "
                               "train.epochs)")


# What a resumed run may change: how long it trains, how often it saves, its precision.
RESUMABLE_CHANGES = ("steps", "epochs", "save_every", "precision")


def make_config(preset: str = "small", overrides: dict[str, Any] | None = None) -> CVTConfig:
    """A copy of `preset` with `overrides` merged in (typed; an unknown key is an error)."""
    if preset not in PRESETS:
        raise ElectraError(f"unknown CVT preset {preset!r} (known: {', '.join(PRESETS)})")
    cfg = copy.deepcopy(PRESETS[preset])
    if overrides:
        merge(cfg, overrides, where="cvt")
    cfg.validate()
    return cfg

"""Fine-tuning settings (the `finetune` section of a settings file) and the learning rates they
resolve to, with the hyper-parameters of Table 5.2 as defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.finetuning.optim import LR_DECAY_STYLES
from electra.precision import PRECISIONS
from electra.presets import SIZES, infer_size
from electra.runtime.sinks import parse_report_to


def _recipe(default: Any) -> Any:
    """A field of the training recipe, which differs between `finetune` (Table 5.2) and
    `multitask` (section 3.3): a multi-task strategy's Single stages keep finetune's value of
    these and take every other field from the multi-task settings (`recipe_free_fields`)."""
    return dataclasses.field(default=default, metadata={"recipe": True})


@dataclass
class FinetuneSettings:
    lr: float | None = _recipe(None)  # None: from the model size (Table 5.2)
    layerwise_decay: float | None = _recipe(None)  # None: from the model size
    lr_decay_style: str = "dissertation"  # or "official" (see electra.finetuning.optim)
    size: str | None = None  # tiny/small/base/large; None: inferred from the hidden size
    epochs: float | None = _recipe(None)  # None: the task's (10 for RTE and STS-B, 3 otherwise)
    batch_size: int = _recipe(32)  # examples per optimizer step, whatever grad_accum is
    grad_accum: int = 1  # micro-batches per optimizer step (batch_size / grad_accum each)
    eval_batch_size: int = 128
    max_seq_len: int | None = None  # None: the task's (384 for SQuAD, 128 otherwise)
    warmup_fraction: float = 0.1
    weight_decay: float = 0.0
    adam_eps: float = 1e-6
    dropout: float = 0.1
    seeds: int = 1
    seed: int = 1
    max_train_examples: int | None = None  # the first K training examples
    max_eval_examples: int | None = None
    precision: str = "auto"  # electra.precision; results.json records the one used
    length_sorted: bool = _recipe(True)  # batches of similar length (electra.finetuning.data)
    device: str = "auto"
    save_all_seeds: bool = False
    log_every: int = 10  # steps between lines of seed<k>/metrics.jsonl
    tensorboard: bool = False  # also TensorBoard scalars under OUT/tensorboard/seed<k>/
    # Sinks that also get each seed's settings, metrics and scores (`--report-to`;
    # electra.runtime.sinks): tensorboard, wandb, mlflow.
    report_to: list[str] = dataclasses.field(default_factory=list)
    # Steps between checkpoints of a seed's training (OUT/seed<k>/checkpoints, deleted once the
    # seed is done); 0: none, except the one a stop signal writes. See docs/finetuning.md.
    save_every: int = 1000

    @property
    def sinks(self) -> list[str]:
        """Where each seed's numbers go besides its metrics.jsonl."""
        return list(dict.fromkeys([*self.report_to,
                                   *(["tensorboard"] if self.tensorboard else [])]))

    def validate(self) -> None:
        if self.lr_decay_style not in LR_DECAY_STYLES:
            raise ElectraError(f"--lr-decay-style must be one of {LR_DECAY_STYLES}")
        if self.size is not None and self.size not in SIZES:
            raise ElectraError(f"--size must be one of {', '.join(SIZES)}")
        for name in ("batch_size", "eval_batch_size", "max_seq_len", "seeds", "log_every",
                     "grad_accum"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ElectraError(f"{name} must be positive, got {getattr(self, name)}")
        if self.batch_size % self.grad_accum:
            raise ElectraError(f"--batch-size ({self.batch_size}) must be divisible by "
                               f"--grad-accum ({self.grad_accum})")
        parse_report_to(self.report_to)  # names only; packages are checked when a run starts
        if self.save_every < 0:
            raise ElectraError(f"--save-every must be 0 (off) or positive, got {self.save_every}")

        if self.lr is not None and self.lr <= 0:
            raise ElectraError(f"--lr must be positive, got {self.lr}")
        if self.layerwise_decay is not None and not 0 < self.layerwise_decay <= 1:
            raise ElectraError(f"--layerwise-decay must be in (0, 1], got {self.layerwise_decay}")
        if self.epochs is not None and self.epochs <= 0:
            raise ElectraError(f"--epochs must be positive, got {self.epochs}")
        if self.precision not in PRECISIONS:
            raise ElectraError(f"--precision must be one of {', '.join(PRECISIONS)}, got "
                               f"{self.precision!r}")
        if not 0 <= self.warmup_fraction < 1:
            raise ElectraError(f"--warmup-fraction must be in [0, 1), got {self.warmup_fraction}")

    def check_model(self, model_config: ModelConfig) -> None:
        """Settings the model itself bounds: the sequence length, by its positions."""
        if self.max_seq_len is not None and self.max_seq_len > model_config.max_position_embeddings:
            raise ElectraError(f"max_seq_len {self.max_seq_len} exceeds the model's "
                               f"max_position_embeddings ({model_config.max_position_embeddings})")


def recipe_free_fields() -> tuple[str, ...]:
    """The `FinetuneSettings` fields outside the training recipe (see `_recipe`), in order."""
    return tuple(f.name for f in dataclasses.fields(FinetuneSettings)
                 if not f.metadata.get("recipe"))


def learning_rates(settings: FinetuneSettings, hidden_size: int,
                   defaults: Callable[[str], tuple[float, float]]) -> tuple[str, float, float]:
    """(size, peak learning rate, layer-wise decay): the settings' where given, else `defaults`
    of the model's size (`settings.size`, or inferred from its hidden size)."""
    size = settings.size or infer_size(hidden_size)
    default_lr, default_decay = defaults(size)
    lr = settings.lr if settings.lr is not None else default_lr
    decay = (settings.layerwise_decay if settings.layerwise_decay is not None
             else default_decay)
    return size, lr, decay

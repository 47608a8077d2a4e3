"""The demo's downstream check: does the model it pre-trained fine-tune better than random
weights of the same shape? Held-out probes (AUC on fixed corruptions) show whether the
discriminator uses context, not whether it transfers; only fine-tuning shows that
(docs/experiments/demo-transfer.md)."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.finetune.baseline import random_init
from electra.finetune.loop import FinetuneSettings, finetune, primary_key
from electra.tasks import get_task

CHECK_TASK = "SST-2"
CHECK_TRAIN_EXAMPLES = 10_000  # the first 10,000 of SST-2's 67,349 sentences
CHECK_SEEDS = 3
GLUE_ENV = "ELECTRA_GLUE_DIR"
# Where the check's data is looked for when neither --check-data nor $ELECTRA_GLUE_DIR says:
# the shared data beside a checkout of this repository.
_CHECKOUT_GLUE = Path(__file__).resolve().parents[4] / "shared" / "data" / "glue"


@dataclass
class CheckSettings:
    """How the demo fine-tunes: `task` on its first `train_examples`, one epoch, `seeds` seeds
    from each start, the Table 5.2 learning rate of the model's size without layer-wise decay
    (a barely trained model's lower layers need the full rate, docs/experiments/
    demo-transfer.md)."""

    task: str = CHECK_TASK
    train_examples: int = CHECK_TRAIN_EXAMPLES
    seeds: int = CHECK_SEEDS
    epochs: float = 1.0
    layerwise_decay: float = 1.0

    def finetune_settings(self) -> FinetuneSettings:
        return FinetuneSettings(seeds=self.seeds, epochs=self.epochs,
                                layerwise_decay=self.layerwise_decay,
                                max_train_examples=self.train_examples)


def find_glue_dir(given: str | Path | None) -> Path | None:
    """The GLUE folder the check reads: `given` if any, else $ELECTRA_GLUE_DIR, else the
    shared data beside this checkout; None when the one asked for (or none of the others)
    holds the task's files."""
    candidates = [given] if given is not None else [os.environ.get(GLUE_ENV), _CHECKOUT_GLUE]
    for candidate in candidates:
        if candidate and (Path(candidate) / CHECK_TASK / "train.tsv").is_file():
            return Path(candidate)
    return None


def downstream_check(discriminator: Path, glue_dir: Path, out: Path,
                     settings: CheckSettings | None = None) -> dict[str, Any]:
    """Fine-tune `discriminator` and a random initialisation of its architecture (same
    tokenizer) on `settings.task`; the medians over seeds, their difference, and whether the
    difference is larger than the seeds' spread (the larger of the two starts' ranges)."""
    settings = settings or CheckSettings()
    key = primary_key(get_task(settings.task))
    starts = {"pretrained": Path(discriminator),
              "random": random_init(Path(discriminator), out / "random_init", seed=0)}
    scores = {}
    for name, model_dir in starts.items():
        result = finetune(model_dir, settings.task, glue_dir, out / name,
                          settings.finetune_settings())
        scores[name] = [100 * s["scores"][key] for s in result["seeds"]]
    medians = {name: statistics.median(values) for name, values in scores.items()}
    gain = medians["pretrained"] - medians["random"]
    spread = max(max(values) - min(values) for values in scores.values())
    return {"task": settings.task, "metric": key, "train_examples": settings.train_examples,
            "epochs": settings.epochs, "seeds": settings.seeds, "scores": scores,
            "medians": medians, "gain": gain, "spread": spread,
            "paid": gain > 0 and gain > spread}


ADVICE = ("for an encoder that transfers, pre-train longer on more text: the CPU recipe\n"
          "  (python -m experiments.ladder_on_mix, about an hour on 2 cores: +4.5 points over\n"
          "  random weights on CoLA, SST-2 and RTE, docs/experiments/cpu-recipe.md), or a GPU\n"
          "  (docs/pretraining.md)")


def format_check(check: dict[str, Any]) -> list[str]:
    """The summary's lines for the check: both starts' medians and seeds, the difference and
    what it means."""
    metric = check["metric"].removeprefix("dev_")
    lines = [f"downstream check: {check['task']} dev {metric}, fine-tuned on "
             f"{check['train_examples']:,} sentences, {check['epochs']:g} epoch, "
             f"{check['seeds']} seeds (median)"]
    for name, label in (("pretrained", "pre-trained"), ("random", "random weights")):
        seeds = ", ".join(f"{v:.1f}" for v in check["scores"][name])
        lines.append(f"  {label:<16}{check['medians'][name]:>6.1f}   (seeds: {seeds})")
    gain, spread = check["gain"], check["spread"]
    lines.append(f"  {'difference':<16}{gain:>+6.1f}   (seeds' spread: {spread:.1f})")
    if check["paid"]:
        lines.append("pre-training paid: the model beats random weights by more than the "
                     "seeds' spread;")
        lines.append(ADVICE.replace("for an encoder that transfers", "for more"))
    elif gain > 0:
        lines.append("pre-training gained less than the seeds' spread: not a clear gain yet;")
        lines.append(ADVICE)
    else:
        lines.append("pre-training did not pay yet: random weights fine-tune as well or "
                     "better;")
        lines.append(ADVICE)
    return lines

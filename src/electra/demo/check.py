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

from electra.finetuning.baseline import random_init
from electra.finetuning.evaluation import primary_key
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings
from electra.tasks import get_task


@dataclass
class CheckSettings:
    """How the demo fine-tunes: `task` on its first `train_examples`, `epochs` epochs, `seeds`
    seeds from each start, the Table 5.2 learning rate of the model's size without layer-wise
    decay (a barely trained model's lower layers need the full rate, docs/experiments/
    demo-transfer.md)."""

    task: str = "chunk"
    train_examples: int = 2000
    seeds: int = 3
    epochs: float = 3.0
    layerwise_decay: float = 1.0
    device: str = "auto"  # the demo's own --device and --precision
    precision: str = "auto"

    def finetune_settings(self) -> FinetuneSettings:
        return FinetuneSettings(seeds=self.seeds, epochs=self.epochs,
                                layerwise_decay=self.layerwise_decay,
                                max_train_examples=self.train_examples, device=self.device,
                                precision=self.precision)


# The checks `electra demo --check-task` offers. chunk (the default): CoNLL-2000 chunking on
# 2,000 of its 8,936 training sentences, 3 epochs (Table 5.2's), scored on its test set, where
# what a discriminator learns first (which words fit where) pays within the demo's minutes.
# SST-2: 10,000 sentences, one epoch; the demo's few minutes of pre-training do not pay there
# (docs/experiments/demo-transfer.md).
CHECKS = {"chunk": CheckSettings(),
          "SST-2": CheckSettings(task="SST-2", train_examples=10_000, epochs=1.0)}
# What each check reads: the folder in ../shared/data, and the files that show it is there.
CHECK_DATA = {"chunk": ("conll2000", ("train.txt", "test.txt")),
              "SST-2": ("glue", ("SST-2/train.tsv", "SST-2/dev.tsv"))}
CHECK_LABELS = {"chunk": "CoNLL-2000 chunking, test-set F1", "SST-2": "SST-2 dev accuracy"}
CHECK_DATA_ENV = "ELECTRA_CHECK_DATA"
# Where the check's data is looked for when neither --check-data nor $ELECTRA_CHECK_DATA says:
# the shared data beside a checkout of this repository.
_CHECKOUT_DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


def expected_files(task: str) -> str:
    """The files a folder must hold to serve `task`'s check (what an error names)."""
    return " and ".join(CHECK_DATA[task][1])


def check_data_candidates(given: str | Path | None, task: str = "chunk") -> list[Path]:
    """Where `task`'s check looks, in order: `given` if any, else $ELECTRA_CHECK_DATA and the
    shared data beside this checkout."""
    if given is not None:
        return [Path(given)]
    from_env = os.environ.get(CHECK_DATA_ENV)
    candidates = [Path(from_env)] if from_env else []
    return candidates + [_CHECKOUT_DATA / CHECK_DATA[task][0]]


def find_check_data(given: str | Path | None, task: str = "chunk") -> Path | None:
    """The first of `check_data_candidates` that holds the task's files, or None."""
    files = CHECK_DATA[task][1]
    return next((folder for folder in check_data_candidates(given, task)
                 if all((folder / name).is_file() for name in files)), None)


def downstream_check(discriminator: Path, data_dir: Path, out: Path,
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
        result = finetune(model_dir, settings.task, data_dir, out / name,
                          settings.finetune_settings())
        scores[name] = [100 * s["scores"][key] for s in result["seeds"]]
    medians = {name: statistics.median(values) for name, values in scores.items()}
    gain = medians["pretrained"] - medians["random"]
    spread = max(max(values) - min(values) for values in scores.values())
    return {"task": settings.task, "metric": key, "train_examples": settings.train_examples,
            "epochs": settings.epochs, "seeds": settings.seeds, "scores": scores,
            "medians": medians, "gain": gain, "spread": spread,
            "paid": gain > 0 and gain > spread, "label": CHECK_LABELS.get(settings.task, "")}


ADVICE = ("for an encoder that transfers, pre-train longer on more text: the CPU recipe\n"
          "  (python -m experiments.ladder_on_mix, about an hour on 2 cores: +4.5 points over\n"
          "  random weights on CoLA, SST-2 and RTE, docs/experiments/cpu-recipe.md), or a GPU\n"
          "  (docs/pretraining.md)")


TAGGING_FIRST = ("a tagger gains first; sentence tasks need longer pre-training (SST-2 did not\n"
                 "  gain from demos of 800 to 1,200 steps: --check-task SST-2,\n"
                 "  docs/experiments/demo-transfer.md);")


def format_check(check: dict[str, Any]) -> list[str]:
    """The summary's lines for the check: both starts' medians and seeds, the difference and
    what it means."""
    label = check.get("label") or f"{check['task']} {check['metric'].removeprefix('dev_')}"
    epochs = f"{check['epochs']:g} epoch" + ("" if check["epochs"] == 1 else "s")
    lines = [f"downstream check: {label}, fine-tuned on {check['train_examples']:,} sentences, "
             f"{epochs}, {check['seeds']} seeds (median)"]
    for name, start in (("pretrained", "pre-trained"), ("random", "random weights")):
        seeds = ", ".join(f"{v:.1f}" for v in check["scores"][name])
        lines.append(f"  {start:<16}{check['medians'][name]:>6.1f}   (seeds: {seeds})")
    gain, spread = check["gain"], check["spread"]
    lines.append(f"  {'difference':<16}{gain:>+6.1f}   (seeds' spread: {spread:.1f})")
    if check["paid"]:
        lines.append("pre-training paid: the model beats random weights by more than the "
                     "seeds' spread;")
        if check["task"] == "chunk":
            lines.append(TAGGING_FIRST)
        lines.append(ADVICE.replace("for an encoder that transfers", "for more"))
    elif gain > 0:
        lines.append("pre-training gained less than the seeds' spread: not a clear gain yet;")
        lines.append(ADVICE)
    else:
        lines.append("pre-training did not pay yet: random weights fine-tune as well or "
                     "better;")
        lines.append(ADVICE)
    return lines

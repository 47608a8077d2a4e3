"""Which part of a briefly pre-trained discriminator helps or hurts fine-tuning? The demo's
model against random weights of its shape, and hybrids of the two: the pre-trained embeddings
on random layers, and random embeddings under the pre-trained layers; each fine-tuned as the
demo's SST-2 check fine-tunes (`electra.demo.check.CHECKS["SST-2"]`: 10,000 sentences, one
epoch, 3 seeds, no layer-wise decay), optionally at other learning rates.

Each start's fine-tuning is cached under WORK/TASK/epochs-E/START/lr-LR (results.json); a run
that finds it is not trained again. Prints one JSON object (medians over seeds, every seed's score).

    python -m experiments.demo_transfer_parts --model runs/demo/pretrain/final/discriminator
    python -m experiments.demo_transfer_parts --model DIR --lrs 1e-4,3e-4,1e-3 \
        --starts pretrained,random
    python -m experiments.demo_transfer_parts --model DIR --starts pretrained,random \
        --task chunk                                          # the demo's check
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
from pathlib import Path

from safetensors.torch import load_file, save_file

from electra.demo.check import CHECK_DATA, CHECKS, CheckSettings, find_check_data
from electra.finetuning.baseline import random_init
from electra.finetuning.run import finetune

EMBEDDINGS = "electra.embeddings."
TOP_LAYER = re.compile(r"electra\.layers\.(\d+)\.")


def _top_layer(keys) -> str:
    last = max(int(m.group(1)) for k in keys if (m := TOP_LAYER.match(k)))
    return f"electra.layers.{last}."


# Which weights each start takes from the pre-trained model (the rest from random weights).
STARTS = {
    "pretrained": lambda key, top: True,
    "random": lambda key, top: False,
    "pretrained_embeddings": lambda key, top: key.startswith(EMBEDDINGS),
    "pretrained_layers": lambda key, top: not key.startswith(EMBEDDINGS),
    # Re-initialising the top layer before fine-tuning (Zhang et al. 2021, "Revisiting
    # few-sample BERT fine-tuning"): the layer nearest the replaced-token head.
    "pretrained_below_top": lambda key, top: not key.startswith(top),
    # Random attention (queries, keys and values) under the pre-trained rest: whether what
    # the attention learned to look at is what fine-tuning has to undo.
    "pretrained_without_attention": lambda key, top: ".attention.qkv." not in key,
    # Every LayerNorm back at its initial scale 1 and shift 0.
    "pretrained_without_norms": lambda key, top: "norm" not in key.lower(),
}


def hybrid(pretrained: Path, random: Path, out: Path, take_pretrained) -> Path:
    """`random`'s directory with the weights `take_pretrained(key, top_layer_prefix)` picks
    from `pretrained`."""
    ours, theirs = load_file(str(pretrained / "model.safetensors")), \
        load_file(str(random / "model.safetensors"))
    top = _top_layer(ours)
    out.mkdir(parents=True, exist_ok=True)
    for f in random.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            (out / f.name).write_bytes(f.read_bytes())
    mixed = {k: (ours[k] if take_pretrained(k, top) else v) for k, v in theirs.items()}
    save_file(mixed, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def start_dirs(model: Path, work: Path, starts: list[str]) -> dict[str, Path]:
    random = random_init(model, work / "random_init", seed=0)
    dirs = {"pretrained": model, "random": random}
    for name in starts:
        if name not in dirs:
            dirs[name] = hybrid(model, random, work / name, STARTS[name])
    return dirs


SST2 = CHECKS["SST-2"]  # the settings these studies started from


def run(model: Path, work: Path, data: Path, starts: list[str], lrs: list[float],
        check: CheckSettings) -> dict:
    dirs = start_dirs(model, work, starts)
    table = {}
    for start in starts:
        for lr in lrs:
            out = (work / check.task / f"epochs-{check.epochs:g}" / start / f"lr-{lr:g}"
                   if check.train_examples == SST2.train_examples else
                   work / check.task / f"train-{check.train_examples}-epochs-{check.epochs:g}"
                   / start / f"lr-{lr:g}")
            cached = out / "results.json"
            if cached.is_file():
                result = json.loads(cached.read_text())
            else:
                settings = dataclasses.replace(check.finetune_settings(), lr=lr)
                result = finetune(dirs[start], check.task, data, out, settings)
            scores = [100 * s["scores"][result["primary_metric"]] for s in result["seeds"]]
            table[f"{start}@{lr:g}"] = {"median": round(statistics.median(scores), 2),
                                        "seeds": [round(x, 2) for x in scores]}
    return {"model": str(model), "task": check.task, "train_examples": check.train_examples,
            "epochs": check.epochs, "layerwise_decay": check.layerwise_decay, "results": table}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="pre-trained discriminator")
    p.add_argument("--work", type=Path, default=Path("runs/demo_transfer_parts"))
    p.add_argument("--data", type=Path, help="the task's data: a GLUE folder, CoNLL-2000's for "
                   "chunk (default: as the demo finds it)")
    p.add_argument("--starts", default=",".join(STARTS), help="default: %(default)s")
    p.add_argument("--lrs", default="3e-4", help="fine-tuning learning rates (default 3e-4, "
                   "Table 5.2's for Small, which `tiny` uses)")
    p.add_argument("--task", default="SST-2", help="default: %(default)s; chunk runs the "
                   "demo's check, other tasks read a GLUE folder")
    p.add_argument("--epochs", type=float, help="default: the demo's check of that task (SST-2 "
                   "1, chunk 3), else 1")
    p.add_argument("--train-examples", type=int, help="the first N training examples "
                   "(default: the demo's check of that task: SST-2 10,000, chunk 2,000)")
    args = p.parse_args(argv)
    base = CHECKS.get(args.task, SST2)
    data = find_check_data(args.data, args.task if args.task in CHECK_DATA else "SST-2")
    if data is None:
        p.error(f"no data for {args.task} found: pass --data")
    check = CheckSettings(task=args.task, epochs=args.epochs or base.epochs,
                          train_examples=args.train_examples or base.train_examples)
    report = run(args.model, args.work, data, args.starts.split(","),
                 [float(x) for x in args.lrs.split(",")], check)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()

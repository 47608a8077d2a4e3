"""How fast a fine-tuned classifier runs on a CPU, in each runtime it ships to, and what int8
costs in accuracy.

Models: SST-2 classifiers of the `tiny-local` and `small` presets, fine-tuned here with
`electra finetune` (cached under WORK): from `--encoder PRESET=DIR` where given (e.g. the CPU
recipe's discriminator for tiny-local), else from random weights with a 30,522-token WordPiece
vocabulary trained on the NLTK corpora (speed does not depend on the weights; accuracy does).
Runtimes: PyTorch eager (electra's loader), `transformers`
(`AutoModelForSequenceClassification`, `trust_remote_code=True`: the modeling file beside the
weights), ONNX Runtime fp32 and int8 (`electra export --onnx --int8`, dynamic quantisation).
Shapes: latency at batch 1, lengths 32 and 128 (median ms per call over `--repeats` calls after
`--warmup`); throughput at batch 32 x 128 (sequences/s, median over repeats). Inputs are random
non-special token ids, unpadded. Accuracy: SST-2 dev with each model in PyTorch and in the int8
graph (the fp32 graph equals PyTorch within 1e-4, checked at export).
Threads: `--threads` (default: all cores) for torch and ONNX Runtime alike; run it alone.

    python -m benchmarks.inference                      # ~15 min on 2 cores
    python -m benchmarks.inference --quick              # smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from benchmarks.finetune_speed import SHARED, VOCAB_CORPUS
from electra.cli import main as electra
from electra.config import PretrainConfig
from electra.data.vocab import train_vocab
from electra.exporting.onnx import export_onnx
from electra.exporting.serving import INPUT_NAMES, load_served, tokenized_batch
from electra.fileutil import write_atomic
from electra.model.encoder import init_weights
from electra.model.hf import save_pretrained
from electra.model.networks import Discriminator
from electra.tasks import get_task
from electra.tokenizer import load_tokenizer, special_token_ids

PRESETS = ("tiny-local", "small")
SHAPES = (("latency_b1_len32_ms", 1, 32), ("latency_b1_len128_ms", 1, 128),
          ("throughput_b32_len128_seq_per_s", 32, 128))
RUNTIMES = ("pytorch", "transformers", "onnx_fp32", "onnx_int8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/inference_bench"))
    p.add_argument("--encoder", action="append", default=[], metavar="PRESET=DIR",
                   help="fine-tune PRESET's classifier from this pre-trained discriminator")
    p.add_argument("--glue", type=Path, default=SHARED / "glue")
    p.add_argument("--train-examples", type=int, default=8000,
                   help="SST-2 training examples for fine-tuning (1 epoch)")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--quick", action="store_true", help="smoke run: 200 examples, 3 repeats")
    args = p.parse_args(argv)
    if args.quick:
        args.train_examples, args.repeats, args.warmup = 200, 3, 1
    return args


def vocabulary(work: Path) -> Path:
    if (work / "vocab" / "tokenizer.json").is_file():
        return work / "vocab"
    return train_vocab([str(p) for p in VOCAB_CORPUS], 30522, work / "vocab",
                       show_progress=False, overwrite=True)


def start_model(args: argparse.Namespace, preset: str) -> Path:
    given = dict(item.split("=", 1) for item in args.encoder)
    if preset in given:
        return Path(given[preset])
    out = args.work / f"{preset}-random"
    if not (out / "model.safetensors").is_file():
        vocab = vocabulary(args.work)
        cfg = PretrainConfig.from_preset(preset).model
        cfg.vocab_size = load_tokenizer(vocab).get_vocab_size()
        torch.manual_seed(0)
        model = Discriminator(cfg)
        init_weights(model, cfg.initializer_range)
        save_pretrained(model, out, vocab)
    return out


def cache_name(args: argparse.Namespace, preset: str) -> str:
    """What a cached classifier depends on: the preset, its start model (path, size and time
    of its weights), the GLUE folder and the training set's size."""
    given = dict(item.split("=", 1) for item in args.encoder).get(preset)
    key = [str(args.glue.resolve())]
    if given is not None:
        weights = Path(given) / "model.safetensors"
        stat = weights.stat() if weights.is_file() else None
        key += [str(weights.resolve()), str(stat and (stat.st_size, stat.st_mtime_ns))]
    digest = hashlib.sha1("|".join(key).encode()).hexdigest()[:8]
    return f"{preset}-{'random' if given is None else 'from'}-{digest}-n{args.train_examples}"


def classifier(args: argparse.Namespace, preset: str) -> Path:
    out = args.work / f"{cache_name(args, preset)}-sst2"
    if not (out / "model" / "finetune.json").is_file():
        argv = ["finetune", "--model", start_model(args, preset), "--task", "SST-2",
                "--data", args.glue, "--out", out, "--max-train-examples", args.train_examples,
                "--epochs", "1", "--seeds", "1", "--layerwise-decay", "1.0", "--quiet"]
        if electra([str(a) for a in argv]) != 0:
            raise SystemExit(f"fine-tuning {preset} failed")
    return out / "model"


def onnx_export(args: argparse.Namespace, preset: str, model: Path) -> Path:
    out = args.work / f"{cache_name(args, preset)}-onnx"
    if not (out / "model.int8.onnx").is_file():
        export_onnx(model, out, int8=True, overwrite=True)
    return out


def runners(model: Path, onnx_dir: Path, threads: int) -> dict[str, Callable]:
    """Each runtime as a function of a batch dict -> logits (numpy)."""
    import onnxruntime
    from transformers import AutoModelForSequenceClassification

    served = load_served(model).module
    hf = AutoModelForSequenceClassification.from_pretrained(model, trust_remote_code=True).eval()

    def session(path: Path):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        s = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return lambda b: s.run(None, {n: b[n].numpy() for n in INPUT_NAMES})[0]

    @torch.no_grad()
    def pytorch(b):
        return served(*(b[n] for n in INPUT_NAMES))[0].numpy()

    @torch.no_grad()
    def transformers_(b):
        return hf(**b).logits.numpy()

    return {"pytorch": pytorch, "transformers": transformers_,
            "onnx_fp32": session(onnx_dir / "model.onnx"),
            "onnx_int8": session(onnx_dir / "model.int8.onnx")}


def random_batch(batch: int, length: int, vocab_size: int, first_ordinary_id: int
                 ) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * 1000 + length)
    ids = torch.randint(first_ordinary_id, vocab_size, (batch, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "token_type_ids": torch.zeros_like(ids)}


def time_calls(run: Callable, batch: dict, repeats: int, warmup: int) -> float:
    """Median seconds per call."""
    for _ in range(warmup):
        run(batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def dev_accuracy(run: Callable, model: Path, glue: Path) -> float:
    task = get_task("SST-2")
    task.load_state(json.loads((model / "finetune.json").read_text())["task"])
    examples = task.read(glue, "dev")
    tokenizer = load_tokenizer(model)
    correct = 0
    for start in range(0, len(examples), 32):
        chunk = examples[start:start + 32]
        batch = tokenized_batch(tokenizer, [ex.texts[0] for ex in chunk], 128)
        predictions = np.argmax(run(batch), axis=-1)
        correct += sum(task.labels[p] == ex.label for p, ex in zip(predictions, chunk,
                                                                   strict=True))
    return correct / len(examples)


def bench_model(args: argparse.Namespace, preset: str) -> dict:
    model = classifier(args, preset)
    onnx_dir = onnx_export(args, preset, model)
    run = runners(model, onnx_dir, args.threads)
    tokenizer = load_tokenizer(model)
    vocab_size = tokenizer.get_vocab_size()
    first_ordinary = max(special_token_ids(tokenizer).values()) + 1
    result: dict = {"model": str(model), "runtimes": {}}
    for name in RUNTIMES:
        row = {}
        for key, batch_size, length in SHAPES:
            batch = random_batch(batch_size, length, vocab_size, first_ordinary)
            seconds = time_calls(run[name], batch, args.repeats, args.warmup)
            row[key] = round(1000 * seconds, 3) if key.startswith("latency") else \
                round(batch_size / seconds, 1)
        result["runtimes"][name] = row
    accuracy = {name: dev_accuracy(run[name], model, args.glue)
                for name in ("pytorch", "onnx_int8")}
    result["sst2_dev_accuracy"] = {**accuracy,
                                   "int8_change": accuracy["onnx_int8"] - accuracy["pytorch"]}
    result["onnx_files_mb"] = {p.name: round(p.stat().st_size / 2**20, 2)
                               for p in sorted(onnx_dir.glob("*.onnx"))}
    return result


def markdown(results: dict) -> str:
    lines = ["| model | runtime | batch 1 x 32 (ms) | batch 1 x 128 (ms) | batch 32 x 128 "
             "(seq/s) |", "|---|---|---|---|---|"]
    for preset, r in results["models"].items():
        for name, row in r["runtimes"].items():
            lines.append(f"| {preset} | {name} | " + " | ".join(
                f"{row[key]:,}" for key, _, _ in SHAPES) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    results = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or
               platform.machine(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
               "threads": args.threads, "repeats": args.repeats,
               "torch": torch.__version__,
               "models": {preset: bench_model(args, preset) for preset in PRESETS}}
    results["markdown"] = markdown(results)
    write_atomic(args.work / "results.json", json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()

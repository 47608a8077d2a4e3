"""Fine-tuning and evaluation examples/s of the `small` preset on SST-2 and SQuAD windows.

What is timed is what `electra finetune` runs: a training step is collation + forward (bf16
autocast or not) + backward + the shared update: clipping, non-finite guard, AdamW, schedule
(`finetune.training.train_step`);
an evaluation pass is `finetune.evaluation.predict_examples` over a dev set (tokenization,
length-sorted batches, forward without gradient, post-processing back to labels or answer text,
input order restored). The model is ELECTRA-Small (Table 5.1, vocabulary 30,522) from random
initialisation: speed does not depend on the weights. Text is tokenized with a 30,522-token
WordPiece vocabulary trained on the NLTK corpora in ../shared/data/corpus (`--tokenizer DIR`
to use your own), so sequence lengths are close to BERT's uncased vocabulary.

Training: the same fixed list of batches (an epoch's first `steps` batches, seed 1) for fp32 and
bf16, run once untimed (so every shape has been seen: kernels are chosen per shape) and then
timed; medians of the per-step rates and the total (examples / seconds) over the timed steps.
Batches are length-sorted as in training (the default); fp32 is also timed on plain random
batches, and padding per example is reported for a whole epoch both ways. Evaluation: one
untimed pass, then the median of `--eval-repeats`. SQuAD: windows of `--squad-seq-len` tokens
(384 by default: the toolkit's default, as in BERT's SQuAD runs; the papers do not state theirs;
`--squad-seq-len 512` for the longest the position table allows), stride 128, questions up to
64 tokens, training targets from each question's first answer.

One torch thread by default (`--threads`): on a machine shared with other jobs, two OpenMP
threads waiting for a busy core make steps several times slower and the numbers meaningless.

    python -m benchmarks.finetune_speed              # ~5 min on 2 CPU cores
    python -m benchmarks.finetune_speed --quick      # smoke run (seconds)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.shared_data import SHARED
from electra.config import PretrainConfig
from electra.data.vocab import train_vocab
from electra.finetuning.data import feature_lengths, padded_tokens, train_batches
from electra.finetuning.evaluation import predict_examples
from electra.finetuning.heads import FinetuneModel
from electra.finetuning.optim import build_optimizer
from electra.finetuning.settings import FinetuneSettings
from electra.finetuning.training import train_step
from electra.model.encoder import Encoder, init_weights
from electra.runtime.skeleton import StepLoop, Update
from electra.runtime.speed import configure_process_for_speed
from electra.tasks import Task, get_task
from electra.tasks.base import Example
from electra.tokenizer import load_tokenizer

VOCAB_CORPUS = [SHARED / "corpus" / "nltk" / f"{n}.jsonl.gz"
                for n in ("reuters", "brown_untagged", "gutenberg")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", type=Path, help="tokenizer directory (default: train a "
                   "30,522-token WordPiece vocabulary on the NLTK corpora, ~10 s)")
    p.add_argument("--glue", type=Path, default=SHARED / "glue")
    p.add_argument("--squad", type=Path, default=SHARED / "squad",
                   help="directory with dev-v1.1.json(.gz)")
    p.add_argument("--preset", default="small")
    p.add_argument("--batch-size", type=int, default=32, help="training batch (Table 5.2)")
    p.add_argument("--eval-batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=10, help="timed SST-2 training steps")
    p.add_argument("--squad-steps", type=int, default=5, help="timed SQuAD training steps")
    p.add_argument("--squad-seq-len", type=int, default=384)
    p.add_argument("--squad-questions", type=int, default=1000,
                   help="questions featurized for SQuAD training batches and padding stats")
    p.add_argument("--squad-eval-questions", type=int, default=200)
    p.add_argument("--eval-repeats", type=int, default=3)
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, to check the script runs")
    args = p.parse_args(argv)
    if args.quick:
        args.preset, args.steps, args.squad_steps = "tiny", 2, 1
        args.squad_questions, args.squad_eval_questions, args.eval_repeats = 64, 16, 1
    return args


def tokenizer_dir(args: argparse.Namespace, work: Path) -> Path:
    if args.tokenizer:
        return args.tokenizer
    return train_vocab([str(p) for p in VOCAB_CORPUS], 30522, work / "vocab",
                       show_progress=False, overwrite=True)


def new_model(preset: str, task: Task, seed: int = 0) -> FinetuneModel:
    cfg = dataclasses.replace(PretrainConfig.from_preset(preset).model, vocab_size=30522)
    torch.manual_seed(seed)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg.initializer_range)
    return FinetuneModel(encoder, task.head_kind, task.num_outputs)


def time_training(preset: str, task: Task, features: list[dict], batches: list[list[int]],
                  bf16: bool) -> dict:
    """Per-step wall time of `train_step` over `batches`, after an untimed pass over them."""
    model = new_model(preset, task)
    model.train()
    opt, sched = build_optimizer(model, 3e-4, 0.8, model.encoder.config.num_hidden_layers,
                                 2 * len(batches), 0.1, "dissertation", 0.0, 1e-6)
    update = Update(opt, sched, list(model.parameters()), max_grad_norm=1.0)
    loop = StepLoop(2 * len(batches))
    times, sizes, padded = [], [], []
    for timed in (False, True):
        for idx in batches:
            start = time.perf_counter()
            batch = task.collate([features[i] for i in idx])
            train_step(model, task, batch, loop, update, "bf16" if bf16 else "fp32")
            loop.end_step()
            elapsed = time.perf_counter() - start
            if timed:
                times.append(elapsed)
                sizes.append(len(idx))
                padded.append(batch["input_ids"].numel())
    rates = [n / t for n, t in zip(sizes, times, strict=True)]
    return {"examples_per_s_median": round(statistics.median(rates), 2),
            "examples_per_s_total": round(sum(sizes) / sum(times), 2),
            "step_seconds_median": round(statistics.median(times), 4),
            "timed_steps": len(times),
            "padded_tokens_per_batch_mean": round(statistics.fmean(padded), 1)}


def time_eval(preset: str, task: Task, examples: list[Example], tokenizer, max_seq_len: int,
              eval_batch_size: int, repeats: int, bf16: bool) -> dict:
    model = new_model(preset, task)
    settings = FinetuneSettings(eval_batch_size=eval_batch_size, max_seq_len=max_seq_len,
                                precision="bf16" if bf16 else "fp32")
    device = torch.device("cpu")
    predict_examples(model, task, examples, tokenizer, settings, device)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        predict_examples(model, task, examples, tokenizer, settings, device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"examples_per_s": round(len(examples) / seconds, 2),
            "pass_seconds_median": round(seconds, 3), "examples": len(examples)}


def padding_stats(lengths: list[int], batch_size: int) -> dict:
    """Padding tokens per example over one epoch, length-sorted and plain random batches."""
    out = {"real_tokens_per_example": round(statistics.fmean(lengths), 2)}
    for name, sort in (("sorted", True), ("random", False)):
        batches = train_batches(lengths, batch_size, torch.Generator().manual_seed(1), sort)
        out[f"pad_per_example_{name}"] = round(padded_tokens(lengths, batches) / len(lengths), 2)
    return out


def bench_task(name: str, args, task: Task, train_feats: list[dict], eval_examples: list,
               tokenizer, max_seq_len: int, steps: int, dtypes: list[str]) -> dict:
    lengths = feature_lengths(train_feats)
    sorted_batches = train_batches(lengths, args.batch_size,
                                   torch.Generator().manual_seed(1))[:steps]
    plain = train_batches(lengths, args.batch_size, torch.Generator().manual_seed(1),
                          False)[:steps]
    out: dict = {"train_features": len(train_feats), "max_seq_len": max_seq_len,
                 "padding": padding_stats(lengths, args.batch_size), "train": {}, "eval": {}}
    for dtype in dtypes:
        bf16 = dtype == "bf16"
        print(f"[{name}] training {dtype}", flush=True)
        out["train"][dtype] = time_training(args.preset, task, train_feats, sorted_batches,
                                            bf16)
        print(f"[{name}] evaluation {dtype}", flush=True)
        out["eval"][dtype] = time_eval(args.preset, task, eval_examples, tokenizer, max_seq_len,
                                       args.eval_batch_size, args.eval_repeats, bf16)
    print(f"[{name}] training fp32, random (unsorted) batches", flush=True)
    out["train"]["fp32_unsorted"] = time_training(args.preset, task, train_feats, plain, False)
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    process = configure_process_for_speed()
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_tokenizer(tokenizer_dir(args, Path(tmp)))
    result: dict = {
        "benchmark": "finetune_speed", "preset": args.preset, "vocab_size": 30522,
        "batch_size": args.batch_size, "eval_batch_size": args.eval_batch_size,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "process": process,
    }

    sst = get_task("SST-2")
    train = sst.read(args.glue, "train")
    dev = sst.read(args.glue, "dev")
    if args.quick:
        train, dev = train[:2000], dev[:64]
    feats = sst.featurize(train, tokenizer, 128)
    result["sst2"] = bench_task("SST-2", args, sst, feats, dev, tokenizer, 128, args.steps,
                                dtypes)

    squad = get_task("squad")
    examples = [dataclasses.replace(ex, index=i) for i, ex in
                enumerate(squad.read(args.squad, "dev")[:args.squad_questions])]
    feats = squad.featurize(examples, tokenizer, args.squad_seq_len)
    res = bench_task("SQuAD", args, squad, feats, examples[:args.squad_eval_questions],
                     tokenizer, args.squad_seq_len, args.squad_steps, dtypes)
    res["questions"] = len(examples)
    windows = len(squad.featurize(examples[:args.squad_eval_questions], tokenizer,
                                  args.squad_seq_len))
    for r in res["eval"].values():  # examples are questions; windows are what the model sees
        r["windows"] = windows
        r["windows_per_s"] = round(windows / r["pass_seconds_median"], 2)
    result["squad_v1.1_windows"] = res
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

"""PLL scoring speed on BLiMP sentences: Electric's one pass vs a masked LM's n passes
(dissertation 5.4.5: "Electric ... scores all input tokens simultaneously rather than having
to be run multiple times with different tokens masked out"), and optionally BLiMP accuracy of
trained models. Prints one JSON object.

Speed uses random-initialised models of one encoder size (default the `tiny` preset) and a
WordPiece vocabulary trained here on the BLiMP sentences, so it needs nothing but the data:

    python -m benchmarks.scoring --sentences 500
    python -m benchmarks.scoring --device cuda --bf16

Accuracy of `tiny` MLM, Electric and ELECTRA-TT models pre-trained here for the same FLOP
budget (`--pretrain-budget N` = the FLOPs of N tiny ELECTRA steps, see equal_budget.py) on the
English text of ../shared/data/corpus, cached under --work:

    python -m benchmarks.scoring --skip-speed --pretrain-budget 1500 --limit 100

Accuracy of given pre-trained models (any subset; --limit pairs per paradigm):

    python -m benchmarks.scoring --skip-speed --limit 100 --mlm runs/mlm/final/generator \
        --electric runs/electric/final/discriminator \
        --electra-tt runs/tt/final/discriminator --tt-generator runs/tt/final/generator
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from electra.config import get_preset
from electra.data.vocab import train_vocab
from electra.model.encoder import init_weights
from electra.model.networks import Discriminator, Generator
from electra.scoring import ElectraTTScorer, ElectricScorer, MlmScorer, load_scorer
from electra.scoring.minimal_pairs import evaluate_minimal_pairs, read_minimal_pairs
from electra.tokenizer import load_tokenizer

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared/data/blimp/blimp.jsonl.gz"


def blimp_sentences(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    return [s for r in rows for s in (r["sentence_good"], r["sentence_bad"])]


def sample(sentences: list[str], n: int) -> list[str]:
    """n sentences spread evenly over the file (all paradigms), deterministic."""
    step = max(1, len(sentences) // n)
    return sentences[::step][:n]


def timed(scorer, texts: list[str], batch_size: int, sync, repeats: int) -> float:
    """Median seconds of `repeats` passes over `texts`, after one untimed pass: the first pass
    meets every batch shape for the first time (GPU kernel selection, allocator growth)."""
    scorer.pll(texts, batch_size)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        scorer.pll(texts, batch_size)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed(args, device: torch.device, sync) -> dict:
    all_sentences = blimp_sentences(args.data)
    texts = sample(all_sentences, args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "blimp.txt"
        corpus.write_text("\n".join(all_sentences) + "\n", encoding="utf-8")
        vocab_dir = train_vocab([corpus], args.vocab_size, Path(tmp) / "vocab",
                                show_progress=False)
        tokenizer = load_tokenizer(vocab_dir)
    preset = get_preset(args.preset)
    cfg = preset.model
    cfg.vocab_size = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    disc, mlm = Discriminator(cfg), Generator(cfg)  # the same encoder size
    for model in (disc, mlm):
        init_weights(model, cfg.initializer_range)
    max_len = cfg.max_position_embeddings
    scorers = {
        "electric": (ElectricScorer(disc, tokenizer, max_len, device, args.bf16), args.batch_size),
        "mlm": (MlmScorer(mlm, tokenizer, max_len, device, args.bf16), args.mlm_batch_size),
    }
    try:
        from electra.model.two_tower import TwoTowerGenerator

        two_tower = TwoTowerGenerator(cfg.scaled(preset.generator_multiplier))
        init_weights(two_tower, cfg.initializer_range)
        scorers["electra-tt"] = (ElectraTTScorer(disc, two_tower, tokenizer, max_len,
                                                 preset.mask_prob, device, args.bf16),
                                 args.batch_size)
    except ModuleNotFoundError:
        pass
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    out: dict = {"sentences": len(texts), "tokens_scored": sum(lengths),
                 "mean_tokens": round(sum(lengths) / len(texts), 2), "preset": args.preset,
                 "vocab_size": cfg.vocab_size, "repeats": args.repeats, "scorers": {}}
    for name, (scorer, batch_size) in scorers.items():
        seconds = timed(scorer, texts, batch_size, sync, args.repeats)
        passes = sum(lengths) if name == "mlm" else len(texts)
        out["scorers"][name] = {"seconds": round(seconds, 3),
                                "sentences_per_s": round(len(texts) / seconds, 1),
                                "tokens_per_s": round(sum(lengths) / seconds, 1),
                                "sequences_through_transformer": passes,
                                "batch_size": batch_size}
    s = out["scorers"]
    out["electric_speedup_over_mlm"] = round(
        s["electric"]["sentences_per_s"] / s["mlm"]["sentences_per_s"], 2)
    return out


def accuracy(args, device: str) -> dict:
    pairs = read_minimal_pairs(args.data, args.limit)
    runs = {"mlm": (args.mlm, None), "electric": (args.electric, None),
            "electra-tt": (args.electra_tt, args.tt_generator)}
    out = {}
    for name, (model_dir, generator) in runs.items():
        if model_dir is None:
            continue
        scorer = load_scorer(model_dir, generator, name, device, args.bf16)
        start = time.perf_counter()
        batch = args.mlm_batch_size if name == "mlm" else args.batch_size
        result = evaluate_minimal_pairs(scorer, pairs, batch)
        seconds = time.perf_counter() - start
        out[name] = {"model": model_dir, "accuracy": round(result["accuracy"], 4),
                     "macro_accuracy": round(result["macro_accuracy"], 4),
                     "by_field": {k: round(v["accuracy"], 4)
                                  for k, v in result["by_field"].items()},
                     "pairs": result["pairs"], "seconds": round(seconds, 1)}
    return out


def pretrain_scoring_models(args) -> dict:
    """Pre-train mlm, electric and electra-tt at one budget; fill args.mlm etc. with their
    exports and return each run's steps and FLOPs."""
    from benchmarks import equal_budget as eb
    from benchmarks.shared_data import SHARED

    data = eb.prepare_data(args.work, SHARED / "corpus", args.vocab_size)
    vocab_size = eb.vocab_size_of(data)
    budget = eb.budget_flops(args.pretrain_budget, vocab_size)
    runs = {}
    for objective in ("mlm", "electric", "electra-tt"):
        steps = eb.steps_for_budget(budget, objective, vocab_size)
        summary = eb.pretrain_run(args.work, objective, eb.run_config(objective, steps), data)
        runs[objective] = {"steps": steps, "train_flops": summary["flops"],
                           "train_seconds": round(summary["train_seconds"], 1)}
        final = summary["final"]
        if objective == "mlm":
            args.mlm = final["model"]
        elif objective == "electric":
            args.electric = final["discriminator"]
        else:
            args.electra_tt, args.tt_generator = final["discriminator"], final["generator"]
    return {"budget_flops": budget, "electra_steps": args.pretrain_budget, "runs": runs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--sentences", type=int, default=500)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=64, help="one-pass scorers: sentences")
    p.add_argument("--mlm-batch-size", type=int, default=256, help="MLM: masked copies")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's; "
                   "use 1 on a small shared CPU, where waiting threads dominate)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes (median reported)")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--limit", type=int, default=100, help="accuracy: pairs per paradigm")
    p.add_argument("--mlm")
    p.add_argument("--electric")
    p.add_argument("--electra-tt")
    p.add_argument("--tt-generator")
    p.add_argument("--pretrain-budget", type=int, help="pre-train tiny mlm/electric/electra-tt "
                   "for the FLOPs of N tiny ELECTRA steps, then measure their BLiMP accuracy")
    p.add_argument("--work", type=Path, default=Path("runs/scoring"))
    args = p.parse_args()
    if not args.data.is_file():
        sys.exit(f"BLiMP data not found: {args.data}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    result: dict = {
        "benchmark": "pll_scoring", "device": str(device),
        "device_name": (torch.cuda.get_device_name(0) if device.type == "cuda"
                        else platform.processor() or platform.machine()),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "bf16": args.bf16,
    }
    if not args.skip_speed:
        result["speed"] = speed(args, device, sync)
    if args.pretrain_budget:
        result["pretraining"] = pretrain_scoring_models(args)
    if args.mlm or args.electric or args.electra_tt:
        result["blimp_accuracy"] = accuracy(args, args.device)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

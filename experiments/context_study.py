"""What makes a small discriminator learn context? Measured ablations
(docs/experiments/collapse.md).

Every variant pre-trains `tiny` on the demo's Wikipedia text (or --corpus) and is scored by
the held-out probes of `electra.pretraining.heldout`: the discriminator's AUC on *fixed* unigram-
sampled replacements (only context can tell them apart) and uniform ones. Beside them, a
count-based detector with no learning: bigram PMI from the training split's counts, on the same
probe. Runs are cached per variant under WORK/runs/NAME and resumed when interrupted; the
table is WORK/results.md, and the JSON is printed.

    .venv/bin/python -m experiments.context_study --work runs/context_study [--only a,b]

It also holds the efficiency ladder's objectives and the generator sizes with the CPU recipe
(`mlm+alibi-steep`, ..., `base-rate+alibi-steep-gen0.25`, ...), so a run on the recipe's data
(`--corpus`, `--budget-steps 9000`) compares with its ELECTRA runs at equal FLOPs
(docs/experiments/ladder.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from electra.config import PRESETS, PretrainConfig
from electra.data.dataset import PretrainingDataset
from electra.objectives import objective_step_flops
from electra.pretraining.heldout import build_fixed_corruptions
from electra.pretraining.loop import pretrain, special_ids_for
from electra.settings import resolve
from experiments.common import LADDER, LADDER_LABELS

# name -> (overrides as --set would give them, what it tests). Budgets are equal in training
# FLOPs to the baseline's STEPS tiny ELECTRA steps (variants with another step cost get
# `train.steps` scaled by `equal_flops_steps`).
BIGRAM_WEIGHT = 0.9
# The budget: the training FLOPs of BUDGET_STEPS steps of the demo's tiny ELECTRA (batch 32 x
# 128). Every variant trains for as many of its own steps as that buys (at least 1).
BUDGET_STEPS = 600
BASE = {"train.batch_size": 32, "train.learning_rate": 1e-3}
# What the `tiny-local` preset changes in `tiny` (electra.config.PRESETS).
ALIBI_STEEP = {"model.position_bias": "alibi", "model.alibi_max_slope": 1.0}
TINY_LOCAL = {"objective.disc_bias_init": "base-rate", **ALIBI_STEEP}
VARIANTS: dict[str, tuple[dict, str]] = {
    "electra": ({}, "tiny ELECTRA as `electra demo --preset tiny` runs it (lr 1e-3)"),
    "unigram-sampler": ({"objective.generator": "unigram"},
                        "no generator: the discriminator trained on unigram fakes directly"),
    "alibi": ({"model.position_bias": "alibi"}, "ALiBi attention bias (a locality prior)"),
    "base-rate-bias": ({"objective.disc_bias_init": "base-rate"},
                       "discriminator output bias starts at the log-odds of mask_prob"),
    "alibi-steep": (ALIBI_STEEP,
                    "ALiBi with slopes 1 and 1/16 (one head local from step 0)"),
    "base-rate+alibi-steep": (TINY_LOCAL, "both: no pressure to collapse, and a local head"),
    "base-rate+alibi-steep-4heads": ({**TINY_LOCAL, "model.num_attention_heads": 4},
                                     "both, with 4 heads of 32 (slopes 1, 1/4, 1/16, 1/64)"),
    "base-rate+alibi-steep-lr2e-3": ({**TINY_LOCAL, "train.learning_rate": 2e-3},
                                     "both, peak learning rate 2e-3"),
    "init-0.088": ({"model.initializer_range": 0.088},
                   "init std 1/sqrt(hidden) instead of 0.02"),
    "lr-3e-3": ({"train.learning_rate": 3e-3}, "peak learning rate 3e-3"),
    "batch-128": ({"train.batch_size": 128}, "the official small batch, 1/4 of the steps"),
    "mask-25": ({"objective.mask_prob": 0.25}, "25% masking (ELECTRA-Large's rate)"),
    "sharing-all-w1": ({"objective.sharing": "all", "objective.generator_multiplier": 1.0,
                        "objective.disc_weight": 1.0},
                       "one network for MLM and RTD, discriminator weight 1: MLM gradients "
                       "shape the shared features"),
}
# The efficiency ladder (Table 5.7) and generator-size sweep (section 5.3.2) with the CPU
# recipe, on the same data as its ELECTRA runs (`base-rate+alibi-steep`), so their transfer
# compares at equal FLOPs. The other objectives keep tiny-local's ALiBi encoder with a zero
# head bias: the base-rate bias is defined for ELECTRA's all-token head only (as
# `benchmarks/equal_budget.run_config` sets it for the ladder).
def ladder_variant(objective: str) -> str:
    """The variant that runs one of the ladder's objectives with the CPU recipe."""
    return "base-rate+alibi-steep" if objective == "electra" else f"{objective}+alibi-steep"


def generator_variant(size: float) -> str:
    """The variant of tiny-local ELECTRA with a generator `size` times the discriminator's
    width (0.5 is tiny-local's own)."""
    return "base-rate+alibi-steep" if size == 0.5 else f"base-rate+alibi-steep-gen{size:g}"


GENERATOR_SIZES = (0.125, 0.25, 0.5, 1.0)  # section 5.3.2's sweep at tiny scale
# What the `tiny-modern` preset changes in `tiny`: ModernBERT's architecture, a generator as wide
# and half as deep (docs/experiments/modern.md).
TINY_MODERN = {
    **{f"model.{key}": value
       for key, value in dataclasses.asdict(PRESETS["tiny-modern"].model).items()
       if getattr(PRESETS["tiny"].model, key) != value},
    "objective.generator_multiplier": PRESETS["tiny-modern"].generator_multiplier,
    "objective.generator_layers": PRESETS["tiny-modern"].generator_layers}
VARIANTS.update({
    "modern": (TINY_MODERN, "tiny-modern: ModernBERT's architecture with ELECTRA"),
    "mlm+modern": ({**TINY_MODERN, "objective.name": "mlm"},
                   "tiny-modern with BERT's MLM, equal FLOPs"),
})
VARIANTS.update({
    ladder_variant(objective): (
        {"objective.name": objective, **ALIBI_STEEP},
        f"the ladder's {LADDER_LABELS[objective]} with tiny-local's encoder (zero head bias), "
        "equal FLOPs")
    for objective in LADDER if objective != "electra"})
VARIANTS.update({
    generator_variant(size): (
        {**TINY_LOCAL, "objective.generator_multiplier": size},
        f"tiny-local with a generator {size:g} times the discriminator's width, equal FLOPs")
    for size in GENERATOR_SIZES if size != 0.5})


def bigram_pmi_auc(train: PretrainingDataset, probes, weight: float = BIGRAM_WEIGHT
                   ) -> dict[str, float]:
    """AUC of a detector with no learning, only training-split counts: how much less likely a
    token is next to its neighbours than on its own, -[log P(x|prev) - log P(x)
    + log P(next|x) - log P(next)], each P(b|a) the bigram estimate interpolated with the
    unigram one (weight `weight` on the bigram)."""
    vocab = train.vocab_size
    unigram = np.zeros(vocab, dtype=np.float64)
    pairs: dict[int, float] = {}
    for i in range(len(train)):
        ids = np.asarray(train.example(i)[0], dtype=np.int64)
        unigram += np.bincount(ids, minlength=vocab)
        uniq, counts = np.unique(ids[:-1] * vocab + ids[1:], return_counts=True)
        for k, c in zip(uniq.tolist(), counts.tolist(), strict=True):
            pairs[k] = pairs.get(k, 0.0) + c
    p_uni = (unigram + 1.0) / (unigram + 1.0).sum()

    def pmi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        joint = np.array([pairs.get(int(k), 0.0) for k in (a * vocab + b)])
        p_cond = weight * joint / np.maximum(unigram[a], 1.0) + (1.0 - weight) * p_uni[b]
        return np.log(p_cond) - np.log(p_uni[b])

    out = {}
    for kind, probe in probes.items():
        ids = probe.input_ids.numpy()
        scores, labels = [], []
        for row in range(ids.shape[0]):
            pos = np.nonzero(probe.scored[row].numpy())[0]
            seq = ids[row]
            scores.append(-(pmi(seq[pos - 1], seq[pos]) + pmi(seq[pos], seq[pos + 1])))
            labels.append(probe.is_replaced[row].numpy()[pos])
        out[f"heldout_auc_{kind}"] = float(roc_auc_score(np.concatenate(labels),
                                                         np.concatenate(scores)))
    return out


def read_probes(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if "heldout_auc_unigram" in r or "heldout_mlm_acc" in r]


def variant_config(overrides: dict, seed: int, seq_len: int, vocab_size: int,
                   budget_steps: int = BUDGET_STEPS) -> PretrainConfig:
    """The variant's config, its steps set to what the budget buys and warm-up 10% of them."""
    def build(extra: dict) -> PretrainConfig:
        cfg = PretrainConfig.from_preset("tiny")
        resolve({"model": cfg.model, "objective": cfg.objective, "train": cfg.train}, None, {},
                [f"{key}={json.dumps(value)}"
                 for key, value in {**BASE, "train.seed": seed, **extra}.items()])
        cfg.model.vocab_size = vocab_size
        return cfg

    def step_flops(cfg: PretrainConfig) -> float:
        return sum(objective_step_flops(cfg.model, cfg.objective, cfg.train.batch_size,
                                        seq_len).values())

    budget = budget_steps * step_flops(build({}))
    cfg = build(overrides)
    cfg.train.steps = max(1, round(budget / step_flops(cfg)))
    cfg.train.warmup_steps = max(1, cfg.train.steps // 10)
    return cfg


def run_variant(name: str, overrides: dict, data_dir: Path, work: Path, seed: int,
                budget_steps: int = BUDGET_STEPS) -> dict:
    budget_tag = "" if budget_steps == BUDGET_STEPS else f"-b{budget_steps}"
    run = work / "runs" / f"{name}{budget_tag}-s{seed}"
    data = PretrainingDataset(data_dir, "train")
    cfg = variant_config(overrides, seed, data.seq_len, data.vocab_size, budget_steps)
    steps = cfg.train.steps
    cfg.train.eval_every = max(1, steps // 8)
    cfg.train.save_every = max(1, steps // 4)
    cfg.train.log_every = 50
    done = (run / "summary.json").exists()
    if not done:
        started = time.perf_counter()
        summary = pretrain(cfg, data_dir, run, resume=(run / "settings.json").exists(),
                           show_progress=sys.stderr.isatty())
        summary["wall_seconds"] = time.perf_counter() - started
        (run / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    summary = json.loads((run / "summary.json").read_text())
    probes = read_probes(run)
    return {"name": name + budget_tag, "seed": seed, "steps": summary["steps"],
            "flops": summary["flops"], "train_seconds": summary["train_seconds"], "curve": probes,
            "final": probes[-1] if probes else {}}


def prepare_data(work: Path, corpus: list[str] | None) -> Path:
    """The demo's vocabulary and 128-token shards (2% held out), built once under WORK."""
    from electra.data.prepare import prepare_corpus
    from electra.data.vocab import train_vocab
    from electra.demo.corpus import fetch_wiki_corpus
    from electra.demo.run import HELDOUT_FRACTION, SEQ_LEN

    data_dir = work / "data"
    if (data_dir / "manifest.json").exists():
        return data_dir
    corpus = corpus or [str(fetch_wiki_corpus())]
    bars = sys.stderr.isatty()  # progress bars on a terminal only, not in nohup logs
    train_vocab(corpus, 8192, work / "vocab", overwrite=True, show_progress=bars)
    prepare_corpus(corpus, work / "vocab", SEQ_LEN, data_dir, seed=1,
                   heldout_fraction=HELDOUT_FRACTION, overwrite=True, show_progress=bars)
    return data_dir


def count_baseline(work: Path, data_dir: Path) -> dict[str, float]:
    cache = work / "bigram_pmi.json"
    if cache.exists():
        return json.loads(cache.read_text())
    train = PretrainingDataset(data_dir, "train")
    heldout = PretrainingDataset(data_dir, "heldout")
    probes = build_fixed_corruptions(heldout, train.token_counts(), special_ids_for(data_dir))
    result = bigram_pmi_auc(train, probes)
    cache.write_text(json.dumps(result) + "\n")
    return result


def probe_curve(curve: list[dict]) -> str:
    """Unigram-fake AUC at each probe after step 0; a run with no discriminator (the MLM
    objectives) has none, so its held-out MLM accuracy stands there, marked as such."""
    if any("heldout_auc_unigram" in p for p in curve):
        key, label = "heldout_auc_unigram", ""
    else:
        key, label = "heldout_mlm_acc", "MLM accuracy: "
    return label + " ".join(f"{p.get(key, float('nan')):.2f}" for p in curve[1:])


def markdown(rows: list[dict], counts: dict[str, float]) -> str:
    lines = ["| variant | what it tests | steps | train FLOPs | minutes | unigram-fake AUC, "
             "at each probe (every 1/8 of the run) | final uniform-fake AUC | final token cosine |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        final = r["final"]
        lines.append(f"| {r['name']} (seed {r['seed']}) | {r['what']} | {r['steps']} | "
                     f"{r['flops']:.2e} | {r['train_seconds'] / 60:.1f} | "
                     f"{probe_curve(r['curve'])} | "
                     f"{final.get('heldout_auc_uniform', float('nan')):.3f} | "
                     f"{final.get('heldout_token_cosine', float('nan')):.2f} |")
    lines.append(f"| bigram counts | no learning: training-split counts | 0 | 0 | - | "
                 f"{counts['heldout_auc_unigram']:.3f} | {counts['heldout_auc_uniform']:.3f} "
                 "| - |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/context_study")
    parser.add_argument("--only", help="comma-separated variant names (default: all)")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds (default: 1)")
    parser.add_argument("--corpus", nargs="+", help="text instead of the demo's Wikipedia")
    parser.add_argument("--budget-steps", type=int, default=BUDGET_STEPS,
                        help="the budget in steps of the demo's tiny ELECTRA (default "
                             f"{BUDGET_STEPS}; runs with another budget are cached apart)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    data_dir = prepare_data(work, args.corpus)
    counts = count_baseline(work, data_dir)
    rows = []
    for name in names:
        overrides, what = VARIANTS[name]
        for seed in (int(s) for s in args.seeds.split(",")):
            row = run_variant(name, overrides, data_dir, work, seed, args.budget_steps)
            rows.append({**row, "what": what})
            (work / "results.md").write_text(markdown(rows, counts))
    result = {"bigram_pmi": counts,
              "runs": [{k: v for k, v in r.items() if k != "curve"} for r in rows]}
    (work / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

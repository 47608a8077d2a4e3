"""Shared by the studies (experiments/) and the benchmarks that compare objectives at equal
training compute (benchmarks/scoring.py): one vocabulary
and one packed data set from the English text of ../shared/data/corpus, and `tiny` pre-training
runs whose step counts buy the same FLOPs (dissertation section 5.2.2: objectives are compared
at equal compute, so a cheaper objective trains for more steps, as BERT does in Table 5.1).

The budget is expressed in steps of the reference, tiny ELECTRA with a 1/2-width generator at
batch 32 x 128; runs are cached under WORK/pretrain/NAME and resume if interrupted.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from electra.config import PretrainConfig
from electra.data.prepare import prepare_corpus
from electra.data.vocab import train_vocab
from electra.objectives import objective_step_flops
from electra.pretraining.loop import pretrain

SEQ_LEN = 128
CORPUS = ("wikitext-2/wiki.valid.tokens", "wikitext-2/wiki.test.tokens",
          "nltk/reuters.jsonl.gz", "nltk/gutenberg.jsonl.gz", "nltk/brown_untagged.jsonl.gz",
          "nltk/state_union.jsonl.gz", "nltk/inaugural.jsonl.gz", "nltk/abc.jsonl.gz",
          "nltk/webtext.jsonl.gz")


def log(msg: str) -> None:
    print(f"[{Path(sys.argv[0]).stem} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr,
          flush=True)


def pin_settings(work: Path, settings: dict) -> None:
    """Runs under WORK are cached by name, so WORK belongs to one set of the settings that
    change what a run is: recorded on first use in WORK/settings.json, refused if different."""
    path = work / "settings.json"
    if path.is_file():
        pinned = json.loads(path.read_text())
        changed = {k: (pinned.get(k), v) for k, v in settings.items() if pinned.get(k) != v}
        if changed:
            diffs = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in changed.items())
            raise SystemExit(f"{work} holds runs made with other settings ({diffs}); "
                             "use another --work")
    else:
        work.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, indent=2) + "\n")


def prepare_data(work: Path, corpus_dir: Path, vocab_size: int = 8192,
                 show_progress: bool = False) -> Path:
    """WORK/vocab and WORK/data (1% held out), built once."""
    files = [corpus_dir / name for name in CORPUS]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"corpus files missing: {', '.join(missing)}")
    vocab, data = work / "vocab", work / "data"
    if not (vocab / "vocab.txt").is_file():
        log(f"training a {vocab_size}-word vocabulary")
        train_vocab([str(f) for f in files], vocab_size, vocab, show_progress=show_progress)
    if not (data / "manifest.json").is_file():
        log(f"packing the corpus into {SEQ_LEN}-token examples")
        prepare_corpus([str(f) for f in files], vocab, SEQ_LEN, data, heldout_fraction=0.01,
                       show_progress=show_progress)
    return data


def run_config(objective: str, steps: int, generator_multiplier: float = 0.5,
               lr: float | None = None, bf16: bool = False, preset: str = "tiny"
               ) -> PretrainConfig:
    """`preset` is tiny or tiny-local (same sizes and FLOPs; tiny-local adds ALiBi, and the
    base-rate discriminator bias, which its preset gives the electra objective only)."""
    cfg = PretrainConfig.from_preset(preset)
    cfg.objective.name = objective
    cfg.objective.generator_multiplier = generator_multiplier
    cfg.train.steps = steps
    cfg.train.warmup_steps = max(1, steps // 10)
    cfg.train.log_every = max(1, steps // 20)
    cfg.train.save_every = max(1, steps // 4)  # resumable if the benchmark is interrupted
    cfg.train.precision = "bf16" if bf16 else "fp32"  # the same numbers on every CPU
    if lr:
        cfg.train.learning_rate = lr
    return cfg


def step_cost(cfg: PretrainConfig, vocab_size: int) -> float:
    cfg.model.vocab_size = vocab_size
    return sum(objective_step_flops(cfg.model, cfg.objective, cfg.train.batch_size,
                                    SEQ_LEN).values())


def vocab_size_of(data: Path) -> int:
    return json.loads((data / "manifest.json").read_text())["vocab_size"]


def budget_flops(electra_steps: int, vocab_size: int) -> float:
    return electra_steps * step_cost(run_config("electra", 1), vocab_size)


def steps_for_budget(budget: float, objective: str, vocab_size: int,
                     generator_multiplier: float = 0.5) -> int:
    per_step = step_cost(run_config(objective, 1, generator_multiplier), vocab_size)
    return max(1, int(budget // per_step))


def pretrain_run(work: Path, name: str, cfg: PretrainConfig, data: Path, device: str = "auto",
                 show_progress: bool = False) -> dict:
    """Pre-train (or resume, or reuse) WORK/pretrain/NAME; returns the run summary, whose
    `final` lists the exported directories (the first is the encoder to fine-tune)."""
    out = work / "pretrain" / name
    summary_path = out / "summary.json"
    if summary_path.is_file():
        return json.loads(summary_path.read_text())
    log(f"pre-training {name} ({cfg.objective.name}): {cfg.train.steps} steps")
    summary = pretrain(cfg, data, out, resume=(out / "settings.json").exists(), device=device,
                       show_progress=show_progress)
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary

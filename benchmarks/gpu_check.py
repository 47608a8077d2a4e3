"""The GPU check: one prepared command for a few minutes on a GPU machine, already tested on CPU.

Four stages, each written to OUT/gpu_check.json as soon as it ends (a stage that fails is
recorded with its error and the next one runs, so one run returns all it can):
1. throughput: our pre-training step against the `transformers` recipe (the code of
   `benchmarks.pretrain_throughput --device cuda --compile --compile-step --peers`),
   ELECTRA-Small and -Base at lengths 128 and 512, bf16: ours eager, with compiled layers and as
   one whole-step CUDA graph (`electra.pretraining.step.WholeStep`), the reference, and
   transformers' BERT-Base and ModernBERT-base masked LMs at the same tokens per step;
   tokens/s, sequences/s, MFU in both conventions, peak memory, GPU-busy share and kernels per
   step (profiled), ratios of our sides to the others, and the bf16 matmul ceiling at the
   step's own shapes;
2. pretrain: ELECTRA-Small with the paper's preset (batch 128, lr 5e-4, generator 1/4 width)
   for as many steps as `--pretrain-minutes` allow at the step time stage 1 measured, with the
   held-out probes every tenth of the run (unigram-fake AUC, generator accuracy); the warm-up
   is a tenth of the steps (the paper's 10,000 would not end in a run this short);
3. curves: the pre-training curves as OUT/pretrain_curves.png (`electra plot`);
4. finetune: SST-2, one epoch on `--finetune-examples` sentences, from that model and from
   random weights of the same shape.

The GPU machine has torch, transformers, tokenizers, matplotlib and scikit-learn but cannot
reach anything (no ../shared, no package index): `--prepare` builds everything the run reads
into one folder to carry (a 30,522-token WordPiece vocabulary, the NLTK corpora + WikiText-2 +
25,000 IMDB reviews packed at length 128, SST-2); it prints its size, which must leave room
under the device's 64 MiB limit on what travels:

    python -m benchmarks.gpu_check --prepare .gpu_bundle              # here, once (~5 min)
    PYTHONPATH=src:. python3 -m benchmarks.gpu_check --bundle .gpu_bundle --out $OUT   # there
    python -m benchmarks.gpu_check --cpu-dry-run --out runs/gpu_dry   # same code paths, toy
                                                                       # sizes, CPU, < 2 min

`--cpu-dry-run` runs every stage on a CPU at toy sizes (the `tiny` preset, a 1,000-token
vocabulary, 20 pre-training steps, fp32, no `torch.compile`: the whole step runs eagerly, the
peers at a tiny shape, no profiling), so the GPU run cannot fail on a typo; the tests run it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.shared_data import SHARED, imdb_reviews
from electra.cli import main as electra
from electra.fileutil import write_atomic


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--prepare", type=Path, metavar="BUNDLE",
                      help="build the folder the GPU run reads (on any machine with ../shared)")
    what.add_argument("--bundle", type=Path, help="run the check on a GPU with this folder")
    what.add_argument("--cpu-dry-run", action="store_true",
                      help="run every stage on a CPU at toy sizes (builds its own bundle)")
    p.add_argument("--out", type=Path, help="where gpu_check.json and the PNG go")
    p.add_argument("--work", type=Path, help="runs and checkpoints (default: a temp folder)")
    p.add_argument("--pretrain-minutes", type=float, default=3.0)
    p.add_argument("--finetune-examples", type=int, default=20000)
    p.add_argument("--stages", default="throughput,pretrain,curves,finetune")
    args = p.parse_args(argv)
    if args.prepare is None and args.out is None:
        p.error("--out is needed to run the check")
    return args


# --- the bundle ------------------------------------------------------------------------------


def prepare_bundle(bundle: Path, toy: bool = False) -> Path:
    """Vocabulary, packed pre-training shards and SST-2, from ../shared/data."""
    corpus_dir = SHARED / "corpus"
    bundle.mkdir(parents=True, exist_ok=True)
    if toy:
        corpus = [corpus_dir / "wikitext-2" / "wiki.valid.tokens"]
        vocab_size = 1000
    else:
        imdb = imdb_reviews(corpus_dir, bundle / "imdb_unsup_25k.jsonl")
        corpus = [corpus_dir / "nltk", corpus_dir / "wikitext-2", imdb]
        vocab_size = 30522
    _run(["vocab", "--corpus", *corpus, "--vocab-size", vocab_size, "--out", bundle / "vocab",
          "--overwrite"])
    _run(["prepare", "--corpus", *corpus, "--tokenizer", bundle / "vocab", "--out",
          bundle / "data", "--overwrite"])
    if not toy:
        (bundle / "imdb_unsup_25k.jsonl").unlink()
    sst2 = bundle / "glue" / "SST-2"
    sst2.mkdir(parents=True, exist_ok=True)
    for name in ("train.tsv", "dev.tsv"):
        shutil.copyfile(SHARED / "glue" / "SST-2" / name, sst2 / name)
    return bundle


def _run(argv: list) -> None:
    if electra([str(a) for a in argv]) != 0:
        raise RuntimeError(f"electra {' '.join(map(str, argv))} failed")


# --- stages ----------------------------------------------------------------------------------


def throughput(args: argparse.Namespace, device: torch.device, toy: bool) -> dict:
    from benchmarks.pretrain_throughput import H100_BF16_DENSE_TFLOPS, device_report

    settings = argparse.Namespace(
        rounds=2 if toy else 10, warmup=1 if toy else 3, compile=not toy, compile_step=True,
        peers=True, batch_size=4 if toy else None, vocab_size=1000 if toy else 30522,
        no_padding=False, peak_tflops=H100_BF16_DENSE_TFLOPS)
    presets, lengths = (["tiny"], [32]) if toy else (["small", "base"], [128, 512])
    return device_report(settings, presets, lengths, ["fp32" if toy else "bf16"], device)


def pretrain(args: argparse.Namespace, bundle: Path, work: Path, device: torch.device,
             toy: bool, step_seconds: float | None) -> dict:
    """As many steps as the budget allows at the measured step time (1.2x for evaluation
    and checkpoints), 200 to 20,000."""
    if toy:
        steps = 20
    elif step_seconds:
        steps = int(min(20000, max(200, 60 * args.pretrain_minutes / (1.2 * step_seconds))))
    else:
        steps = 2000
    out = work / "pretrain"
    argv = ["pretrain", "--preset", "tiny" if toy else "small", "--data", bundle / "data",
            "--out", out, "--steps", steps, "--warmup-steps", max(1, steps // 10),
            "--eval-every", steps // 2 if toy else steps // 10,
            "--log-every", max(1, steps // 50),
            "--save-every", steps, "--device", device.type, "--quiet",
            *(["--batch-size", 8] if toy else ["--bf16"])]
    started = time.perf_counter()
    _run(argv)
    seconds = time.perf_counter() - started
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    probes = [{k: r[k] for k in ("step", "heldout_auc_unigram", "heldout_gen_acc",
                                 "heldout_disc_acc") if k in r}
              for r in records if any(k.startswith("heldout_") for k in r)]
    train = [r for r in records if "tokens_per_s" in r]
    return {"steps": steps, "wall_s": round(seconds, 1),
            "steps_per_s": round(steps / seconds, 2),
            "tokens_per_s_logged": train[-1]["tokens_per_s"] if train else None,
            "final_train": {k: train[-1][k] for k in ("loss", "gen_acc", "disc_acc")
                            if train and k in train[-1]},
            "heldout_probes": probes, "model": str(out / "final" / "discriminator")}


def finetune(args: argparse.Namespace, bundle: Path, work: Path, device: torch.device,
             toy: bool) -> dict:
    from electra.model.encoder import init_weights
    from electra.model.hf import load_pretrained, save_pretrained
    from electra.model.networks import Discriminator

    pretrained = work / "pretrain" / "final" / "discriminator"
    model = load_pretrained(pretrained)
    torch.manual_seed(0)
    random_init = Discriminator(model.config)
    init_weights(random_init, model.config.initializer_range)
    save_pretrained(random_init, work / "random-init", pretrained)
    results = {}
    for name, source in (("pretrained", pretrained), ("random_init", work / "random-init")):
        out = work / f"sst2-{name}"
        argv = ["finetune", "--model", source, "--task", "SST-2", "--data", bundle / "glue",
                "--out", out, "--epochs", 1, "--seeds", 1, "--device", device.type,
                "--max-train-examples", 64 if toy else args.finetune_examples, "--quiet",
                *(["--max-eval-examples", 64] if toy else ["--bf16"])]
        started = time.perf_counter()
        _run(argv)
        result = json.loads((out / "results.json").read_text())
        results[name] = {"dev_accuracy": result["median"]["accuracy"],
                         "wall_s": round(time.perf_counter() - started, 1)}
    return results


# --- the run ---------------------------------------------------------------------------------


def run_check(args: argparse.Namespace) -> dict:
    toy = args.cpu_dry_run
    device = torch.device("cpu" if toy else "cuda")
    if not toy and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here (use --cpu-dry-run on a CPU)")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    bundle = prepare_bundle(work / "bundle", toy=True) if toy else args.bundle
    report: dict = {"dry_run": toy, "device": torch.cuda.get_device_name() if not toy else
                    "cpu", "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                    "stages": {}}
    started = time.perf_counter()

    def stage(name: str, fn: Callable[[], dict]) -> dict | None:
        if name not in args.stages.split(","):
            return None
        t0 = time.perf_counter()
        try:
            result = fn()
            report["stages"][name] = {"ok": True, "seconds": round(time.perf_counter() - t0, 1),
                                      **result}
        except Exception as e:  # record it and go on: the next stage may still run
            report["stages"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                      "traceback": traceback.format_exc()[-2000:]}
            result = None
        report["wall_s"] = round(time.perf_counter() - started, 1)
        write_atomic(args.out / "gpu_check.json", json.dumps(report, indent=1) + "\n")
        print(f"gpu_check: {name} {'ok' if result is not None else 'FAILED'} "
              f"({report['wall_s']} s)", file=sys.stderr)
        return result

    speed = stage("throughput", lambda: throughput(args, device, toy))
    step_seconds = None
    if speed and "step_s" in speed["runs"][0]["ours"]:  # else: ours failed, recorded
        first = speed["runs"][0]["ours"]
        step_seconds = first["step_s"]["median"] * 128 / speed["runs"][0]["batch_size"]
    stage("pretrain", lambda: pretrain(args, bundle, work, device, toy, step_seconds))
    if (work / "pretrain" / "metrics.jsonl").is_file():
        stage("curves", lambda: curves(work / "pretrain", args.out / "pretrain_curves.png"))
    stage("finetune", lambda: finetune(args, bundle, work, device, toy))
    return report


def curves(run: Path, png: Path) -> dict:
    _run(["plot", run, "--out", png, "--metrics",
          "loss,gen_acc,disc_acc,heldout_auc_unigram,heldout_gen_acc"])
    return {"png": str(png)}


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.prepare is not None:
        prepare_bundle(args.prepare)
        size = sum(p.stat().st_size for p in args.prepare.rglob("*") if p.is_file())
        print(json.dumps({"bundle": str(args.prepare), "megabytes": round(size / 2**20, 1)}))
        return None
    report = run_check(args)
    print(json.dumps({name: s.get("ok") for name, s in report["stages"].items()}))
    return report


if __name__ == "__main__":
    main()

"""Resume soak: one tiny pre-training run, interrupted again and again, must end exactly where
an uninterrupted run ends.

The run is `electra pretrain` in a subprocess (fp32, CPU, one thread). It is killed with
SIGKILL at --kills random steps and stopped with SIGTERM at --sigterms random steps, in a
random order, and resumed with `--resume` after each; a kill lands at a random moment inside a
step, checkpoint writes included. Checks: every SIGTERM exits with status 75 and leaves a
checkpoint of the step it names; every SIGKILL resumes from the latest complete checkpoint;
the final discriminator and generator are bit-identical to the uninterrupted run's, and so is
every metrics line but speed (logged every step). Prints one JSON object.

    python -m benchmarks.resume_soak                 # 3 kills + 2 SIGTERMs, about a minute
    python -m benchmarks.resume_soak --kills 20      # the soak, a few minutes
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from electra.data.prepare import prepare_corpus
from electra.data.vocab import train_vocab
from electra.errors import EXIT_PREEMPTED
from electra.runtime import checkpoint

TINY = {
    "preset": "tiny",
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"generator_multiplier": 0.5},
    "train": {"batch_size": 8, "learning_rate": 1e-3, "warmup_steps": 4, "log_every": 1,
              "eval_every": 0, "keep_checkpoints": 2, "seed": 3},
}


def make_data(work: Path, seed: int) -> Path:
    """A synthetic corpus of pseudo-words, a 400-token vocabulary, 32-token examples."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "tas", "vor", "qui", "zel", "pha", "dun", "bre"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3)))
             for _ in range(300)]
    corpus = work / "corpus.txt"
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(400):
            for _ in range(rng.randint(1, 4)):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) + ".\n")
            f.write("\n")
    vocab = train_vocab([corpus], 400, work / "vocab", show_progress=False)
    prepare_corpus([corpus], vocab, 32, work / "data", show_progress=False)
    return work / "data"


class Runner:
    def __init__(self, data: Path, config: Path, steps: int, save_every: int) -> None:
        self.env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.argv = [sys.executable, "-m", "electra.cli", "pretrain", "--config", str(config),
                     "--data", str(data), "--quiet", "--device", "cpu", "--steps", str(steps),
                     "--save-every", str(save_every)]

    def start(self, out: Path, resume: bool) -> subprocess.Popen:
        return subprocess.Popen([*self.argv, "--out", str(out), *(["--resume"] * resume)],
                                env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)


def logged_step(out: Path) -> int:
    """The last step in OUT/metrics.jsonl (0 before the first line)."""
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, json.JSONDecodeError, KeyError, IndexError):
        return 0


def latest_step(out: Path) -> int:
    path = checkpoint.find_latest(out) if (out / "checkpoints").exists() else None
    return checkpoint.read_meta(path)["step"] if path is not None else 0


def interrupt(runner: Runner, out: Path, resume: bool, sig: signal.Signals, at: int,
              rng: random.Random, step_s: float) -> dict:
    """Start (or resume) the run, wait until step `at` is logged, sleep a random part of a
    step, send `sig`; report what happened."""
    before = latest_step(out)
    proc = runner.start(out, resume)
    while proc.poll() is None and logged_step(out) < at:
        time.sleep(0.005)
    time.sleep(rng.uniform(0, step_s))
    if proc.poll() is None:
        proc.send_signal(sig)
    _, err = proc.communicate()
    event = {"signal": sig.name, "after_logged_step": at, "resumed_from": before,
             "rc": proc.returncode, "latest_checkpoint": latest_step(out)}
    if sig == signal.SIGTERM:
        event["ok"] = proc.returncode == EXIT_PREEMPTED and (
            f"after step {event['latest_checkpoint']} of" in err)
        event["stderr"] = err.strip()
    else:
        event["ok"] = proc.returncode == -signal.SIGKILL
    return event


def final_tensors(out: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {name: load_file(str(out / "final" / name / "model.safetensors"))
            for name in ("discriminator", "generator")}


def metrics(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=3, help="SIGKILLs at random steps")
    ap.add_argument("--sigterms", type=int, default=2, help="SIGTERMs at random steps")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="of the kill points")
    ap.add_argument("--work", help="working directory (default: a temporary one, removed)")
    args = ap.parse_args()
    if args.kills < 0 or args.sigterms < 0 or args.save_every < 1:
        ap.error("--kills and --sigterms must be >= 0, --save-every >= 1")
    if args.kills + args.sigterms >= args.steps - 1:
        ap.error("--steps must exceed the number of interruptions + 1")

    started = time.perf_counter()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = make_data(work, args.seed)
        config = work / "tiny.json"
        config.write_text(json.dumps(TINY))
        runner = Runner(data, config, args.steps, args.save_every)

        reference = work / "reference"
        ref = runner.start(reference, resume=False)
        _, err = ref.communicate()
        if ref.returncode != 0:
            sys.exit(f"reference run failed: {err.strip()}")
        tokens = TINY["train"]["batch_size"] * 32
        step_s = statistics.median(tokens / json.loads(line)["tokens_per_s"] for line in
                                   (reference / "metrics.jsonl").read_text().splitlines())

        # Distinct steps, in order; each interruption happens after the previous resume.
        points = sorted(rng.sample(range(1, args.steps - 1), args.kills + args.sigterms))
        kinds = [signal.SIGKILL] * args.kills + [signal.SIGTERM] * args.sigterms
        rng.shuffle(kinds)
        out = work / "soaked"
        events = [interrupt(runner, out, i > 0, sig, at, rng, step_s)
                  for i, (sig, at) in enumerate(zip(kinds, points, strict=True))]
        last = runner.start(out, resume=bool(events))
        _, err = last.communicate()
        if last.returncode != 0:
            sys.exit(f"final resume failed: {err.strip()}")

        a, b = final_tensors(reference), final_tensors(out)
        identical = all(a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k])
                                                           for k in a[n]) for n in a)
        report = {
            "benchmark": "resume_soak",
            "settings": {"steps": args.steps, "save_every": args.save_every,
                         "kills": args.kills, "sigterms": args.sigterms, "seed": args.seed,
                         "model": "tiny (hidden 32, 2 layers), batch 8 x 32, fp32, 1 thread"},
            "interruptions": events,
            "all_interruptions_as_expected": all(e["ok"] for e in events),
            "weights_bit_identical": identical,
            "metrics_identical_but_speed": metrics(reference) == metrics(out),
            "wall_s": round(time.perf_counter() - started, 1),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

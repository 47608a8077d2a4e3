"""The identity battery's runs: the shared inputs both sides reuse, and the `electra` commands
of each run. Kept small: the whole battery takes about 2 minutes on 2 cores."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from digest import Normalizer, digest_tree, sha256_file


@dataclass(frozen=True)
class Places:
    """Where the battery reads and writes, and how it starts `electra` and Python."""

    src: Path  # the src/ directory under test
    out: Path  # OUTDIR: one folder per run, identity.json
    data: Path  # the repository's ../shared/data
    shared: Path  # corpus, vocabulary and prepared data, made once for both sides
    scratch: Path  # the commands' working directory
    electra: tuple[str, ...]  # the `electra` command
    python: str

    def tags(self) -> dict[Path, str]:
        """The absolute paths a record shows as tags, so that it does not depend on them."""
        return {self.out: "<OUT>", self.src: "<SRC>", self.scratch: "<SCRATCH>",
                self.shared: "<SHARED>", self.data: "<DATA>"}

    def shown(self, argv: list[str]) -> list[str]:
        """argv as a record shows it: `electra ...`, `python ...`, whatever the interpreter."""
        n = len(self.electra)
        if tuple(argv[:n]) == self.electra:
            return ["electra", *argv[n:]]
        if argv[:1] == [self.python]:
            return ["python", *argv[1:]]
        return list(argv)


# The files of ../shared/data the runs read (checked before anything starts).
DATA_FILES = ("corpus/aclImdb/train.jsonl.gz", "glue/RTE", "glue/SST-2", "conll2000")

# --warmup-steps 4: past the warm-up (the presets' is 100), so the decay is exercised too
PRETRAIN_COMMON = ["--steps", "20", "--warmup-steps", "4", "--batch-size", "8", "--log-every", "2",
                   "--save-every", "10", "--eval-every", "10", "--seed", "1", "--device", "cpu",
                   "--fp32", "--quiet"]
CPU = ["--device", "cpu", "--fp32", "--quiet"]
CVT_SMALL = ["--set", "cvt.word_dim=50", "--set", "cvt.char_filters=20", "--set", "cvt.lstm1=64",
             "--set", "cvt.lstm2=32", "--set", "cvt.projection=64", "--set", "cvt.hidden=64",
             "--set", "cvt.batch_size=16", "--set", "cvt.max_unlabeled_len=40",
             "--set", "cvt.warmup_steps=5"]
CVT_STEPS = 20
CVT_UNLABELED = ["--max-unlabeled", "600"]


def base_env(src: Path) -> dict[str, str]:
    """The environment of every command: the sources under test first, CPU, one thread, fixed
    string hashing; the caller's ELECTRA_*, torch and thread settings removed."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ELECTRA_", "TORCH", "CUDA", "OMP_", "MKL_", "PYTORCH"))}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false",
               PYTHONDONTWRITEBYTECODE="1", TQDM_DISABLE="1", PYTHONPATH=str(src))
    return env


def ensure_shared(places: Places) -> dict:
    """Corpus, vocabulary and prepared data in places.shared, made once under a lock and reused
    by every run of either side: WordPiece training is not deterministic from one run to the
    next, and a different vocabulary changes everything after it. Returns their digests."""
    shared = places.shared
    shared.mkdir(parents=True, exist_ok=True)
    env = base_env(places.src)
    corpus = shared / "corpus.jsonl"
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not corpus.exists():
            # every 80th IMDB training review (both labels): 313 documents, ~430 KB
            with gzip.open(places.data / "corpus/aclImdb/train.jsonl.gz", "rt") as f:
                lines = [line for i, line in enumerate(f) if i % 80 == 0]
            tmp = corpus.with_suffix(".tmp")
            tmp.write_text("".join(lines))
            tmp.rename(corpus)
        steps = [
            ("vocab", [*places.electra, "vocab", "--corpus", str(corpus), "--vocab-size", "8000"]),
            ("data", [*places.electra, "prepare", "--corpus", str(corpus), "--tokenizer",
                      str(shared / "vocab"), "--seq-len", "128", "--seed", "1",
                      "--workers", "1"]),
        ]
        rebuilt = False
        for name, argv in steps:
            final, done = shared / name, shared / f"{name}.done"
            if done.exists() and not rebuilt:
                continue
            rebuilt = True  # what follows is made from it: make it again too
            shutil.rmtree(final, ignore_errors=True)  # an unfinished earlier attempt
            argv = argv + ["--out", str(final)]
            r = subprocess.run(argv, env=env, cwd=places.scratch, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"check: creating {final} failed:\n{r.stdout}\n{r.stderr}")
            done.write_text(" ".join(argv) + "\n")
    norm = Normalizer(places.tags())
    return {"corpus.jsonl": sha256_file(corpus),
            "vocab": digest_tree(shared / "vocab", norm),
            "data": digest_tree(shared / "data", norm)}


class Task:
    """One run: its commands in order (a resumed run has two), the runs it needs first."""

    def __init__(self, name: str, commands: list[list[str]], deps: tuple[str, ...] = ()):
        self.name, self.commands, self.deps = name, commands, deps
        self.done = threading.Event()
        self.ok = False


def help_choices(places: Places, command: str, flag: str) -> list[str]:
    """The choices `electra COMMAND --help` lists for FLAG: every preset and objective of the
    sources under test, whichever they are."""
    r = subprocess.run([*places.electra, command, "--help"], env=base_env(places.src),
                       cwd=places.scratch, capture_output=True, text=True, check=True)
    m = re.search(re.escape(flag) + r"\s+\{([^}]*)\}", r.stdout)
    if not m:
        sys.exit(f"check: no {flag} choices in `electra {command} --help`")
    return [c.strip() for c in m.group(1).split(",")]


# `electra flops` for every (preset, objective), through the `electra` entry point
# (electra.cli.main), in one process: 64 process start-ups would take minutes on 2 cores.
FLOPS_DRIVER = r"""
import contextlib, io, json, sys
from electra.cli import main
rows = []
for preset, objective in json.loads(sys.argv[1]):
    argv = ["flops", "--preset", preset, "--objective", objective]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    text = out.getvalue().strip()
    try:
        row = json.loads(text)
    except ValueError:
        row = text
    rows.append({"argv": ["electra", *argv], "rc": rc, "row": row,
                 "stderr": err.getvalue().strip()})
print(json.dumps(rows))
"""


def build_tasks(places: Places) -> list[Task]:
    electra, out, data = places.electra, places.out, places.data
    presets = help_choices(places, "flops", "--preset")
    objectives = help_choices(places, "flops", "--objective")
    pre_presets = help_choices(places, "pretrain", "--preset")
    prepared = str(places.shared / "data")
    corpus = str(places.shared / "corpus.jsonl")
    tasks: list[Task] = []

    def pretrain(name: str, *extra: str) -> list[str]:
        return [*electra, "pretrain", "--data", prepared, "--out", str(out / name), *extra,
                *PRETRAIN_COMMON]

    def cvt(name: str, *extra: str) -> list[str]:
        return [*electra, "cvt", "--tasks", "chunk", "--data", str(data / "conll2000"),
                "--train-sentences", "400", "--seed", "1", *CVT_SMALL, *CPU, *extra,
                "--out", str(out / name)]

    tasks.append(Task("pretrain_tiny", [pretrain("pretrain_tiny", "--preset", "tiny")]))
    combos = [[p, o] for p in presets for o in objectives]
    tasks.append(Task("flops", [[places.python, "-c", FLOPS_DRIVER, json.dumps(combos)]]))
    tasks.append(Task("prepare", [[*electra, "prepare", "--corpus", corpus,
                                   "--tokenizer", str(places.shared / "vocab"),
                                   "--seq-len", "128", "--seed", "1", "--workers", "1",
                                   "--out", str(out / "prepare")]]))
    unlabeled = ["--unlabeled", corpus, *CVT_UNLABELED]
    save = ["--save-every", "10"]
    tasks.append(Task("cvt_cvt", [cvt("cvt_cvt", *unlabeled, "--steps", str(CVT_STEPS), *save)]))
    tasks.append(Task("cvt_resume", [
        cvt("cvt_resume", *unlabeled, "--steps", str(CVT_STEPS // 2), *save),
        cvt("cvt_resume", *unlabeled, "--steps", str(CVT_STEPS), *save, "--resume")]))
    tasks.append(Task("pretrain_tiny_mlm", [pretrain("pretrain_tiny_mlm", "--preset", "tiny",
                                                     "--objective", "mlm")]))
    tasks.append(Task("pretrain_tiny_local", [pretrain("pretrain_tiny_local",
                                                       "--preset", "tiny-local")]))
    if "tiny-modern" in pre_presets:
        tasks.append(Task("pretrain_tiny_modern", [pretrain("pretrain_tiny_modern",
                                                            "--preset", "tiny-modern")]))
    resume = [*electra, "pretrain", "--data", prepared, "--out", str(out / "pretrain_resume"),
              "--preset", "tiny", "--warmup-steps", "4", "--batch-size", "8", "--log-every", "2",
              "--save-every", "5", "--eval-every", "10", "--seed", "1", *CPU]
    tasks.append(Task("pretrain_resume", [resume + ["--steps", "10"],
                                          resume + ["--steps", "20", "--resume"]]))
    tasks.append(Task("cvt_sup", [cvt("cvt_sup", "--no-cvt", "--steps", str(CVT_STEPS), *save)]))

    disc = str(out / "pretrain_tiny" / "final" / "discriminator")
    ft = [*electra, "finetune", "--model", disc, "--seeds", "2", "--seed", "1", "--epochs", "2",
          "--batch-size", "16", "--max-seq-len", "64", "--log-every", "2", "--save-all-seeds",
          *CPU]
    tasks.append(Task("finetune_rte", [ft + ["--task", "RTE", "--data", str(data / "glue/RTE"),
                                             "--max-train-examples", "160",
                                             "--max-eval-examples", "100",
                                             "--out", str(out / "finetune_rte")]],
                      deps=("pretrain_tiny",)))
    tasks.append(Task("finetune_chunk", [ft + ["--task", "chunk",
                                               "--data", str(data / "conll2000"),
                                               "--max-train-examples", "200",
                                               "--max-eval-examples", "100",
                                               "--out", str(out / "finetune_chunk")]],
                      deps=("pretrain_tiny",)))
    mt = [*electra, "multitask", "--model", disc, "--tasks", "RTE,SST-2",
          "--data", str(data / "glue"), "--seeds", "1", "--seed", "1", "--epochs", "2",
          "--batch-size", "16", "--max-train-examples", "96", "--max-eval-examples", "96",
          "--max-seq-len", "64", "--log-every", "2", "--bootstrap-samples", "200", *CPU]
    tasks.append(Task("multitask_multi", [mt + ["--strategy", "multi",
                                                "--out", str(out / "multitask_multi")]],
                      deps=("pretrain_tiny",)))
    tasks.append(Task("multitask_single_multi", [mt + ["--strategy", "single-multi",
                                                       "--single-epochs", "1",
                                                       "--single-batch-size", "16",
                                                       "--out",
                                                       str(out / "multitask_single_multi")]],
                      deps=("pretrain_tiny",)))
    return tasks

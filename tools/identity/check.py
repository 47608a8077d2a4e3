"""End-to-end identity battery for a refactoring (docs/development.md, "Checking that a
refactoring changes nothing").

    python tools/identity/check.py SRC OUTDIR [--work DIR] [--data DIR] [--jobs N] [--overwrite]

Runs the `electra` CLI of the sources in SRC (PYTHONPATH=SRC, with the `electra` script beside
this interpreter, else `python -m electra.cli`) on CPU, fp32, one thread per process: FLOPs
counts of every preset and objective, data preparation, pre-training (tiny, MLM, tiny-local,
tiny-modern, a resumed run), fine-tuning (RTE, chunking), BAM multitask (Multi,
Single->Multi) and CVT (supervised, CVT, a resumed run). It writes OUTDIR/identity.json,
{run-name: {file: "sha256:..." or normalized JSON content}}; compare two of them with
compare.py.

The vocabulary, the corpus and the prepared data set are made once in WORK/identity-shared/
(WordPiece training is not deterministic) and reused by every run of either side, so give both
sides the same WORK; the commands run in WORK/identity-scratch/. WORK defaults to OUTDIR's
parent (runs/identity for runs/identity/before and runs/identity/after).

Every run writes into OUTDIR/<run-name>/ (the electra --out of that run); the commands'
stdout/stderr go to OUTDIR/_logs/. Timing fields (seconds, throughput, ETA, ...) are dropped
from JSON; the absolute paths of OUTDIR, SRC, the shared inputs, the scratch directory and the
data are replaced by <OUT>, <SRC>, <SHARED>, <SCRATCH> and <DATA>. Safetensors and .pt files
are recorded by their content (tensors, metadata; checkpoints' only so), model cards as text
(paths replaced), other files by SHA-256.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from battery import DATA_FILES, Places, Task, base_env, build_tasks, ensure_shared
from digest import Normalizer, digest_tree, parse_stdout

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


def electra_command() -> tuple[str, ...]:
    """The `electra` console script of this interpreter's environment (a venv's bin/), else the
    CLI module run by this interpreter."""
    script = Path(sys.executable).with_name("electra")
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    return (sys.executable, "-m", "electra.cli")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path, help="a src/ directory holding the electra package")
    ap.add_argument("outdir", type=Path, help="where the runs and identity.json go")
    ap.add_argument("--work", type=Path, metavar="DIR", default=os.environ.get("IDENTITY_WORK"),
                    help="holds identity-shared/ and identity-scratch/, the same for both "
                         "sides (env IDENTITY_WORK; default: OUTDIR's parent)")
    ap.add_argument("--data", type=Path, metavar="DIR",
                    default=os.environ.get("IDENTITY_DATA", DEFAULT_DATA),
                    help="the real data: IMDB, GLUE RTE and SST-2, CoNLL-2000 (env "
                         "IDENTITY_DATA; default: ../shared/data beside the repository)")
    ap.add_argument("--jobs", type=int, metavar="N",
                    default=int(os.environ.get("IDENTITY_JOBS", "2")),
                    help="runs at a time (each one thread; env IDENTITY_JOBS; default 2)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing OUTDIR")
    ap.add_argument("--only", metavar="RUNS", help="comma-separated run names (debugging)")
    return ap.parse_args(argv)


def places_of(args: argparse.Namespace) -> Places:
    src, out = args.src.resolve(), args.outdir.resolve()
    work = (args.work or args.outdir.parent).resolve()
    places = Places(src=src, out=out, data=Path(args.data).resolve(),
                    shared=work / "identity-shared", scratch=work / "identity-scratch",
                    electra=electra_command(), python=sys.executable)
    if not (src / "electra" / "__init__.py").is_file():
        sys.exit(f"check: {src} holds no electra package")
    for inside in (src, places.shared, places.scratch):
        if inside.is_relative_to(out):
            sys.exit(f"check: OUTDIR {out} holds {inside}: give another OUTDIR or --work")
    missing = [f for f in DATA_FILES if not (places.data / f).exists()]
    if missing:
        sys.exit(f"check: {places.data} lacks {', '.join(missing)} (give --data)")
    return places


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    places = places_of(args)
    src, out = places.src, places.out
    if out.exists() and any(out.iterdir()):
        if not args.overwrite:
            sys.exit(f"check: {out} exists and is not empty (use --overwrite)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "_logs").mkdir()
    places.scratch.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    env = base_env(src)
    r = subprocess.run([places.python, "-c", "import electra, torch, sys; "
                        "print(electra.__file__); print(torch.__version__); "
                        "print(sys.version.split()[0])"],
                       env=env, cwd=places.scratch, capture_output=True, text=True, check=True)
    efile, torch_v, py_v = r.stdout.split("\n")[:3]
    if not Path(efile).resolve().is_relative_to(src):
        sys.exit(f"check: electra imports from {efile}, not from {src}")
    print(f"check: electra from {efile}; torch {torch_v}; python {py_v}", flush=True)

    shared = ensure_shared(places)
    norm = Normalizer(places.tags())
    tasks = build_tasks(places)
    if args.only:
        keep = set(args.only.split(","))
        tasks = [t for t in tasks if t.name in keep]
    by_name = {t.name: t for t in tasks}
    results: dict[str, dict] = {}
    timings: dict[str, float] = {}
    lock = threading.Lock()

    def execute(task: Task) -> None:
        for d in task.deps:
            if d in by_name:
                by_name[d].done.wait()
        rec: dict = {}
        try:
            if any(d in by_name and not by_name[d].ok for d in task.deps):
                rec["_status"] = "skipped: a run it needs failed"
                return
            t0 = time.time()
            rec["_commands"], task.ok = run_task(task, places, env, norm)
            if (out / task.name).is_dir():
                rec.update(digest_tree(out / task.name, norm))
            rec["_status"] = "ok" if task.ok else "FAILED"
            with lock:
                timings[task.name] = round(time.time() - t0, 1)
            print(f"check: {task.name}: {rec['_status']} in {timings[task.name]:.0f}s "
                  f"({time.time() - t_start:.0f}s since start)", flush=True)
        except Exception as e:  # noqa: BLE001 (recorded, the battery goes on)
            rec["_status"] = f"ERROR: {type(e).__name__}: {e}"
            print(f"check: {task.name}: {rec['_status']}", flush=True)
        finally:
            with lock:
                results[task.name] = rec
            task.done.set()

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(execute, tasks))

    identity = {"_shared": shared,
                "_env": {"torch": torch_v, "python": py_v},
                **{t.name: results[t.name] for t in tasks}}
    (out / "identity.json").write_text(json.dumps(identity, indent=1, sort_keys=True) + "\n")
    total = round(time.time() - t_start, 1)
    (out / "timings.json").write_text(json.dumps({"total_seconds": total, "runs": timings},
                                                 indent=1) + "\n")
    failed = [n for n, r in results.items() if r.get("_status") != "ok"]
    print(f"check: wrote {out / 'identity.json'} in {total:.0f}s"
          + (f"; NOT ok: {', '.join(failed)}" if failed else "; every run ok"), flush=True)
    return 1 if failed else 0


def run_task(task: Task, places: Places, env: dict[str, str],
             norm: Normalizer) -> tuple[list[dict], bool]:
    """Runs a task's commands in order, stopping at the first that fails; returns what the
    record shows of each (argv, exit status, parsed stdout) and whether all succeeded."""
    out = places.out
    cmds = []
    for i, argv in enumerate(task.commands):
        rc, stdout = run_cmd(argv, env, out / "_logs" / f"{task.name}.{i}", places.scratch)
        shown = places.shown(argv)
        if shown[:2] == ["python", "-c"]:
            shown[2] = "<flops driver>"
        entry: dict = {"argv": [norm.text(a) for a in shown], "rc": rc}
        if task.name == "flops":
            if rc == 0:
                (out / "flops").mkdir(exist_ok=True)
                with open(out / "flops" / "rows.jsonl", "w") as f:
                    for row in json.loads(stdout):
                        f.write(json.dumps(row) + "\n")
        else:
            entry["stdout"] = parse_stdout(stdout, norm)
        cmds.append(entry)
        if rc != 0:
            return cmds, False
    return cmds, True


def run_cmd(argv: list[str], env: dict[str, str], log_prefix: Path, cwd: Path) -> tuple[int, str]:
    """Runs one command: its stdout returned and logged to LOG_PREFIX.out, its stderr (after the
    command line) to LOG_PREFIX.err."""
    with open(f"{log_prefix}.out", "w") as fo, open(f"{log_prefix}.err", "w") as fe:
        fe.write("$ " + " ".join(argv) + "\n")
        fe.flush()
        r = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=fe, text=True)
        fo.write(r.stdout)
    return r.returncode, r.stdout


if __name__ == "__main__":
    sys.exit(main())

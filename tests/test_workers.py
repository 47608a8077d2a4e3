"""Worker processes started by the library (prepare's tokenizing pool) work from a script with no
`if __name__ == "__main__":` guard, by file and on stdin, with the output `--workers 1` gives;
a worker that dies says how it died."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from electra.data.workers import SpawnedPool, exit_reason

ROOT = Path(__file__).resolve().parents[1]

# What a new user writes: the library called at the top level of a script, from a vocabulary
# to a fine-tuned model.
SCRIPT = """\
import electra
electra.train_vocab(corpus={corpus!r}, vocab_size=300, out={out!r} + "/vocab", quiet=True)
electra.prepare(corpus=[{corpus!r}], tokenizer={tokenizer!r}, seq_len=32,
                workers={workers}, out={out!r} + "/data", quiet=True)
run = electra.pretrain(data={out!r} + "/data", out={out!r} + "/run", steps=2, batch_size=8,
                       precision="fp32", quiet=True, set={tiny!r})
electra.finetune(model=run.discriminator, task="user", text_a="text", label="label",
                 data={user!r}, out={out!r} + "/ft", epochs=1, batch_size=8, precision="fp32",
                 quiet=True)
print("done once")
"""
TINY = {"model.embedding_size": 16, "model.hidden_size": 32, "model.num_hidden_layers": 1,
        "model.intermediate_size": 64, "model.max_position_embeddings": 64}


def _digest(folder: Path) -> dict[str, str]:
    """Each file's SHA-256 but the manifest's (which records the worker count and timings)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file() and p.name != "manifest.json"}


def _run(tmp_path: Path, corpus: Path, tokenizer: Path, name: str, workers: int, stdin: bool
         ) -> Path:
    out = tmp_path / name
    user = tmp_path / "user"
    if not user.is_dir():
        user.mkdir()
        for split, n in (("train", 16), ("dev", 8)):
            (user / f"{split}.tsv").write_text("text\tlabel\n" + "".join(
                f"{'good fine' if i % 2 else 'bad awful'} words {i}\t{i % 2}\n"
                for i in range(n)))
    code = SCRIPT.format(corpus=str(corpus), out=str(out), workers=workers,
                         tokenizer=str(tokenizer), tiny=TINY, user=str(user))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if stdin:
        done = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)
    else:
        script = tmp_path / f"{name}.py"
        script.write_text(code)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("done once") == 1  # the workers never ran the script again
    return out / "data"


@pytest.mark.parametrize("stdin", [False, True], ids=["script-file", "stdin"])
def test_an_unguarded_script_prepares_with_workers_as_with_one(tmp_path, corpus_file,
                                                               vocab_dir, stdin):
    """Each script also trains a vocabulary at the top level, which a worker re-running the
    script would refuse (its output exists); both prepare with one shared tokenizer."""
    one = _run(tmp_path, corpus_file, vocab_dir, "one", workers=1, stdin=stdin)
    two = _run(tmp_path, corpus_file, vocab_dir, "two", workers=2, stdin=stdin)
    assert _digest(one) == _digest(two)
    for folder in ("run/final/discriminator", "ft/model"):  # the same models from both
        assert (one.parent / folder / "model.safetensors").read_bytes() == \
            (two.parent / folder / "model.safetensors").read_bytes()
    assert any(name.endswith(".npy") or "shard" in name for name in _digest(one))


def _die_by_sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _square(x: int) -> int:
    return x * x


def test_a_dead_worker_says_how_it_died():
    with SpawnedPool(1, _die_by_sigkill) as pool:
        future = pool.submit(_square, 3)
        with pytest.raises(BrokenProcessPool):
            future.result(timeout=120)
        error = pool.broken("test", "try again")
    assert "killed by SIGKILL (the kernel's out-of-memory killer sends it)" in str(error)
    assert str(error).endswith("; try again")
    assert sys.modules["__main__"].__dict__.get("__name__") == "__main__"


def test_the_pool_runs_work_and_restores_main():
    main = sys.modules["__main__"]
    with SpawnedPool(2, _square, (1,)) as pool:
        assert [pool.submit(_square, i).result(timeout=120) for i in range(4)] == [0, 1, 4, 9]
    assert sys.modules["__main__"] is main


def test_exit_reasons_in_words():
    assert exit_reason(3) == "exit code 3"
    assert exit_reason(-signal.SIGTERM) == "killed by SIGTERM"
    assert exit_reason(None) == "still running"

"""Training checkpoints, written atomically, verified on load.

Layout: OUT/checkpoints/step_00000500/{model.safetensors, trainer.pt, rng_rank0.pt, ...,
meta.json} and OUT/checkpoints/latest (the name of the newest complete checkpoint). A
checkpoint is written into a temporary directory, renamed into place, and only then does
`latest` move (itself replaced atomically), so a kill at any moment leaves the previous
checkpoint as the latest one. meta.json records every file's size and sha256, so a truncated
or corrupted file is reported on resume instead of silently loaded. A write that fails (a full
disk, any OSError) removes what it wrote and is one ElectraError naming the checkpoint, the
latest complete one and how to continue.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from electra.device import BACKENDS
from electra.errors import ElectraError
from electra.fileutil import (
    install_dir,
    sha256_file,
    space_advice,
    write_atomic,
    write_failure,
)
from electra.runtime.distributed import DistInfo, agree_on_failure

LATEST = "latest"
META = "meta.json"
# How a failed checkpoint tells the user to continue, unless the loop says otherwise.
CONTINUE = "run the same command with --resume auto"


def checkpoint_root(out_dir: Path) -> Path:
    return out_dir / "checkpoints"


def rng_state() -> dict[str, Any]:
    """torch's default generator and, by kind, every available device's (`Backend.get_rng`)."""
    state = {"torch": torch.get_rng_state()}
    for name, backend in BACKENDS.items():
        if backend.get_rng is not None and backend.available():
            state[name] = backend.get_rng()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    for name, backend in BACKENDS.items():
        if name in state and backend.set_rng is not None and backend.available():
            backend.set_rng(state[name])


def step_dir(out_dir: Path, step: int) -> Path:
    """Where the checkpoint of `step` lies once complete."""
    return checkpoint_root(out_dir) / f"step_{step:08d}"


def _temporary_dir(out_dir: Path, step: int) -> Path:
    return checkpoint_root(out_dir) / f".step_{step:08d}.tmp"


def save(out_dir: Path, step: int, write: Callable[[Path], None], meta: dict[str, Any],
         keep: int, info: DistInfo | None = None, *, keep_every: int = 0,
         continue_with: str = CONTINUE) -> Path:
    """The one checkpoint writer of every loop: each process's RNG state, then the main
    process's own files (`write(tmp)`: weights, optimizer, whatever the loop resumes from),
    sealed and moved into place (`commit`). Under torchrun every process calls it and all
    return together, once the checkpoint is complete. Returns its final path.

    `keep`: how many of the newest checkpoints stay; `keep_every` > 0 also keeps every step
    that is a multiple of it (a learning curve's points). A write that fails for lack of space
    or any other OSError leaves no partial files and `latest` where it was, and is an
    ElectraError that ends with `continue_with` (how the loop continues)."""
    main = info is None or info.is_main
    tmp = _temporary_dir(out_dir, step)

    def failed(error: Exception) -> str:
        reason = write_failure(error)
        if reason is None:  # not a write: the others stop too; this process raises the error
            return (f"{out_dir}: writing checkpoint step {step} failed on process "
                    f"{info.rank if info is not None else 0} ({type(error).__name__})")
        return (f"{out_dir}: {reason} while writing checkpoint step {step} (partial files "
                f"removed); {_latest_phrase(out_dir)}; {space_advice(reason)} and "
                f"{continue_with}")

    # Three phases, each ending where every process learns whether one failed (under torchrun
    # a process that stopped alone would leave the others waiting): the directory exists before
    # any other process writes into it, the RNG states are written, the main process's files.
    phases = [(lambda: begin(out_dir, step)) if main else None,
              lambda: write_rng(tmp, info.rank if info is not None else 0),
              (lambda: (write(tmp), commit(tmp, out_dir, step, meta, keep,
                                           keep_every=keep_every))) if main else None]
    for phase in phases:
        message, own = None, None
        try:
            if phase is not None:
                phase()
        except Exception as error:
            message, own = failed(error), error
        message = agree_on_failure(message, info)
        if message is not None:
            if main:
                _remove_partial(out_dir, step)
            if own is not None and write_failure(own) is None:
                raise own
            raise ElectraError(message) from own
    return step_dir(out_dir, step)


def _remove_partial(out_dir: Path, step: int) -> None:
    """What a failed write of `step` left: its temporary directory, and the step's directory
    if it was moved into place but `latest` does not name it yet."""
    shutil.rmtree(_temporary_dir(out_dir, step), ignore_errors=True)
    final = step_dir(out_dir, step)
    if final.is_dir() and latest_name(out_dir) != final.name:
        shutil.rmtree(final, ignore_errors=True)


def _latest_phrase(out_dir: Path) -> str:
    name = latest_name(out_dir)
    if name is None:
        return "no complete checkpoint yet"
    return f"the latest complete checkpoint is step {step_of(name)}"


def latest_name(out_dir: Path) -> str | None:
    """The directory name `latest` points to (unverified), or None."""
    try:
        return (checkpoint_root(out_dir) / LATEST).read_text().strip() or None
    except OSError:
        return None


def step_of(name: str) -> int:
    """The step of a checkpoint directory's name (step_00000500 -> 500)."""
    return int(name.rsplit("_", 1)[1])


def begin(out_dir: Path, step: int) -> Path:
    """Create the temporary directory a checkpoint is written into (rank 0), deleting what an
    interrupted write of any step left (it holds space and is never read)."""
    root = checkpoint_root(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".step_*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = _temporary_dir(out_dir, step)
    tmp.mkdir()
    return tmp


def write_rng(tmp: Path, rank: int) -> None:
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")


def write_main(tmp: Path, model: nn.Module, optimizer, scheduler, step: int,
               untied: bool = False, scaler: torch.amp.GradScaler | None = None) -> None:
    """`scaler`: fp16's loss scaler, whose scale and growth count a resumed run continues
    from. `untied`: the model ties no weights, so each tensor is written as a host copy of its
    own. That also takes parameters that are views of one buffer (cuDNN's LSTM weights on a
    GPU), which `save_model`, made to drop the duplicates of tied weights, refuses."""
    if untied:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(tmp / "model.safetensors"))
    else:
        save_model(model, str(tmp / "model.safetensors"))
    trainer = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
               "step": step}
    if scaler is not None:
        trainer["scaler"] = scaler.state_dict()
    torch.save(trainer, tmp / "trainer.pt")


def commit(tmp: Path, out_dir: Path, step: int, meta: dict[str, Any], keep: int,
           keep_every: int = 0) -> Path:
    """Seal the checkpoint (meta.json lists every file's size and sha256), move it into
    place, point `latest` at it and delete old ones beyond `keep`, except those at multiples of
    `keep_every` (when > 0)."""
    paths = sorted(tmp.iterdir())
    files = {p.name: p.stat().st_size for p in paths}
    digests = {p.name: sha256_file(p) for p in paths}
    (tmp / META).write_text(json.dumps({**meta, "step": step, "files": files,
                                        "sha256": digests}, indent=2))
    root = checkpoint_root(out_dir)
    final = step_dir(out_dir, step)
    install_dir(tmp, final)
    write_atomic(root / LATEST, final.name + "\n")
    existing = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in existing[:-keep]:
        if not (keep_every and step_of(old.name) % keep_every == 0):
            shutil.rmtree(old, ignore_errors=True)
    return final


def find_latest(out_dir: Path) -> Path | None:
    root = checkpoint_root(out_dir)
    pointer = root / LATEST
    if not pointer.exists():
        return None
    path = root / pointer.read_text().strip()
    verify(path)
    return path


def read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads((path / META).read_text())
        meta["files"] = dict(meta["files"])
        meta["sha256"] = dict(meta.get("sha256", {}))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise ElectraError(f"{path}: corrupt or incomplete checkpoint (unreadable {META})"
                           ) from None
    return meta


def verify(path: Path) -> dict[str, Any]:
    """meta.json exists and every file it lists is there with its recorded size and hash."""
    meta = read_meta(path)
    files, digests = meta["files"], meta["sha256"]
    for name, size in files.items():
        f = path / name
        if not f.is_file() or f.stat().st_size != size:
            raise ElectraError(f"{path}: corrupt or incomplete checkpoint ({name} missing or "
                               "truncated)")
        if name in digests and sha256_file(f) != digests[name]:
            raise ElectraError(f"{path}: corrupt checkpoint ({name} does not match its "
                               "recorded sha256)")
    return meta


def load(path: Path, model: nn.Module, optimizer, scheduler, rank: int,
         world_size: int | None = None, untied: bool = False,
         scaler: torch.amp.GradScaler | None = None) -> int:
    """Restore model, optimizer, schedule, fp16's loss scaler (where the run has one and the
    checkpoint holds its state) and this rank's RNG; return the step.

    With `world_size`, a checkpoint written by another number of processes is refused on
    every rank alike (each rank's RNG stream is saved, so continuing exactly needs the same
    number), instead of failing on some ranks only and hanging the others. `untied`: as
    `write_main` wrote it."""
    saved_world = read_meta(path).get("world_size")
    if world_size is not None and saved_world is not None and saved_world != world_size:
        raise ElectraError(f"{path}: written by {saved_world} process(es), resumed with "
                           f"{world_size}; resuming with a different number of processes is "
                           "not supported")
    load_weights(path, model, untied)
    with _reading(path):
        trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
        rng = torch.load(path / f"rng_rank{rank}.pt", map_location="cpu", weights_only=False)
    optimizer.load_state_dict(with_kernel_of(optimizer, trainer["optimizer"]))
    scheduler.load_state_dict(trainer["scheduler"])
    if scaler is not None and trainer.get("scaler"):
        scaler.load_state_dict(trainer["scaler"])
    set_rng_state(rng)
    return int(trainer["step"])


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A checkpoint file that is missing or unreadable is one error naming the checkpoint
    (corrupt safetensors and pickles raise a variety of types)."""
    try:
        yield
    except FileNotFoundError as e:
        raise ElectraError(f"{path}: corrupt or incomplete checkpoint ({e.filename} missing)"
                           ) from None
    except Exception as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise ElectraError(f"{path}: corrupt or incomplete checkpoint ({reason})") from None


def load_weights(path: Path, model: nn.Module, untied: bool = False) -> None:
    """A checkpoint's weights into `model` (all of them, nothing else): what resuming and
    exporting a checkpoint both start from. `untied`: as `write_main` wrote it."""
    weights = str(path / "model.safetensors")
    with _reading(path):
        missing, unexpected = (model.load_state_dict(load_file(weights), strict=False) if untied
                               else load_model(model, weights, strict=False))
    if missing or unexpected:
        raise ElectraError(f"{path}: checkpoint does not match the model (missing "
                           f"{list(missing)[:3]}, unexpected {list(unexpected)[:3]})")


def with_kernel_of(optimizer, state: dict) -> dict:
    """A saved optimizer state with `optimizer`'s own kernel choice (`fused`, `foreach`): a
    checkpoint written on CPU and resumed on CUDA (or back) keeps the kernel that device was
    given (`electra.runtime.optim.adamw_impl`); loading would otherwise take the saved groups'."""
    groups = [{**saved, **{k: now[k] for k in ("fused", "foreach") if k in now}}
              for saved, now in zip(state["param_groups"], optimizer.param_groups, strict=False)]
    return {**state, "param_groups": groups}

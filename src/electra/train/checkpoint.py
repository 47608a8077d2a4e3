"""Training checkpoints, written atomically, verified on load.

Layout: OUT/checkpoints/step_00000500/{model.safetensors, trainer.pt, rng_rank0.pt, ...,
meta.json} and OUT/checkpoints/latest (the name of the newest complete checkpoint). A
checkpoint is written into a temporary directory, renamed into place, and only then does
`latest` move (itself replaced atomically), so a kill at any moment leaves the previous
checkpoint as the latest one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from electra.errors import ElectraError

LATEST = "latest"
META = "meta.json"


def checkpoint_root(out_dir: Path) -> Path:
    return out_dir / "checkpoints"


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def begin(out_dir: Path, step: int) -> Path:
    """Create the temporary directory a checkpoint is written into (rank 0)."""
    root = checkpoint_root(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".step_{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def write_rng(tmp: Path, rank: int) -> None:
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")


def write_main(tmp: Path, model: nn.Module, optimizer, scheduler, step: int) -> None:
    save_model(model, str(tmp / "model.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "step": step}, tmp / "trainer.pt")


def commit(tmp: Path, out_dir: Path, step: int, meta: dict[str, Any], keep: int) -> Path:
    """Seal the checkpoint (meta.json lists every file and its size), move it into place,
    point `latest` at it and delete old ones beyond `keep`."""
    files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
    (tmp / META).write_text(json.dumps({**meta, "step": step, "files": files}, indent=2))
    root = checkpoint_root(out_dir)
    final = root / f"step_{step:08d}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = root / f".{LATEST}.tmp"
    pointer.write_text(final.name + "\n")
    os.replace(pointer, root / LATEST)
    existing = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in existing[:-keep]:
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


def verify(path: Path) -> dict[str, Any]:
    """meta.json exists and every file it lists is there with its recorded size."""
    meta_path = path / META
    try:
        meta = json.loads(meta_path.read_text())
        files = meta["files"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        raise ElectraError(f"{path}: corrupt or incomplete checkpoint (unreadable {META})"
                           ) from None
    for name, size in files.items():
        f = path / name
        if not f.is_file() or f.stat().st_size != size:
            raise ElectraError(f"{path}: corrupt or incomplete checkpoint ({name} missing or "
                               "truncated)")
    return meta


def load(path: Path, model: nn.Module, optimizer, scheduler, rank: int) -> int:
    """Restore model, optimizer, schedule and this rank's RNG; return the step."""
    try:
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
        trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
        rng_file = path / f"rng_rank{rank}.pt"
        rng = torch.load(rng_file, map_location="cpu", weights_only=False)
    except FileNotFoundError as e:
        raise ElectraError(f"{path}: corrupt or incomplete checkpoint ({e.filename} missing; "
                           "resuming with a different number of processes is not supported)"
                           ) from None
    except Exception as e:  # corrupt safetensors/pickle raise a variety of types
        raise ElectraError(f"{path}: corrupt or incomplete checkpoint ({e})") from None
    if missing or unexpected:
        raise ElectraError(f"{path}: checkpoint does not match the model (missing "
                           f"{list(missing)[:3]}, unexpected {list(unexpected)[:3]})")
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    set_rng_state(rng)
    return int(trainer["step"])

"""Small file helpers shared across modules."""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from electra.errors import ElectraError


def refuse_to_replace(out: str | Path, what: str, flag: str = "--out") -> ElectraError:
    """The one wording every command uses when OUT already holds something: what it holds, and
    the two ways on."""
    return ElectraError(f"{out} already holds {what}; choose another {flag} or pass --overwrite "
                        "to replace it")


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in chunks (files may be larger than memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write `data` via a temporary file in the same folder, then rename it into place: a
    reader never sees a half-written file, and a crash leaves the old file (or none)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; these are ordinary outputs
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def temp_dir_beside(out: str | Path) -> Path:
    """A fresh hidden directory next to `out`, on the same file system so that `install_dir`
    can rename it into place. The name carries this process's id so that a later run can tell
    the leftovers of a killed run (`remove_stale_temp_dirs`) from the work of a live one."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))


def remove_stale_temp_dirs(out: str | Path) -> list[Path]:
    """Delete the temp dirs (`temp_dir_beside`) and backups (`install_dir`) that a killed run
    left beside `out`; those of processes still alive on this machine are left alone."""
    out = Path(out)
    removed: list[Path] = []
    if not out.parent.is_dir():
        return removed
    for kind in ("tmp", "old"):
        for path in out.parent.glob(f".{glob.escape(out.name)}.{kind}-*"):
            pid = path.name[len(f".{out.name}.{kind}-"):].split("-", 1)[0]
            if path.is_dir() and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def install_dir(tmp: str | Path, out: str | Path) -> None:
    """Move a finished temp dir to `out`, replacing an old `out` only at the very end: a reader
    sees the old directory, the new one or, for an instant, none; never a mix."""
    tmp, out = Path(tmp), Path(out)
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; this is an ordinary output
    for path in tmp.rglob("*"):  # as are files some writers create private (safetensors)
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o644)
    if not out.exists():
        os.rename(tmp, out)
        return
    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
    backup.rmdir()
    os.rename(out, backup)
    os.rename(tmp, out)
    shutil.rmtree(backup, ignore_errors=True)


@contextmanager
def staged_dir(out: str | Path, install: Callable[[Path, Path], None] = install_dir
               ) -> Iterator[Path]:
    """Yield a temp dir beside `out` to write a whole directory into; `install` (by default
    `install_dir`, atomic) puts it in place when the block ends without an error. On any
    exception, the block's or `install`'s, the temp dir is deleted, so a failed write leaves
    `out` as it was and nothing beside it. What killed runs (kill -9) left beside `out` is
    deleted first, so that no half-written folder outlives the next write of `out`."""
    out = Path(out)
    remove_stale_temp_dirs(out)
    tmp = temp_dir_beside(out)
    try:
        yield tmp
        install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


# What torch.save (its zip writer) and numpy's array writer raise for a short write: on a full
# disk they report how far they got, not the OSError behind it.
_SHORT_WRITES = (re.compile(r"inline_container\.cc.*unexpected pos"),
                 re.compile(r"\d+ requested and \d+ written"))
_FAILED_WRITES = (re.compile(r"PytorchStreamWriter failed writing"),
                  re.compile(r"file write failed"))
_OS_ERROR_CODE = re.compile(r"os error (\d+)")  # safetensors' I/O errors (Rust's io::Error)


def write_failure(error: BaseException) -> str | None:
    """Why a write failed, as one lower-case phrase ("no space left on device"), when `error`
    is a failed write: an OSError, or what torch.save, safetensors and numpy raise in its place
    (a RuntimeError, a SafetensorError, an OSError without errno). None for any other error,
    so that callers re-raise those unchanged."""
    text = " ".join(str(error).split())
    code = getattr(error, "errno", None) if isinstance(error, OSError) else None
    if code is None and type(error).__name__ == "SafetensorError":
        found = _OS_ERROR_CODE.search(text)
        if found is None:
            return None
        code = int(found.group(1))
    if code is not None:
        reason = os.strerror(code)
        return reason[:1].lower() + reason[1:]
    if isinstance(error, OSError | RuntimeError):
        if any(p.search(text) for p in _SHORT_WRITES):
            return os.strerror(errno.ENOSPC).lower()
        if isinstance(error, OSError) or any(p.search(text) for p in _FAILED_WRITES):
            return f"the write failed ({text or type(error).__name__})"
    return None


@contextmanager
def reported_write_failures(describe: Callable[[str], str]) -> Iterator[None]:
    """Turn a failed write in the block (`write_failure`: a full disk, any OSError) into one
    ElectraError, `describe(reason)`; other errors pass unchanged. Put it around the writer's
    own clean-up (e.g. a `staged_dir`), so that the message can say the partial files are gone."""
    try:
        yield
    except ElectraError:
        raise
    except Exception as error:
        reason = write_failure(error)
        if reason is None:
            raise
        raise ElectraError(describe(reason)) from error


def space_advice(reason: str) -> str:
    """What to do before trying again after a failed write (`write_failure`'s reason)."""
    return "free space" if reason in ("no space left on device", "disk quota exceeded") \
        else "fix that"

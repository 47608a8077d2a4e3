"""What the identity battery records of a run: its files by content, with what differs from one
run to the next on the same sources (timings, absolute paths) taken out, so that two records
are equal exactly when the runs computed the same things."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from pathlib import Path
from typing import Any

# A key is a timing (dropped) if one of its words (split at "_", "-", ...) is one of these,
# or it matches _TIMING_RE; counts such as "timed_steps" or "train_flops_per_step" are kept.
_TIMING_TOKENS = {"time", "times", "timing", "timings", "seconds", "second", "secs", "sec",
                  "elapsed", "eta", "mfu", "s", "ms", "duration", "throughput", "timestamp",
                  "date", "hostname", "pid", "wall"}
_TIMING_RE = re.compile(r"time(?!d_steps)|seconds|per_s(ec)?$|per_second|tokens_per|examples_per"
                        r"|elapsed|throughput|mfu")
_KEEP = {"timed_steps"}


def is_timing_key(key: str) -> bool:
    k = key.lower()
    if k in _KEEP:
        return False
    if _TIMING_RE.search(k):
        return True
    return any(tok in _TIMING_TOKENS for tok in re.split(r"[^a-z0-9]+", k) if tok)


class Normalizer:
    """Replaces the battery's absolute paths by tags (<OUT>, <SRC>, ...) and drops timing keys,
    so that a record does not depend on where the run was written."""

    def __init__(self, tags: dict[Path, str]):
        subs = {}
        for path, tag in tags.items():
            for form in {str(path), str(path.resolve())}:  # as given and resolved
                subs[form.rstrip("/")] = tag
        self.subs = sorted(subs.items(), key=lambda kv: -len(kv[0]))  # longest first

    def text(self, s: str) -> str:
        for a, b in self.subs:
            s = s.replace(a, b)
        return s

    def json(self, obj: Any) -> Any:
        if isinstance(obj, dict):
            return {self.text(k): self.json(v) for k, v in obj.items() if not is_timing_key(k)}
        if isinstance(obj, list):
            return [self.json(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def safetensors_content(path: Path) -> str:
    """A .safetensors file by content: its tensors (name, dtype, shape, bytes) and its metadata
    with sorted keys. safetensors writes the metadata of tied tensors in set order, which
    follows Python's string hashing (PYTHONHASHSEED), so the raw bytes of a checkpoint with
    tied weights can differ where nothing else does."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        meta = header.pop("__metadata__", None) or {}
        h.update(json.dumps(meta, sort_keys=True).encode())
        for name in sorted(header):
            info = header[name]
            h.update(json.dumps([name, info["dtype"], info["shape"]]).encode())
            start, end = info["data_offsets"]
            f.seek(base + start)
            h.update(f.read(end - start))
    return "content-sha256:" + h.hexdigest()


def pt_content(path: Path) -> str:
    """A .pt file (torch.save: optimizer, RNG, CVT sampler state) by its loaded content,
    timing fields dropped: CVT's cvt_state.pt holds the wall-clock `elapsed`."""
    import torch  # only here: the battery's other parts run without it

    h = hashlib.sha256()

    def walk(o: Any) -> None:
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(o, dict):
            h.update(b"{")
            for k in sorted(o, key=repr):
                if isinstance(k, str) and is_timing_key(k):
                    continue
                h.update(repr(k).encode())
                walk(o[k])
            h.update(b"}")
        elif isinstance(o, (list, tuple)):
            h.update(b"[" if isinstance(o, list) else b"(")
            for v in o:
                walk(v)
            h.update(b"]")
        elif type(o).__module__ == "numpy" and hasattr(o, "tobytes"):
            h.update(f"N{o.dtype}{getattr(o, 'shape', ())}".encode())
            h.update(o.tobytes())
        else:  # int, float (repr is exact), str, bool, None, ...
            h.update(repr(o).encode())

    walk(torch.load(path, map_location="cpu", weights_only=False))
    return "pt-content-sha256:" + h.hexdigest()


def digest_tree(root: Path, norm: Normalizer) -> dict:
    """{relative file: value} for every file under root: JSON and JSON lines normalized
    (timings dropped, paths replaced); safetensors by SHA-256 and by content ("#content"), in
    checkpoints/ by content only; .pt by content; model cards (README.md) as text, paths
    replaced; everything else by SHA-256. A checkpoint's
    meta.json lists its files' SHA-256: those are replaced by the digests recorded here."""
    out: dict = {}
    metas = []
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "symlink:" + norm.text(os.readlink(p))
            continue
        if not p.is_file():
            continue
        name = p.name
        in_ckpt = "checkpoints" in p.relative_to(root).parts
        try:
            if name.endswith(".json") and name != "tokenizer.json":
                obj = norm.json(json.loads(p.read_text()))
                if in_ckpt and isinstance(obj, dict) and isinstance(obj.get("sha256"), dict):
                    metas.append((rel, obj))
                out[rel] = obj
            elif name.endswith(".jsonl"):
                out[rel] = [norm.json(json.loads(line)) for line in p.read_text().splitlines()
                            if line.strip()]
            elif name.endswith(".safetensors"):
                if in_ckpt:  # tied-tensor metadata in set order: raw bytes vary run to run
                    out[rel] = safetensors_content(p)
                else:
                    out[rel] = sha256_file(p)
                    out[rel + "#content"] = safetensors_content(p)
            elif name.endswith(".pt"):
                out[rel] = pt_content(p)
            elif name in ("latest", "README.md"):  # a checkpoint pointer, a model card
                out[rel] = norm.text(p.read_text())
            else:
                out[rel] = sha256_file(p)
        except (ValueError, UnicodeDecodeError):
            out[rel] = sha256_file(p)
    for rel, obj in metas:
        folder = Path(rel).parent
        obj["sha256"] = {f: out.get(str(folder / f), "missing:" + str(v))
                         for f, v in obj["sha256"].items()}
    return out


def parse_stdout(text: str, norm: Normalizer) -> Any:
    """A command's stdout: one JSON document, else its lines (each as JSON where it parses)."""
    text = text.strip()
    if not text:
        return None
    try:
        return norm.json(json.loads(text))
    except ValueError:
        pass
    lines = []
    for line in text.splitlines():
        try:
            lines.append(norm.json(json.loads(line)))
        except ValueError:
            lines.append(norm.text(line))
    return lines

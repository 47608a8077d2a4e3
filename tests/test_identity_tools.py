"""The identity battery's record (tools/identity): what it drops as run-to-run noise, what it
keeps, and how compare.py reports a difference. The battery itself runs in minutes, by hand
(docs/development.md, "Checking that a refactoring changes nothing")."""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools" / "identity"


def _digest_module():
    spec = importlib.util.spec_from_file_location("identity_digest", TOOLS / "digest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


digest = _digest_module()


def test_timing_keys_are_dropped_and_counts_kept():
    for key in ("seconds", "elapsed", "tokens_per_second", "eta", "step_time", "mfu"):
        assert digest.is_timing_key(key), key
    for key in ("timed_steps", "train_flops_per_step", "loss", "step", "accuracy"):
        assert not digest.is_timing_key(key), key


def test_normalizer_replaces_paths_longest_first(tmp_path: Path):
    out = tmp_path / "runs"
    norm = digest.Normalizer({tmp_path: "<WORK>", out: "<OUT>"})
    record = {"model": f"{out}/final", "data": f"{tmp_path}/data", "seconds": 3.5, "loss": 1.25}
    assert norm.json(record) == {"model": "<OUT>/final", "data": "<WORK>/data", "loss": 1.25}


def _safetensors(path: Path, header: dict, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_safetensors_by_content_ignores_metadata_order(tmp_path: Path):
    tensor = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    data = struct.pack("<2f", 1.0, 2.0)
    a = _safetensors(tmp_path / "a.safetensors",
                     {"__metadata__": {"x": "1", "y": "2"}, "w": tensor}, data)
    b = _safetensors(tmp_path / "b.safetensors",
                     {"w": tensor, "__metadata__": {"y": "2", "x": "1"}}, data)
    c = _safetensors(tmp_path / "c.safetensors",
                     {"__metadata__": {"x": "1", "y": "2"}, "w": tensor},
                     struct.pack("<2f", 1.0, 3.0))
    assert digest.sha256_file(a) != digest.sha256_file(b)
    assert digest.safetensors_content(a) == digest.safetensors_content(b)
    assert digest.safetensors_content(a) != digest.safetensors_content(c)


def _compare(tmp_path: Path, a: dict, b: dict) -> subprocess.CompletedProcess:
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    return subprocess.run([sys.executable, str(TOOLS / "compare.py"), str(tmp_path / "a.json"),
                           str(tmp_path / "b.json")], capture_output=True, text=True)


def test_compare_reports_each_difference(tmp_path: Path):
    record = {"pretrain_tiny": {"metrics.jsonl": [{"step": 2, "loss": 9.5}],
                                "final/model.safetensors": "sha256:00"}}
    same = _compare(tmp_path, record, json.loads(json.dumps(record)))
    assert same.returncode == 0 and "identical" in same.stdout, same.stdout
    changed = json.loads(json.dumps(record))
    changed["pretrain_tiny"]["metrics.jsonl"][0]["loss"] = 9.500000001
    differ = _compare(tmp_path, record, changed)
    assert differ.returncode == 1
    assert "DIFF pretrain_tiny/metrics.jsonl :: [0]/loss" in differ.stdout, differ.stdout
    assert "1 difference(s)" in differ.stdout

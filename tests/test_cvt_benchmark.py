"""benchmarks/cvt.py on tiny synthetic data: every run is cached and reused, medians and the
CVT gain are computed from the runs, multi-task reports every task."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from cvt_helpers import TINY, write_chunk, write_ud, write_unlabeled

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "cvt.py"


def _load():
    spec = importlib.util.spec_from_file_location("cvt_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_caches_runs_and_summarises(tmp_path, monkeypatch, capsys):
    bench = _load()
    chunk, ud = write_chunk(tmp_path / "chunk"), write_ud(tmp_path / "ud")
    raw = write_unlabeled(tmp_path / "raw.txt")
    argv = ["--work", str(tmp_path / "work"), "--tasks", "chunk,dep", "--sizes", "full,10",
            "--seeds", "0,1", "--steps", "2", "--jobs", "1", "--unlabeled", str(raw), "--data",
            f"chunk={chunk}", "--data", f"dep={ud}",
            *[a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]]
    summary = bench.main(argv)
    runs = sorted((tmp_path / "work" / "results").glob("*.json"))
    assert len(runs) == 2 * 2 * (2 * 2 + 1)  # sizes x seeds x (tasks x methods + multitask)
    rows = {(r["task"], r["labeled"]): r for r in summary["table"]}
    row = rows[("dep", "10")]
    assert row["metric"] == "las" and len(row["supervised"]["runs"]) == 2
    assert row["cvt_gain"] == round(row["cvt"]["median"] - row["supervised"]["median"], 2)
    assert len(rows[("chunk", "full")]["multitask"]["runs"]) == 2
    one = json.loads(runs[0].read_text())
    assert one["train_sentences"] in ({"chunk": 10}, {"dep": 10}, {"chunk": 24}, {"dep": 24},
                                      {"chunk": 10, "dep": 10}, {"chunk": 24, "dep": 24})

    def boom(*a, **k):
        raise AssertionError("a cached run was trained again")

    monkeypatch.setattr(bench, "run_train", boom)
    capsys.readouterr()
    again = bench.main(argv)
    assert again["table"] == summary["table"]
    assert json.loads(capsys.readouterr().out)["table"] == summary["table"]

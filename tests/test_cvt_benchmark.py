"""experiments/cvt.py on tiny synthetic data: every run is cached and reused, medians and the
CVT gain are computed from the runs (paired by seed), multi-task reports every task, and
docs/experiments/cvt.md's table is written as markdown."""

from __future__ import annotations

import importlib.util
import json
import statistics

import pytest
from cvt_helpers import TINY, write_chunk, write_ud, write_unlabeled
from safetensors.torch import load_file

from electra.cvt.train import supervised_task_index
from electra.errors import ElectraError


def _load():
    return importlib.import_module("experiments.cvt")


def test_benchmark_caches_runs_and_summarises(tmp_path, monkeypatch, capsys):
    bench = _load()
    chunk, ud = write_chunk(tmp_path / "chunk"), write_ud(tmp_path / "ud")
    raw = write_unlabeled(tmp_path / "raw.txt")
    argv = ["--work", str(tmp_path / "work"), "--tasks", "chunk,dep", "--sizes", "full,10",
            "--seeds", "0,1", "--steps", "2", "--jobs", "1", "--unlabeled", str(raw), "--data",
            f"chunk={chunk}", "--data", f"dep={ud}",
            *[a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]]
    summary = bench.main(argv)
    runs = sorted((tmp_path / "work" / "results").glob("*.json"))
    assert len(runs) == 2 * 2 * (2 * 2 + 1)  # sizes x seeds x (tasks x methods + multitask)
    rows = {(r["task"], r["labeled"]): r for r in summary["table"]}
    row = rows[("dep", "10")]
    assert row["metric"] == "las" and len(row["supervised"]["runs"]) == 2
    # gains are paired by seed: the median of the per-seed differences to supervised
    sup, cvt = row["supervised"], row["cvt"]
    assert sup["seeds"] == cvt["seeds"] == [0, 1]
    per_seed = [c - s for s, c in zip(sup["runs"], cvt["runs"], strict=True)]
    assert row["cvt_gain_seeds"] == [0, 1]
    assert row["cvt_gain_per_seed"] == pytest.approx(per_seed, abs=0.011)  # runs are rounded
    assert row["cvt_gain"] == pytest.approx(statistics.median(per_seed), abs=0.011)
    assert len(rows[("chunk", "full")]["multitask"]["runs"]) == 2
    assert row["multitask_gain_per_seed"] == pytest.approx(
        [m - s for s, m in zip(sup["runs"], row["multitask"]["runs"], strict=True)], abs=0.011)
    table = (tmp_path / "work" / "summary.md").read_text().splitlines()
    assert len(table) == 2 + 4 and "multi-task CVT gain" in table[0]  # header, rule, 4 rows
    assert f"| dep (LAS / UAS, UD EWT dev) | 10 | {sup['median']:.2f} / " in table[-1]
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


def test_gain_pairs_runs_by_seed_not_by_position():
    """Seeds in another order, or only partly shared: each CVT run is compared with the
    supervised run of its own seed, over the seeds both ran."""
    bench = _load()
    gain = bench.paired_gain({0: 0.80, 1: 0.70, 2: 0.90}, {2: 0.95, 0: 0.81}, "cvt")
    assert gain == {"cvt_gain": 3.0, "cvt_gain_per_seed": [1.0, 5.0], "cvt_gain_seeds": [0, 2]}
    assert bench.paired_gain({0: 0.8}, {1: 0.9}, "cvt") == {}


def test_stages_continue_and_end_where_a_run_of_that_length_ends(tmp_path):
    """--steps 2,4 trains to 2, scores, continues to 4: the same scores and EMA weights as one
    4-step run (the lr schedule, EMA and data order do not depend on the total)."""
    bench = _load()
    chunk = write_chunk(tmp_path / "chunk")
    raw = write_unlabeled(tmp_path / "raw.txt")

    def argv(work, steps):
        return ["--work", str(tmp_path / work), "--tasks", "chunk", "--sizes", "full",
                "--seeds", "0", "--methods", "supervised,cvt", "--steps", steps, "--jobs", "1",
                "--unlabeled", str(raw), "--data", f"chunk={chunk}",
                *[a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]]

    staged = bench.main(argv("staged", "2,4"))
    direct = bench.main(argv("direct", "4"))
    assert staged["stages"] == [2, 4] and staged["steps_per_run"] == 4
    row_s, row_d = staged["table"][0], direct["table"][0]
    for method in ("supervised", "cvt"):
        assert row_s[method]["runs"] == row_d[method]["runs"]
        assert list(row_s[method]["curve"]) == ["2", "4"]
        assert "curve" not in row_d[method]
        for name in (f"chunk-full-{method}-s0",):
            a = load_file(str(tmp_path / "staged/runs" / name / "model/model.safetensors"))
            b = load_file(str(tmp_path / "direct/runs" / name / "model/model.safetensors"))
            assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert len(list((tmp_path / "staged/results").glob("*.json"))) == 4


def test_resuming_a_run_that_is_past_the_steps_asked_for_is_an_error(tmp_path):
    bench = _load()
    chunk = write_chunk(tmp_path / "chunk")
    raw = write_unlabeled(tmp_path / "raw.txt")
    base = ["--work", str(tmp_path / "w"), "--tasks", "chunk", "--sizes", "full", "--seeds",
            "0", "--methods", "supervised", "--jobs", "1", "--unlabeled", str(raw), "--data",
            f"chunk={chunk}", *[a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]]
    bench.main([*base, "--steps", "4"])
    with pytest.raises(ElectraError, match="already at step 4, past the 2 steps"):
        bench.main([*base, "--steps", "2"])


def _entry(name, tasks, cvt, seed, steps, score):
    metric = {"chunk": "f1", "dep": "las"}
    return {"name": name, "tasks": tasks, "cvt": cvt, "seed": seed, "steps": steps,
            "scores": {t: {metric[t]: score} for t in tasks}}


def test_curves_plot_the_median_over_seeds_at_each_stage(tmp_path, capsys):
    curves = importlib.import_module("experiments.cvt_curves")
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    runs = [_entry("chunk-10-cvt-s0", ["chunk"], True, 0, 100, 0.80),
            _entry("chunk-10-cvt-s1", ["chunk"], True, 1, 100, 0.90),
            _entry("chunk-10-cvt-s2", ["chunk"], True, 2, 100, 0.70),
            _entry("chunk-10-cvt-s0", ["chunk"], True, 0, 200, 0.95),
            _entry("chunk-10-supervised-s0", ["chunk"], False, 0, 100, 0.85),
            {**_entry("mt-chunk+dep-10-s0", ["chunk", "dep"], True, 0, 100, 0.5),
             "train_sentences": {"chunk": 100, "dep": 400}}]
    for i, r in enumerate(runs):
        (work / "results" / f"{i}.json").write_text(json.dumps(r))
    listed = tmp_path / "vectors.json"
    listed.write_text(json.dumps(runs[:1]))
    out = curves.main([f"{work}=random", f"{listed}=word2vec", "--out",
                       str(tmp_path / "curves.png")])
    assert (tmp_path / "curves.png").stat().st_size > 1000
    series = out["series"]
    assert series["chunk/random/cvt"] == {"100": 80.0, "200": 95.0}  # median of 80, 90, 70
    assert series["chunk/random/supervised"] == {"100": 85.0}
    # a multi-task run at each task's share of its 100 steps, drawn ∝ √size (about 10/30 and
    # 20/30) as the run drew them
    picks = [supervised_task_index([100, 400], 0, t) for t in range(100)]
    chunk, dep = picks.count(0), picks.count(1)
    assert chunk + dep == 100 and 23 < chunk < 43
    assert series["chunk/random/multitask"] == {str(chunk): 50.0}
    assert series["dep/random/multitask"] == {str(dep): 50.0}
    assert series["chunk/word2vec/cvt"] == {"100": 80.0}
    assert json.loads(capsys.readouterr().out) == out
    with pytest.raises(ElectraError, match="no results"):
        curves.main([str(tmp_path), "--out", str(tmp_path / "x.png")])

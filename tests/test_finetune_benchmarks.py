"""The fine-tuning benchmark scripts run end to end on small inputs and report what they claim
(no timing assertions: numbers are for docs/speed.md, not for tests)."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path
from types import ModuleType

import pytest
from safetensors.torch import load_file

from electra.finetuning.baseline import random_init

ROOT = Path(__file__).resolve().parents[1]
GLUE = ROOT.parent / "shared" / "data" / "glue"


def _load(name: str) -> ModuleType:
    package = "benchmarks" if name.endswith("_speed") else "experiments"
    return importlib.import_module(f"{package}.{name}")


def _mini_glue(root: Path, tasks: tuple[str, ...], n_train: int, n_dev: int) -> Path:
    for task in tasks:
        (root / task).mkdir(parents=True)
        for split, n in (("train", n_train), ("dev", n_dev)):
            lines = (GLUE / task / f"{split}.tsv").read_text().splitlines()
            keep = lines[:n + 1] if task != "CoLA" else lines[:n]  # CoLA has no header
            (root / task / f"{split}.tsv").write_text("\n".join(keep) + "\n")
    return root


def test_random_init_keeps_architecture_and_tokenizer(tiny_model: Path, tmp_path: Path) -> None:
    # (the fixture itself is seed 0 with the same init, so another seed)
    out = random_init(tiny_model, tmp_path / "rand", seed=5)
    assert json.loads((out / "config.json").read_text()) == \
        json.loads((tiny_model / "config.json").read_text())
    assert (out / "vocab.txt").read_text() == (tiny_model / "vocab.txt").read_text()
    a, b = load_file(tiny_model / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys()
    name = "electra.encoder.layer.0.attention.self.query.weight"
    assert a[name].shape == b[name].shape and not a[name].equal(b[name])
    again = random_init(tiny_model, tmp_path / "rand2", seed=5)  # deterministic
    assert load_file(again / "model.safetensors")[name].equal(b[name])
    # written once: the same call leaves the directory as it is, another seed rewrites it
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert random_init(tiny_model, out, seed=5) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    random_init(tiny_model, out, seed=6)
    assert not load_file(out / "model.safetensors")[name].equal(b[name])
    assert json.loads((out / "init.json").read_text())["seed"] == 6


def test_train_caps() -> None:
    bench = _load("finetune_transfer")
    args = bench.parse_args([])
    assert (bench.train_cap(args, "SST-2"), bench.train_cap(args, "RTE")) == (10000, None)
    args = bench.parse_args(["--max-train-examples", "500", "--max-train-examples-sst2", "0"])
    assert (bench.train_cap(args, "SST-2"), bench.train_cap(args, "CoLA")) == (500, 500)


def test_seed_blocks_train_only_the_missing_seeds(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _load("finetune_transfer")
    calls = []

    def fake_finetune(model_dir, task, glue, out, settings, show_progress=False) -> dict:
        calls.append((out.name, settings.seed, settings.seeds))
        seeds = [{"seed": s, "scores": {"accuracy": s + (settings.epochs or 0)}}
                 for s in range(settings.seed, settings.seed + settings.seeds)]
        res = {"seeds": seeds, "num_train_examples": 8,
               "settings": {"epochs": settings.epochs, "lr": 3e-4}}
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(res))
        return res

    monkeypatch.setattr(bench, "finetune", fake_finetune)
    model, glue = tmp_path / "model", tmp_path / "glue"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "work" / "random" / "RTE"

    def job(seeds: int, epochs: float | None = None) -> dict:
        settings = bench.FinetuneSettings(seeds=seeds, epochs=epochs)
        return bench._finetune_job(model, "RTE", glue, out, settings, False)

    job(2)
    job(3)  # adds seed 3 only
    assert calls == [("RTE", 1, 2), ("seeds-3-3", 3, 1)]
    job(2, epochs=5.0)  # other settings replace the first block; seeds-3-3 stays
    calls.clear()
    res = job(4)  # seeds 1-2 again (their block was replaced), 3 from its block, 4 new
    assert calls == [("RTE", 1, 2), ("seeds-4-4", 4, 1)]
    assert [s["scores"]["accuracy"] for s in res["seeds"]] == [1, 2, 3, 4]
    # cached blocks first, then the new ones
    assert [Path(r).parent.name for r in res["results"]] == ["seeds-3-3", "RTE", "seeds-4-4"]
    calls.clear()
    assert job(4)["seeds"] == res["seeds"] and calls == []
    assert bench.consecutive_runs([1, 2, 4, 6, 7]) == [(1, 2), (4, 4), (6, 7)]
    with pytest.raises(SystemExit):
        bench.parse_args(["--seeds", "0"])


@pytest.mark.skipif(not (GLUE / "RTE").is_dir(), reason=f"GLUE absent ({GLUE})")
def test_transfer_benchmark_end_to_end(tiny_model: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture) -> None:
    bench = _load("finetune_transfer")
    glue = _mini_glue(tmp_path / "glue", ("RTE", "CoLA"), 40, 24)
    args = ["--model", str(tiny_model), "--work", str(tmp_path / "work"), "--glue", str(glue),
            "--tasks", "RTE,CoLA", "--seeds", "2", "--epochs", "1", "--jobs", "1",
            "--layerwise-decay", "1.0"]
    res = bench.main(args)
    assert list(res["tasks"]) == ["RTE", "CoLA"]
    for task, metric in (("RTE", "accuracy"), ("CoLA", "mcc")):
        row = res["tasks"][task]
        assert row["metric"] == metric
        for start in ("pretrained", "random"):
            [results] = res["runs"][start][task]["results"]
            saved = json.loads(Path(results).read_text())
            values = [s["scores"][metric] for s in saved["seeds"]]
            assert row[start]["values"] == values and len(values) == 2
            assert saved["settings"]["layerwise_decay"] == 1.0
            assert row[start]["median"] == statistics.median(values)
            assert res["runs"][start][task]["train_examples"] == 40
        assert row["delta_median"] == row["pretrained"]["median"] - row["random"]["median"]
    table = (tmp_path / "work" / "results.md").read_text()
    rte = res["tasks"]["RTE"]
    assert f"| RTE | accuracy | {100 * rte['pretrained']['median']:.1f} |" in table
    assert table in capsys.readouterr().out
    assert json.loads((tmp_path / "work" / "results.json").read_text()) == res

    # Cached per run: the same call trains nothing again; another pre-trained model in the
    # same WORK retrains only its own runs and reuses the random baseline.
    def stamps() -> dict:
        return {(s, t): Path(res["runs"][s][t]["results"][0]).stat().st_mtime_ns
                for s in ("pretrained", "random") for t in ("RTE", "CoLA")}
    before = stamps()
    again = bench.main(args)
    assert stamps() == before and again["tasks"] == res["tasks"]
    other = random_init(tiny_model, tmp_path / "other", seed=7)
    third = bench.main([*args[:1], str(other), *args[2:]])
    after = stamps()
    assert all(after[("random", t)] == before[("random", t)] for t in ("RTE", "CoLA"))
    assert all(after[("pretrained", t)] != before[("pretrained", t)] for t in ("RTE", "CoLA"))
    assert third["tasks"]["RTE"]["random"] == res["tasks"]["RTE"]["random"]

    # More seeds later: only the new seed is trained, in its own block beside the first.
    more = bench.main([*args[:1], str(other), *args[2:], "--seeds", "3"])  # last one wins
    assert stamps() == after
    for task in ("RTE", "CoLA"):
        for start in ("pretrained", "random"):
            first, added = more["runs"][start][task]["results"]
            assert Path(added).parent == tmp_path / "work" / start / task / "seeds-3-3"
            assert [s["seed"] for s in json.loads(Path(added).read_text())["seeds"]] == [3]
            values = more["tasks"][task][start]["values"]
            assert len(values) == 3
            assert values[:2] == third["tasks"][task][start]["values"]

    # --baseline: a model in a WORK of its own shares that random baseline, trains only itself.
    fourth = bench.main([*args[:1], str(other), "--work", str(tmp_path / "work2"), *args[4:],
                         "--baseline", str(tmp_path / "work")])
    assert stamps() == after
    assert fourth["tasks"]["RTE"]["random"] == res["tasks"]["RTE"]["random"]
    assert fourth["tasks"]["RTE"]["pretrained"] == third["tasks"]["RTE"]["pretrained"]
    assert (tmp_path / "work2" / "pretrained" / "RTE").is_dir()
    assert not (tmp_path / "work2" / "random").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (GLUE / "SST-2").is_dir(), reason=f"GLUE absent ({GLUE})")
def test_speed_benchmark_quick(capsys: pytest.CaptureFixture) -> None:
    res = _load("finetune_speed").main(["--quick"])
    sst = res["sst2"]
    assert set(sst["train"]) == {"fp32", "bf16", "fp32_unsorted"}
    assert sst["padding"]["pad_per_example_sorted"] < sst["padding"]["pad_per_example_random"]
    assert res["squad_v1.1_windows"]["max_seq_len"] == 384
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{\n"):]) == res  # progress lines, then the JSON

"""BAM, Born-Again Multi-tasking (dissertation chapter 3): task sampling (section 3.3), mixed
minibatches with a summed loss and the regression head (3.2.1), distillation targets and losses
and teacher annealing (3.2.2), teacher caching, the strategies of Table 3.1, significance, and
a multi-task model's evaluate/predict round trip."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from electra.errors import ElectraError
from electra.finetuning.predict import evaluate, predict
from electra.finetuning.run import finetune
from electra.finetuning.settings import FinetuneSettings
from electra.finetuning.training import TrainPlan, train_model
from electra.multitask import distill
from electra.multitask.mixture import TaskMixture, collate_mixture
from electra.multitask.sampling import MixtureSampler, task_probabilities
from electra.multitask.significance import holm_bonferroni, paired_bootstrap, stars
from electra.multitask.strategies import parse_strategy, run_strategy
from electra.multitask.train import MultitaskSettings, resolve_task, run_multitask
from electra.runtime.metrics_log import MetricsLogger
from electra.tasks.glue import GlueTask

WORDS = ("the of and to in is was that for on with as by at from his her they this "
         "ka lo mi ren tas vor qui zel pha dun bre sto nix gal ber ot um").split()


def _sentence(rng: random.Random, cue: str | None) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
    if cue:
        words.insert(rng.randrange(len(words)), cue)
    return " ".join(words)


def make_glue_like(root: Path, n_train: int = 48, n_dev: int = 16, seed: int = 0) -> Path:
    """CoLA (headerless), RTE (header; a cue word decides the label), and a user regression
    task `sim` (the number of cue words, 0-4) with its task.json, in GLUE's folder layout."""
    rng = random.Random(seed)
    (root / "CoLA").mkdir(parents=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        rows = []
        for i in range(n):
            label = i % 2
            rows.append(f"src\t{label}\t\t{_sentence(rng, 'qui' if label else 'zel')}")
        (root / "CoLA" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    (root / "CoLA" / "test.tsv").write_text("index\tsentence\n0\tka lo mi\n1\tqui zel\n")
    (root / "RTE").mkdir()
    for split, n in (("train", n_train), ("dev", n_dev)):
        rows = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(n):
            label = ("entailment", "not_entailment")[i % 2]
            rows.append(f"{i}\t{_sentence(rng, None)}\t"
                        f"{_sentence(rng, 'bre' if i % 2 else 'sto')}\t{label}")
        (root / "RTE" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    (root / "RTE" / "test.tsv").write_text(
        "index\tsentence1\tsentence2\n" + "".join(
            f"{i}\t{_sentence(rng, None)}\t{_sentence(rng, None)}\n" for i in range(5)))
    (root / "sim").mkdir()
    for split, n in (("train", n_train), ("dev", n_dev), ("test", 4)):
        rows = ["text\tscore"]
        for i in range(n):
            k = i % 5
            rows.append(f"{_sentence(rng, ' '.join(['nix'] * k) or None)}\t{float(k)}")
        (root / "sim" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    (root / "sim" / "task.json").write_text(json.dumps(
        {"text_a": "text", "label": "score", "label_type": "real"}))
    return root


@pytest.fixture(scope="module")
def glue_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_glue_like(tmp_path_factory.mktemp("bam") / "data")


def _settings(**kw) -> MultitaskSettings:
    base = dict(epochs=2, batch_size=16, max_seq_len=32, eval_batch_size=32, log_every=1)
    return MultitaskSettings(**{**base, **kw})


# --- section 3.3: task sampling ----------------------------------------------------------------


def test_sampling_probabilities_are_proportional_to_size_power_0_75() -> None:
    sizes = [2490, 8551, 67349]  # RTE, CoLA, SST-2
    probs = task_probabilities(sizes)
    weights = [n ** 0.75 for n in sizes]
    assert probs == pytest.approx([w / sum(weights) for w in weights])
    assert sum(probs) == pytest.approx(1.0)
    assert task_probabilities(sizes, 1.0) == pytest.approx([n / sum(sizes) for n in sizes])


def test_sampler_draws_tasks_at_those_rates_and_off_means_every_example_once() -> None:
    sizes = [20, 200, 2000]
    sampler = MixtureSampler(sizes)
    gen = torch.Generator().manual_seed(0)
    order = [i for _ in range(10) for i in sampler.epoch(gen)]
    assert len(order) == 10 * sum(sizes)
    counts = [sum(1 for i in order if lo <= i < lo + n)
              for lo, n in zip(sampler.offsets, sizes, strict=True)]
    for count, p in zip(counts, task_probabilities(sizes), strict=True):
        assert count / len(order) == pytest.approx(p, abs=0.01)
    # A small task's examples are all used before any repeats (its own shuffled stream).
    first_small = [i for i in order if i < 20][:20]
    assert sorted(first_small) == list(range(20))
    plain = MixtureSampler(sizes, None).epoch(torch.Generator().manual_seed(0))
    assert sorted(plain) == list(range(sum(sizes)))


# --- section 3.2.2: targets, losses, annealing --------------------------------------------------


def test_teacher_annealing_lambda_schedule() -> None:
    on = distill.Annealing.parse("on")
    assert [on.weight(p) for p in (0.0, 0.25, 0.5, 1.0)] == [0.0, 0.25, 0.5, 1.0]
    assert distill.Annealing.parse("off").weight(0.7) == 0.0  # pure distillation
    assert distill.Annealing.parse("0.5").weight(0.1) == 0.5  # Table 3.4's fixed lambda
    for bad in ("sometimes", "1.5"):
        with pytest.raises(ElectraError, match="teacher-annealing"):
            distill.Annealing.parse(bad)


def test_training_loop_gives_lambda_the_fraction_of_steps_done(tiny_model: Path,
                                                              tmp_path: Path) -> None:
    from electra.finetuning.heads import FinetuneModel
    from electra.finetuning.model_io import load_source

    encoder, _, _ = load_source(tiny_model)
    model = FinetuneModel(encoder, "sequence", 2)
    task = GlueTask("SST-2")
    seen = []

    def collate(idx: list[int], progress: float) -> dict:
        seen.append(progress)
        return {"input_ids": torch.tensor([[2, 5, 3]] * 2), "token_type_ids":
                torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3,
                dtype=torch.long), "labels": torch.tensor([0, 1])}

    plan = TrainPlan("t", 4, lambda gen: [[0, 1]] * 4, collate, task)
    with MetricsLogger(tmp_path) as logger:
        _, steps = train_model(model, plan, FinetuneSettings(), 1e-4, 0.9, 2.0, 1,
                               torch.device("cpu"), False, logger)
    assert steps == 8 and seen == [k / 8 for k in range(8)]


def test_classification_target_and_loss_are_cross_entropy_to_the_mixture() -> None:
    task = GlueTask("RTE")
    logits = torch.tensor([[0.3, -1.2], [2.0, 0.5]])
    teacher = torch.tensor([[1.0, 0.0], [-0.5, 0.5]])
    labels = torch.tensor([1, 0])
    lam = 0.25
    targets = distill.soft_targets(task, labels, teacher, lam)
    expected = lam * F.one_hot(labels, 2).float() + (1 - lam) * teacher.softmax(-1)
    assert torch.allclose(targets, expected)
    assert torch.allclose(targets.sum(-1), torch.ones(2))
    part = distill.add_targets(task, {"labels": labels}, teacher.tolist(), lam)
    loss = task.loss(logits, part)
    manual = -(expected * logits.log_softmax(-1)).sum(-1).mean()
    assert float(loss) == pytest.approx(float(manual), rel=1e-6)
    # lambda = 1 is the gold loss; the accuracy log still counts against gold labels
    gold = task.loss(logits, distill.add_targets(task, {"labels": labels}, teacher.tolist(), 1.0))
    assert float(gold) == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-6)
    assert task.hits(logits, part) == (1, 2)  # argmax [0, 0] vs gold [1, 0]


def test_regression_target_and_loss_are_l2_on_the_normalised_scale(glue_like: Path,
                                                                   tmp_path: Path) -> None:
    task, folder = resolve_task("sim", glue_like)
    from electra.multitask.train import read_task_data

    read_task_data(task, folder, _settings())
    assert task.label_range == (0.0, 4.0) and task.head_kind == "regression"
    sts = GlueTask("STS-B")
    assert sts.head_kind == "sequence"  # single-task STS-B keeps the linear head
    (tmp_path / "STS-B").mkdir()
    assert resolve_task("STS-B", tmp_path)[0].label_range == (0.0, 5.0)
    # teacher predictions are cached in label units and normalised for the student
    rows = distill.student_rows(task, [3.0, 1.0], [{"example_index": 0}, {"example_index": 1}])
    assert rows == [0.75, 0.25]
    labels = torch.tensor([1.0, 0.0])
    part = distill.add_targets(task, {"labels": labels}, rows, 0.4)
    assert torch.allclose(part["targets"], torch.tensor([0.4 + 0.6 * 0.75, 0.6 * 0.25]))
    pred = torch.tensor([[0.5], [0.5]])
    assert float(task.loss(pred, part)) == pytest.approx(
        float(((pred.squeeze(-1) - part["targets"]) ** 2).mean()))
    assert task.hits(pred, part) == (0, 0)
    # the sigmoid head's [0, 1] output maps back to the label scale
    assert task.postprocess([None], [{"example_index": 0}], [torch.tensor([0.5]).numpy()]) == [
        2.0]


def test_sigmoid_regression_head_outputs_in_unit_interval() -> None:
    from electra.model.task_heads import RegressionHead

    head = RegressionHead(8, 1, 0.0)
    out = head(torch.randn(5, 3, 8) * 100)
    assert out.shape == (5, 1) and bool(((out >= 0) & (out <= 1)).all())


def test_mixed_batch_loss_is_per_example_sum_over_the_batch() -> None:
    tasks = {"RTE": GlueTask("RTE"), "CoLA": GlueTask("CoLA")}
    items = [("RTE", {"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "labels": 1}),
             ("CoLA", {"input_ids": [2, 9, 9, 3], "token_type_ids": [0] * 4, "labels": 0}),
             ("RTE", {"input_ids": [2, 3], "token_type_ids": [0, 0], "labels": 0})]
    batch = collate_mixture(items, tasks, pad_id=0)
    assert batch["input_ids"].shape == (3, 4)
    assert batch["tasks"]["RTE"]["rows"].tolist() == [0, 2]
    assert batch["tasks"]["CoLA"]["labels"].tolist() == [0]
    outputs = {"RTE": torch.tensor([[0.1, 0.9], [2.0, -1.0]]), "CoLA": torch.tensor([[0.3, 0.2]])}
    loss = TaskMixture(tasks).loss(outputs, batch)
    per_example = torch.cat([
        F.cross_entropy(outputs["RTE"], torch.tensor([1, 0]), reduction="none"),
        F.cross_entropy(outputs["CoLA"], torch.tensor([0]), reduction="none")])
    assert float(loss) == pytest.approx(float(per_example.sum() / 3), rel=1e-6)


# --- significance ---------------------------------------------------------------------------


def test_holm_bonferroni_and_stars() -> None:
    assert holm_bonferroni([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm_bonferroni([0.5]) == [0.5]
    assert [stars(p) for p in (0.0005, 0.005, 0.02, 0.2)] == ["***", "**", "*", ""]


def test_paired_bootstrap() -> None:
    from electra.tasks.metrics import accuracy

    rng = random.Random(0)
    gold = [rng.choice("01") for _ in range(300)]
    good = [[g if rng.random() < 0.9 else "1" for g in gold] for _ in range(2)]
    poor = [[g if rng.random() < 0.6 else "1" for g in gold] for _ in range(2)]
    better = paired_bootstrap(good, poor, gold, accuracy, samples=200)
    assert better["delta"] > 0.1 and better["p"] < 0.01  # about (0.4 - 0.1) / 2
    same = paired_bootstrap(poor, poor, gold, accuracy, samples=200)
    assert same["delta"] == 0 and same["p"] == 1.0


def test_strategy_names() -> None:
    assert parse_strategy("Single→Multi") == ["single", "multi"]
    assert parse_strategy("single-multi-single-multi") == ["single", "multi"] * 2
    assert parse_strategy("multi") == ["multi"]
    with pytest.raises(ElectraError, match="stages must be single or multi"):
        parse_strategy("single-ensemble")


# --- end to end ---------------------------------------------------------------------------------

TASKS = ["CoLA", "RTE", "sim"]


@pytest.fixture(scope="module")
def multi_run(tiny_model: Path, glue_like: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("multi") / "run"
    return out, run_multitask(tiny_model, TASKS, glue_like, out, _settings(seeds=2))


def test_multitask_run_writes_finetune_style_results(multi_run: tuple[Path, dict]) -> None:
    out, res = multi_run
    assert list(res["tasks"]) == TASKS
    assert res["tasks"]["sim"]["metric"] == "pearson"
    assert res["tasks"]["CoLA"]["metric"] == "mcc"
    primaries = [res["tasks"][t]["median"] for t in TASKS]
    assert res["average"] == pytest.approx(100 * sum(primaries) / 3)
    assert res["glue_score_tasks"] == ["CoLA", "RTE"]
    assert res["glue_score"] == pytest.approx(50 * (primaries[0] + primaries[1]))
    assert res["settings"]["layerwise_decay"] == 0.9 and res["settings"]["lr"] == 3e-4
    assert [s["seed"] for s in res["seeds"]] == [1, 2]
    # every seed's epoch is sum(|D|) examples: 2 epochs of 144 at batch 16
    assert all(s["steps"] == 18 for s in res["seeds"])
    per_task = json.loads((out / "RTE" / "results.json").read_text())
    assert per_task["primary_metric"] == "accuracy" and len(per_task["seeds"]) == 2
    dev = per_task["seeds"][0]["predictions"]["dev"]
    assert Path(dev) == out / "seed1" / "RTE" / "dev_predictions.jsonl"
    rows = [json.loads(line) for line in Path(dev).read_text().splitlines()]
    assert len(rows) == 16 and rows[0]["label"] in ("entailment", "not_entailment")
    sim = [json.loads(line) for line in
           (out / "seed1" / "sim" / "dev_predictions.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["prediction"] <= 4.0 for r in sim)  # sigmoid head, label scale
    info = json.loads((out / "model" / "finetune.json").read_text())
    assert [t["head_kind"] for t in info["tasks"]] == ["sequence", "sequence", "regression"]


def test_multitask_model_evaluate_and_predict_round_trip(multi_run: tuple[Path, dict],
                                                         glue_like: Path, tmp_path: Path
                                                         ) -> None:
    out, res = multi_run
    best = max(res["seeds"], key=lambda s: s["average"])["seed"]
    trained = {t: json.loads((out / t / "results.json").read_text())["seeds"][best - 1]["scores"]
               for t in TASKS}
    ev = evaluate(out / "model", glue_like, tmp_path / "eval")
    assert set(ev["tasks"]) == set(TASKS)
    for t in TASKS:
        assert ev["tasks"][t] == pytest.approx(trained[t], abs=1e-6)
    assert (tmp_path / "eval" / "sim" / "dev_predictions.jsonl").is_file()
    one = evaluate(out / "model", glue_like / "RTE", tmp_path / "rte", task_name="rte")
    assert one["tasks"]["RTE"] == pytest.approx(trained["RTE"], abs=1e-6)
    with pytest.raises(ElectraError, match="trained on CoLA, RTE, sim, not SST-2"):
        evaluate(out / "model", glue_like, tmp_path / "x", task_name="SST-2")
    written = predict(out / "model", glue_like, tmp_path / "pred", task_name="RTE")
    assert written == [str(tmp_path / "pred" / "RTE" / "RTE.tsv")]
    lines = Path(written[0]).read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 6
    written = predict(out / "model", glue_like, tmp_path / "all")  # every task it knows
    assert [str(Path(w).relative_to(tmp_path / "all")) for w in written] == [
        "CoLA/CoLA.tsv", "RTE/RTE.tsv", "sim/test_predictions.jsonl"]


def test_cli_multitask_and_evaluate(tiny_model: Path, glue_like: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture) -> None:
    from electra.cli import main

    assert main(["multitask", "--model", str(tiny_model), "--tasks", "RTE,sim", "--data",
                 str(glue_like), "--out", str(tmp_path / "m"), "--epochs", "1",
                 "--batch-size", "16", "--max-seq-len", "32", "--no-task-sampling",
                 "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["tasks"]) == {"RTE", "sim"}
    res = json.loads((tmp_path / "m" / "results.json").read_text())
    assert res["settings"]["task_sampling"] is False and res["settings"]["batch_size"] == 16
    assert res["settings"]["length_sorted"] is False  # tasks mixed within batches (3.2.1)
    assert main(["evaluate", "--model", str(tmp_path / "m" / "model"), "--data",
                 str(glue_like), "--out", str(tmp_path / "e")]) == 0
    capsys.readouterr()
    # significance against a baseline run (Table 3.1's stars), from the command line
    assert main(["multitask", "--model", str(tiny_model), "--tasks", "RTE,sim", "--data",
                 str(glue_like), "--out", str(tmp_path / "m2"), "--epochs", "1",
                 "--batch-size", "16", "--max-seq-len", "32", "--seed", "5", "--quiet",
                 "--compare", f"multi={tmp_path / 'm'}", "--bootstrap-samples", "50"]) == 0
    sig = json.loads((tmp_path / "m2" / "results.json").read_text())["significance"]
    assert set(sig["by_task"]) == {"RTE", "sim"}
    assert set(sig["by_task"]["sim"]["multi"]) == {"delta", "p", "p_holm", "stars"}
    assert main(["multitask", "--model", str(tiny_model), "--tasks", "RTE", "--data",
                 str(glue_like), "--out", str(tmp_path / "m3"), "--compare", "oops"]) == 1
    assert "NAME=DIR" in capsys.readouterr().err and not (tmp_path / "m3").exists()


@pytest.fixture(scope="module")
def rte_teacher(tiny_model: Path, glue_like: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Path:
    out = tmp_path_factory.mktemp("teacher") / "rte"
    finetune(tiny_model, "RTE", glue_like, out, FinetuneSettings(
        epochs=1, batch_size=16, max_seq_len=32))
    return out / "model"


def test_teacher_predictions_are_cached_and_reused(tiny_model: Path, glue_like: Path,
                                                   rte_teacher: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(epochs=1)
    run_multitask(tiny_model, ["RTE", "CoLA"], glue_like, tmp_path / "a", settings,
                  [rte_teacher])
    cached = list((rte_teacher / distill.CACHE_DIR).glob("RTE-*.json"))
    assert len(cached) == 1
    outputs = json.loads(cached[0].read_text())["outputs"]
    assert len(outputs) == 48 and len(outputs[0]) == 2  # logits per training example
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    assert res["teachers"] == {"RTE": str(rte_teacher), "CoLA": None}

    from electra.finetuning import predict as inference

    def no_teacher_runs(*args, **kwargs):
        raise AssertionError("the teacher ran again")

    monkeypatch.setattr(inference, "load_teacher_view", no_teacher_runs)
    run_multitask(tiny_model, ["RTE", "CoLA"], glue_like, tmp_path / "b", settings,
                  [rte_teacher])
    # other data (a different training subset) is another cache entry
    monkeypatch.undo()
    run_multitask(tiny_model, ["RTE"], glue_like, tmp_path / "c",
                  _settings(epochs=1, max_train_examples=20), [rte_teacher])
    assert len(list((rte_teacher / distill.CACHE_DIR).glob("RTE-*.json"))) == 2


def test_distilled_student_trains_on_the_teacher_at_lambda_zero(
        tiny_model: Path, glue_like: Path, rte_teacher: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With annealing off (lambda = 0) the targets are exactly the teacher's softmax."""
    seen = []
    real = distill.add_targets

    def recording(task, part, rows, lam):
        result = real(task, part, rows, lam)
        seen.append((lam, result["targets"], torch.tensor(rows).softmax(-1)))
        return result

    monkeypatch.setattr(distill, "add_targets", recording)
    run_multitask(tiny_model, ["RTE"], glue_like, tmp_path / "s",
                  _settings(epochs=1, teacher_annealing="off"), [rte_teacher])
    assert seen and all(lam == 0.0 for lam, _, _ in seen)
    assert all(torch.allclose(t, s) for _, t, s in seen)


def test_single_to_multi_strategy_and_significance(tiny_model: Path, glue_like: Path,
                                                   tmp_path: Path) -> None:
    from electra.multitask.significance import add_significance
    from electra.multitask.strategies import SingleOverrides, load_task_results

    settings = _settings(epochs=1)
    single = SingleOverrides(epochs=1, batch_size=16)
    base = run_strategy(tiny_model, ["RTE", "CoLA"], glue_like, tmp_path / "single", "single",
                        settings, single=single)
    assert set(base["tasks"]) == {"RTE", "CoLA"}
    res = run_strategy(tiny_model, ["RTE", "CoLA"], glue_like, tmp_path / "sm", "single-multi",
                       settings, single=single)
    assert res["settings"]["strategy"] == "Single->Multi"
    teachers = res["teachers"]
    assert teachers["RTE"] == str(tmp_path / "sm" / "stages" / "1-single" / "RTE" / "model")
    assert (tmp_path / "sm" / "stages" / "1-single" / "RTE" / "model" / distill.CACHE_DIR
            ).is_dir()
    sig = add_significance(tmp_path / "sm", {"single": load_task_results(tmp_path / "single")},
                           samples=50)["significance"]["by_task"]
    assert set(sig) == {"RTE", "CoLA"}
    assert all(0 < t["single"]["p_holm"] <= 1 and t["single"]["p_holm"] >= t["single"]["p"]
               for t in sig.values())
    # Single->Single: each single-task student distils from its own teacher
    ss = run_strategy(tiny_model, ["RTE"], glue_like, tmp_path / "ss", "single-single",
                      settings, single=single)
    rte = json.loads((tmp_path / "ss" / "RTE" / "results.json").read_text())
    assert rte["settings"]["teacher"].endswith("stages/1-single/RTE/model")
    assert ss["tasks"]["RTE"]["metric"] == "accuracy"
    # Multi->Multi: a multi-task teacher for every task; and repeated rounds
    mm = run_strategy(tiny_model, ["RTE", "sim"], glue_like, tmp_path / "mm", "Multi→Multi",
                      settings)
    assert mm["teachers"] == {t: str(tmp_path / "mm" / "stages" / "1-multi" / "model")
                              for t in ("RTE", "sim")}
    rounds = run_strategy(tiny_model, ["RTE"], glue_like, tmp_path / "r",
                          "single-multi-single-multi", settings, single=single)
    assert rounds["teachers"]["RTE"].endswith("stages/3-single/RTE/model")
    assert sorted(p.name for p in (tmp_path / "r" / "stages").iterdir()) == [
        "1-single", "2-multi", "3-single"]


# --- bad input: one clear error, nothing written ----------------------------------------------


def test_missing_task_data_names_task_and_file(tiny_model: Path, glue_like: Path,
                                               tmp_path: Path) -> None:
    with pytest.raises(ElectraError, match=r"task SST-2: no folder .*data/SST-2"):
        run_multitask(tiny_model, ["RTE", "SST-2"], glue_like, tmp_path / "o", _settings())
    with pytest.raises(ElectraError, match=r"task nosuch: not a GLUE task and no .*task\.json"):
        run_multitask(tiny_model, ["nosuch"], glue_like, tmp_path / "o", _settings())
    assert not (tmp_path / "o").exists()


def test_malformed_task_data_names_the_line(tiny_model: Path, glue_like: Path,
                                            tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_glue_like(data)
    with open(data / "RTE" / "train.tsv", "a") as f:
        f.write("99\tonly two\tcolumns\tmaybe\n")
    with pytest.raises(ElectraError, match=r"task RTE: .*train\.tsv:\d+: label 'maybe'"):
        run_multitask(tiny_model, ["RTE"], data, tmp_path / "o", _settings())
    (data / "sim" / "task.json").write_text("{not json")
    with pytest.raises(ElectraError, match=r"task\.json: line 1: invalid JSON"):
        run_multitask(tiny_model, ["sim"], data, tmp_path / "o", _settings())
    assert not (tmp_path / "o").exists()


def test_teacher_for_another_task_or_label_set_or_vocab(tiny_model: Path, glue_like: Path,
                                                        rte_teacher: Path, tmp_path: Path,
                                                        vocab_dir: Path) -> None:
    with pytest.raises(ElectraError, match=r"fine-tuned on RTE, which is not one of"):
        run_multitask(tiny_model, ["CoLA"], glue_like, tmp_path / "o", _settings(),
                      [rte_teacher])
    import shutil

    relabelled = tmp_path / "relabelled"
    shutil.copytree(rte_teacher, relabelled)
    info = json.loads((relabelled / "finetune.json").read_text())
    info["task"]["labels"] = ["yes", "no"]
    (relabelled / "finetune.json").write_text(json.dumps(info))
    with pytest.raises(ElectraError, match=r"has labels \['yes', 'no'\]"):
        run_multitask(tiny_model, ["RTE"], glue_like, tmp_path / "o", _settings(), [relabelled])
    other_vocab = tmp_path / "vocab"
    shutil.copytree(rte_teacher, other_vocab)
    for name in ("tokenizer.json", "vocab.txt"):
        if (other_vocab / name).is_file():
            (other_vocab / name).unlink()
    lines = (vocab_dir / "vocab.txt").read_text().splitlines()
    (other_vocab / "vocab.txt").write_text("\n".join(lines[:-1] + ["zzzz"]) + "\n")
    with pytest.raises(ElectraError, match="different vocabulary"):
        run_multitask(tiny_model, ["RTE"], glue_like, tmp_path / "o", _settings(), [other_vocab])
    with pytest.raises(ElectraError, match="no finetune.json"):
        run_multitask(tiny_model, ["RTE"], glue_like, tmp_path / "o", _settings(), [tiny_model])
    assert not (tmp_path / "o").exists()


def test_tagging_tasks_are_refused_for_mixing() -> None:
    from electra.multitask.mixture import check_mixable
    from electra.tasks import get_task

    with pytest.raises(ElectraError, match="pos: multi-task training takes sentence"):
        check_mixable(get_task("pos"))
    assert math.isclose(sum(task_probabilities([1, 1])), 1.0)


def test_registry_tasks_that_cannot_mix_are_refused_by_name(tmp_path: Path) -> None:
    """resolve_task builds registry tasks with the registry: a tagging or SQuAD name is refused
    as unmixable (before any stage runs), not taken for a user task."""
    for name in ("chunk", "squad"):
        (tmp_path / name).mkdir()
        with pytest.raises(ElectraError, match=f"{name}: multi-task training takes sentence"):
            resolve_task(name, tmp_path)


def test_single_stages_take_every_setting_but_the_recipe() -> None:
    """The Single stages' shared settings come from FinetuneSettings' fields: all but the
    recipe fields, which are exactly those the multi-task recipe gives other defaults."""
    import dataclasses

    from electra.finetuning.settings import recipe_free_fields
    from electra.multitask.strategies import SingleOverrides, single_settings

    recipe = {f.name for f in dataclasses.fields(FinetuneSettings)} - set(recipe_free_fields())
    assert recipe == {"lr", "layerwise_decay", "epochs", "batch_size", "length_sorted"}
    overridden = {f.name for f in dataclasses.fields(MultitaskSettings)
                  if f.name in recipe and f.default != getattr(FinetuneSettings(), f.name)}
    assert overridden == {"epochs", "batch_size", "length_sorted"}  # lr, decay: by size
    multi = MultitaskSettings(seeds=3, max_seq_len=64, dropout=0.2, tensorboard=True)
    single = single_settings(multi, SingleOverrides(epochs=2.0))
    assert (single.seeds, single.max_seq_len, single.dropout, single.tensorboard) == (
        3, 64, 0.2, True)
    assert (single.epochs, single.batch_size, single.length_sorted) == (2.0, 32, True)

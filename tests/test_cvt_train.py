"""CVT training: the EMA weights are what is saved (4.3.1), resume is exact, multi-task CVT
(4.1.2), the lr schedule (Table 4.1), and the `electra cvt` commands end to end."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from cvt_helpers import TINY, write_chunk, write_ner, write_ud, write_unlabeled
from safetensors.torch import load_file

from electra.cli import main
from electra.cvt.batch import Sampler
from electra.cvt.config import make_config
from electra.cvt.model import load_model_dir
from electra.cvt.run import TrainSettings, run_evaluate, run_train
from electra.cvt.train import EMA, lr_factor, supervised_task_index, unlabeled_minibatches
from electra.errors import ElectraError


@pytest.fixture()
def data(tmp_path):
    return {"chunk": write_chunk(tmp_path / "chunk"), "ud": write_ud(tmp_path / "ud"),
            "unlabeled": write_unlabeled(tmp_path / "raw.txt")}


def _settings(files, out, overrides=TINY, **kw) -> TrainSettings:
    base = dict(tasks=["chunk"], data=[str(files["chunk"])], out=str(out),
                config=make_config("small", overrides), unlabeled=[str(files["unlabeled"])],
                steps=6, seed=3, save_every=0)
    base.update(kw)
    return TrainSettings(**base)


def test_the_saved_model_is_the_ema_of_the_weights_section_4_3_1(data, tmp_path):
    out = tmp_path / "run"
    res = run_train(_settings(data, out, steps=4, overrides={**TINY, "ema_decay": 0.5}))
    saved = load_file(str(out / "model" / "model.safetensors"))
    ckpt_dir = out / "checkpoints" / "step_00000004"
    live = load_file(str(ckpt_dir / "model.safetensors"))
    ema = load_file(str(ckpt_dir / "ema.safetensors"))
    assert saved.keys() == ema.keys()
    assert all(torch.equal(saved[k], ema[k]) for k in saved)
    assert any(not torch.equal(saved[k], live[k]) for k in saved)
    # and the dev scores in results.json are the saved model's
    model, vocab, tasks = load_model_dir(out / "model")
    ev = tmp_path / "eval"
    assert main(["cvt-evaluate", "--model", str(out / "model"), "--data", str(data["chunk"]),
                 "--out", str(ev)]) == 0
    assert json.loads((ev / "results.json").read_text())["scores"] == res["scores"]


def test_ema_follows_the_tensorflow_num_updates_rule():
    lin = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(0.0)
    ema = EMA(lin, 0.998)
    with torch.no_grad():
        lin.weight.fill_(1.0)
    ema.update(lin)  # decay min(0.998, 2/11)
    assert ema.shadow["weight"].item() == pytest.approx(1 - 2 / 11)


def test_lr_schedule_table_4_1():
    cfg = make_config("paper", {"warmup_steps": 0})
    f = lr_factor(cfg)
    assert f(0) == 1.0
    assert f(10_000) == pytest.approx(1 / (1 + 0.005 * 100))
    warm = lr_factor(make_config("paper"))  # reference: linear warm-up over 5,000 updates
    assert warm(2499) == pytest.approx(0.5 / (1 + 0.005 * math.sqrt(2499)))


def test_resume_is_exact(data, tmp_path):
    straight = tmp_path / "straight"
    run_train(_settings(data, straight, steps=6, save_every=3))
    split = tmp_path / "split"
    run_train(_settings(data, split, steps=3))
    res = run_train(_settings(data, split, steps=6, resume=True))
    a = load_file(str(straight / "model" / "model.safetensors"))
    b = load_file(str(split / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert res["scores"] == json.loads((straight / "results.json").read_text())["scores"]
    with pytest.raises(Exception, match="different settings"):
        run_train(_settings(data, split, steps=6, seed=4, resume=True))


def test_checkpoints_take_lstm_weights_that_are_views_of_one_buffer(tmp_path):
    """On a GPU, cuDNN keeps each LSTM's weights as views of one flat buffer, which
    safetensors' `save_model` refuses; CVT's checkpoints write (and read) them as separate
    tensors. The flat buffer is built by hand here, on the CPU."""
    from safetensors.torch import save_model
    from torch import nn

    from electra.runtime import checkpoint as ckpt

    lstm = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    params = list(lstm.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    offset = 0
    for p in params:
        p.data = flat[offset: offset + p.numel()].view_as(p)
        offset += p.numel()
    opt = torch.optim.SGD(lstm.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0)
    with pytest.raises(RuntimeError):
        save_model(lstm, str(tmp_path / "refused.safetensors"))
    tmp = ckpt.begin(tmp_path / "run", 7)
    ckpt.write_main(tmp, lstm, opt, sched, 7, untied=True)
    ckpt.write_rng(tmp, 0)
    saved = ckpt.commit(tmp, tmp_path / "run", 7, {}, keep=1)
    fresh = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    opt2 = torch.optim.SGD(fresh.parameters(), lr=0.1)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda t: 1.0)
    assert ckpt.load(saved, fresh, opt2, sched2, rank=0, untied=True) == 7
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), params, strict=True))


def test_sampler_state_is_its_position():
    a = Sampler([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], 3, seed=7, pool=2)
    first = [a.next() for _ in range(5)]
    b = Sampler([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], 3, seed=7, pool=2)
    b.load_state_dict({"epoch": 0, "offset": 2})
    assert [b.next() for _ in range(3)] == first[2:]
    assert sorted(i for batch in first[:4] for i in batch) == list(range(10))


def test_multitask_supervised_task_is_drawn_by_sqrt_size_section_4_1_2():
    """4.1.2: each supervised step trains a task picked at random; as in the reference, with
    probability proportional to the square root of its training-set size (here 100 vs 900
    sentences: 1/4 vs 3/4), and the same (seed, step) picks the same task (resume repeats it)."""
    picks = [supervised_task_index([100, 900], seed=3, step=t) for t in range(4000)]
    # the draw cached runs and exact resume were made with: one Random per (seed, step)
    assert picks == [random.Random(3 * 1_000_003 + t).choices([0, 1], [10, 30])[0]
                     for t in range(4000)]
    assert abs(picks.count(0) / len(picks) - 0.25) < 0.03
    assert picks == [supervised_task_index([100, 900], seed=3, step=t) for t in range(4000)]
    assert picks != [supervised_task_index([100, 900], seed=4, step=t) for t in range(4000)]


def test_multitask_cvt_trains_every_task_section_4_1_2(data, tmp_path):
    out = tmp_path / "mt"
    res = run_train(_settings(data, out, tasks=["chunk", "pos", "dep"], steps=4,
                              data=[f"chunk={data['chunk']}", f"pos={data['ud']}",
                                    f"dep={data['ud']}"]))
    assert set(res["scores"]) == {"chunk", "pos", "dep"}
    assert set(res["scores"]["dep"]) == {"uas", "las"}
    assert (out / "dep_dev_predictions.conllu").is_file()
    assert (out / "pos_dev_predictions.txt").is_file()
    _, _, tasks = load_model_dir(out / "model")
    assert [t.name for t in tasks] == ["chunk", "pos", "dep"]


def test_cli_train_predict_and_errors(data, tmp_path, capsys):
    out = tmp_path / "cli"
    sets = [a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]
    assert main(["cvt", "--tasks", "dep", "--data", str(data["ud"]), "--no-cvt", "--out",
                 str(out), "--steps", "3", *sets]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["scores"]["dep"]) == {"uas", "las"}
    pred = tmp_path / "pred.conllu"
    assert main(["cvt-predict", "--model", str(out / "model"), "--input",
                 str(data["ud"] / "dev.conllu"), "--output", str(pred)]) == 0
    lines = [x for x in pred.read_text().splitlines() if x]
    assert len(lines) == 8 * 6 and all(len(x.split("\t")) == 10 for x in lines)
    # bad input: one line naming file:line, nothing written
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.txt").write_text("a DT B-NP\nb NN\n")
    (bad / "test.txt").write_text("a DT B-NP\n")
    capsys.readouterr()
    assert main(["cvt", "--tasks", "chunk", "--data", str(bad), "--no-cvt", "--out",
                 str(tmp_path / "never"), "--steps", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"electra cvt: error: {bad / 'train.txt'}:2: 2 columns, expected 3"
    assert not (tmp_path / "never").exists()
    assert main(["cvt", "--tasks", "chunk", "--data", str(data["chunk"]), "--out",
                 str(tmp_path / "x"), "--steps", "1"]) == 1
    assert "--unlabeled" in capsys.readouterr().err
    assert main(["cvt", "--tasks", "chunk,pos", "--data", str(data["chunk"]), "--no-cvt",
                 "--out", str(tmp_path / "y"), "--steps", "1"]) == 1
    assert "TASK=DIR" in capsys.readouterr().err


def test_word_vectors_initialise_embeddings(data, tmp_path):
    vec = tmp_path / "vec.txt"
    vec.write_text("dog " + " ".join(["0.5"] * TINY["word_dim"]) + "\n")
    out = tmp_path / "wv"
    res = run_train(_settings(data, out, steps=1, word_vectors=str(vec), cvt=False,
                              overrides={**TINY, "lr": 1e-9}))
    assert res["word_vectors"] == {"file": str(vec), "found": 1}
    model, vocab, _ = load_model_dir(out / "model")
    row = model.encoder.word_embed.weight[vocab.word_id("dog")]
    assert torch.allclose(row, torch.full_like(row, 0.5), atol=1e-6)
    res = run_train(_settings(data, out, steps=2, word_vectors=str(vec), cvt=False,
                              overrides={**TINY, "lr": 1e-9}, resume=True))
    assert res["steps"] == 2 and res["word_vectors"] == {"file": str(vec), "found": 1}


def test_word_vectors_of_the_wrong_width_fail_before_out_is_written(data, tmp_path):
    vec = tmp_path / "vec.txt"
    vec.write_text("dog 0.5 0.5 0.5\n")
    out = tmp_path / "wv"
    with pytest.raises(ElectraError) as err:
        run_train(_settings(data, out, steps=1, word_vectors=str(vec), cvt=False))
    assert str(err.value) == (f"{vec}: the vectors have 3 dimensions, the model's word "
                              f"embeddings {TINY['word_dim']} (give --set cvt.word_dim=3)")
    assert not out.exists()


def test_evaluate_reads_every_tasks_file_before_writing_anything(data, tmp_path):
    out = tmp_path / "mt"
    run_train(_settings(data, out, tasks=["chunk", "dep"], steps=1, cvt=False,
                        data=[f"chunk={data['chunk']}", f"dep={data['ud']}"]))
    bad = tmp_path / "bad_ud"
    bad.mkdir()
    (bad / "dev.conllu").write_text("1\tdog\n")
    scored = tmp_path / "scored"
    with pytest.raises(ElectraError, match=f"{bad / 'dev.conllu'}:1"):
        run_evaluate(str(out / "model"), [f"chunk={data['chunk']}", f"dep={bad}"],
                     str(scored), split="dev")
    assert not scored.exists()
    res = run_evaluate(str(out / "model"), [f"chunk={data['chunk']}", f"dep={data['ud']}"],
                       str(scored), split="dev")
    assert sorted(p.name for p in scored.iterdir()) == [
        "chunk_dev_predictions.txt", "dep_dev_predictions.conllu", "results.json"]
    assert set(res["scores"]) == {"chunk", "dep"}


def test_ner_from_conll2003_files_and_predict_on_bare_words(tmp_path, capsys):
    d = write_ner(tmp_path / "ner")
    out = tmp_path / "out"
    sets = [a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")]
    assert main(["cvt", "--tasks", "ner", "--data", str(d), "--no-cvt", "--out", str(out),
                 "--epochs", "2", *sets, "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["steps"] == 4  # 6 sentences, batch 4: 2 batches per epoch, 2 epochs
    assert set(res["scores"]["ner"]) == {"f1", "precision", "recall"}
    _, _, tasks = load_model_dir(out / "model")
    assert tasks[0].labels == ["B-PER", "E-PER", "O", "S-MISC", "S-ORG"]  # BIOES inside
    dev_lines = (out / "ner_dev_predictions.txt").read_text().split("\n")
    assert dev_lines[0].split()[:2] == ["EU", "I-ORG"]  # word, gold as given, prediction
    words = tmp_path / "words.txt"
    words.write_text("Peter\nvisits\nGermany\n\nEU\n")
    pred = tmp_path / "pred.txt"
    capsys.readouterr()
    assert main(["cvt-predict", "--model", str(out / "model"), "--input", str(words),
                 "--output", str(pred)]) == 0
    rows = [line.split() for line in pred.read_text().splitlines()]
    assert [r[0] for r in rows if r] == ["Peter", "visits", "Germany", "EU"]
    assert all(len(r) == 2 and (r[1] == "O" or r[1][:2] in ("B-", "I-")) for r in rows if r)


def test_paper_preset_is_table_4_1():
    cfg = make_config("paper")
    assert (cfg.char_dim, cfg.char_widths, cfg.char_filters) == (50, [2, 3, 4], 100)
    assert (cfg.lstm1, cfg.lstm2, cfg.projection, cfg.hidden) == (1024, 512, 512, 512)
    assert (cfg.keep_labeled, cfg.keep_unlabeled, cfg.ema_decay) == (0.5, 0.8, 0.998)
    assert (cfg.lr, cfg.lr_decay, cfg.momentum, cfg.batch_size) == (0.5, 0.005, 0.9, 64)
    assert cfg.label_smoothing == 0.1 and cfg.word_dim == 300
    from electra.cvt.encoder import Encoder

    enc = Encoder(cfg, n_words=10, n_chars=10)
    assert (enc.lstm1.hidden_size, enc.lstm1.proj_size, enc.d1) == (1024, 512, 512)
    assert enc.full_dim == 2 * 512 + 2 * 512 and enc.chars.out_dim == 300
    with pytest.raises(Exception, match="unknown key 'lstm3'"):
        make_config("small", {"lstm3": 1})


def test_cvt_weight_scales_the_unlabeled_loss_and_defaults_to_the_papers_1(data, tmp_path):
    """L = L_sup + L_CVT (4.1.1) by default; `cvt_weight` (not in the paper) scales L_CVT.
    The `small-cpu` preset is `small` at a quarter weight. At weight 0 the auxiliary modules,
    trained by L_CVT alone, stop moving."""
    assert make_config("paper").cvt_weight == 1.0 and make_config("small").cvt_weight == 1.0
    small, cpu = make_config("small").to_dict(), make_config("small-cpu").to_dict()
    assert {k for k in small if small[k] != cpu[k]} == {"cvt_weight"}
    assert cpu["cvt_weight"] == 0.25
    with pytest.raises(Exception, match="cvt_weight"):
        make_config("small", {"cvt_weight": -1.0})

    def aux_between_steps_2_and_3(weight: float) -> tuple[dict, dict]:
        out = tmp_path / f"w{weight}"
        run_train(_settings(data, out, steps=3, save_every=1,
                            overrides={**TINY, "cvt_weight": weight}))
        a, b = (load_file(str(out / "checkpoints" / f"step_0000000{k}" / "model.safetensors"))
                for k in (2, 3))
        keys = [k for k in a if ".aux." in k]
        assert keys
        return {k: a[k] for k in keys}, {k: b[k] for k in keys}

    a, b = aux_between_steps_2_and_3(0.0)
    assert all(torch.equal(a[k], b[k]) for k in a)
    a, b = aux_between_steps_2_and_3(1.0)
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_unlabeled_ratio_sets_unlabeled_minibatches_per_labeled_one_section_4_1_1(data, tmp_path):
    """The paper alternates one labeled and one unlabeled minibatch (4.1.1), the default;
    `unlabeled_ratio` r takes floor(n * r) unlabeled minibatches in n steps, evenly spread, and
    a resumed run takes the same ones."""
    assert make_config("paper").unlabeled_ratio == 1.0
    for ratio in (0.25, 1 / 3, 0.5, 1.0, 1.5, 2.0):
        counts = [unlabeled_minibatches(ratio, step) for step in range(12)]
        assert [sum(counts[:n]) for n in range(13)] == [math.floor(n * ratio + 1e-9)
                                                        for n in range(13)]
    assert [unlabeled_minibatches(0.5, step) for step in range(4)] == [0, 1, 0, 1]
    with pytest.raises(ElectraError, match="unlabeled_ratio"):
        make_config("small", {"unlabeled_ratio": 0.0})

    def updates(out) -> int:
        state = torch.load(out / "checkpoints" / "step_00000004" / "cvt_state.pt",
                           weights_only=False)
        return state["ema_updates"]

    for ratio, expected in ((0.5, 4 + 2), (1.0, 4 + 4), (2.0, 4 + 8)):
        out = tmp_path / f"r{ratio}"
        run_train(_settings(data, out, steps=4, overrides={**TINY, "unlabeled_ratio": ratio}))
        assert updates(out) == expected
    split = tmp_path / "split"
    run_train(_settings(data, split, steps=3, overrides={**TINY, "unlabeled_ratio": 0.5}))
    run_train(_settings(data, split, steps=4, resume=True,
                        overrides={**TINY, "unlabeled_ratio": 0.5}))
    a = load_file(str(tmp_path / "r0.5" / "model" / "model.safetensors"))
    b = load_file(str(split / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sigterm_checkpoints_the_step_and_resume_is_exact(data, tmp_path, monkeypatch, capsys):
    """As `pretrain`: a stop signal during step 2 finishes it, writes its checkpoint,
    exits EXIT_PREEMPTED with one line; --resume ends where the uninterrupted run ends."""
    import os
    import signal

    from electra.cvt import train as cvt_train
    from electra.errors import EXIT_PREEMPTED

    straight = tmp_path / "straight"
    run_train(_settings(data, straight, steps=4))
    real, calls = cvt_train.labeled_loss, []

    def labeled_loss(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    out = tmp_path / "split"
    argv = ["cvt", "--tasks", "chunk", "--data", str(data["chunk"]), "--unlabeled",
            str(data["unlabeled"]), "--out", str(out), "--steps", "4", "--seed", "3",
            *(a for k, v in TINY.items() for a in ("--set", f"cvt.{k}={v}")), "--quiet"]
    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as mp:
        mp.setattr(cvt_train, "labeled_loss", labeled_loss)
        capsys.readouterr()
        assert main(argv) == EXIT_PREEMPTED
    assert signal.getsignal(signal.SIGTERM) is before
    latest = out / "checkpoints" / "step_00000002"
    assert capsys.readouterr().err.splitlines() == [
        f"electra cvt: stopped by SIGTERM after step 2 of 4; checkpoint {latest} written; "
        "continue with the same command plus --resume"]
    assert not (out / "model").exists()
    assert main([*argv, "--resume"]) == 0
    a = load_file(str(straight / "model" / "model.safetensors"))
    b = load_file(str(out / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_cvt_trains_only_the_views_asked_for(data, tmp_path, monkeypatch):
    """cvt.aux_views (a named departure, for probing): L_CVT over those views alone; an unknown
    view is a one-line error before training."""
    from electra.cvt import train as cvt_train

    trained: list[str] = []
    real = cvt_train.cvt_loss

    def spy(teacher, logits, mask):
        trained.append(mask.sum().item())
        return real(teacher, logits, mask)

    monkeypatch.setattr(cvt_train, "cvt_loss", spy)
    settings = _settings(data, tmp_path / "two", overrides={**TINY, "aux_views": ["fwd", "bwd"]},
                         steps=3)
    run_train(settings, progress=False)
    assert len(trained) == 3 * 2  # two views per unlabeled minibatch, one minibatch per step
    trained.clear()
    run_train(_settings(data, tmp_path / "all", steps=3), progress=False)
    assert len(trained) == 3 * 5  # fwd, bwd, future, past and the full view
    with pytest.raises(ElectraError, match="cvt.aux_views: unknown view 'sideways'"):
        run_train(_settings(data, tmp_path / "bad", overrides={**TINY,
                                                              "aux_views": ["sideways"]}),
                  progress=False)

"""`--precision auto|fp32|bf16|fp16` (electra.precision) and fp16's dynamic loss scaling in the
shared update (electra.runtime.skeleton): growth and back-off, overflow steps skipped without
touching parameters or moments, divergence told apart from overflow, the scaler's state in
checkpoints, and the choices `auto` makes on hardware these tests can only mock (a CUDA GPU
without bf16, an Apple GPU). torch's CPU autocast computes float16, and GradScaler("cpu")
exists, so all of it runs here."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from electra import device as device_mod
from electra.cli import main
from electra.device import resolve_device
from electra.errors import ElectraError
from electra.precision import MAX_OVERFLOWS_IN_A_ROW, autocast, make_scaler, resolve_precision
from electra.runtime.skeleton import StepLoop, Update

# ----------------------------------------------------------------------------- choices


def test_auto_takes_fp16_on_a_cuda_gpu_without_bf16_and_bf16_on_one_with_it(monkeypatch):
    """Compute capability 7.x (T4, V100) has no native bf16: loss-scaled fp16 there."""
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    assert resolve_precision("auto", cuda) == "fp16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert resolve_precision("auto", cuda) == "bf16"
    assert resolve_precision("fp32", cuda) == "fp32"


def test_auto_follows_the_cpu_and_is_fp32_on_an_apple_gpu(monkeypatch):
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: True)
    assert resolve_precision("auto", torch.device("cpu")) == "bf16"
    assert resolve_precision("auto", torch.device("mps")) == "fp32"
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: False)
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert resolve_precision("fp16", torch.device("cpu")) == "fp16"  # asked for: allowed


def test_only_fp16_has_a_scaler_and_fp32_no_autocast():
    cpu = torch.device("cpu")
    assert make_scaler(cpu, "fp32") is None and make_scaler(cpu, "bf16") is None
    assert isinstance(make_scaler(cpu, "fp16"), torch.amp.GradScaler)
    with autocast(cpu, "fp16"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    with autocast(cpu, "fp32"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_auto_device_takes_an_apple_gpu_after_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_mod, "mps_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps")
    assert resolve_device("mps") == torch.device("mps")
    monkeypatch.setattr(device_mod, "mps_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("command", ["pretrain", "finetune", "multitask", "cvt"])
def test_device_mps_is_accepted_and_refused_in_one_line_where_absent(command, monkeypatch,
                                                                     tmp_path, capsys):
    monkeypatch.setattr(device_mod, "mps_available", lambda: False)
    argv = {"pretrain": ["--data", str(tmp_path)],
            "finetune": ["--model", str(tmp_path), "--task", "SST-2", "--data", str(tmp_path)],
            "multitask": ["--model", str(tmp_path), "--tasks", "RTE,SST-2", "--data",
                          str(tmp_path)],
            "cvt": ["--tasks", "chunk", "--data", str(tmp_path), "--steps", "1", "--no-cvt"],
            }[command]
    out = tmp_path / "out"
    assert main([command, *argv, "--out", str(out), "--device", "mps"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--device mps: no Apple GPU" in err[0], err
    assert not out.exists()


def test_precision_and_its_aliases_are_one_choice(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--data", "d", "--out", "o", "--bf16", "--precision", "fp16"])
    assert "not allowed with argument" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the scaler


def _model_and_update(growth_interval: int = 2, init_scale: float = 2.0**10):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    return model, Update(opt, sched, list(model.parameters()), 1.0, scaler=scaler)


def _step(model, update: Update, loop: StepLoop, poison: float | None = None):
    x = torch.randn(8, 4)
    with autocast(torch.device("cpu"), "fp16"):
        loss = model(x).float().pow(2).mean()
    if poison is not None:
        loss = loss * poison
    update.backward(loss)
    applied = loop.update(update, loss.detach())
    loop.end_step()
    return applied


def _snapshot(model, opt):
    return ([p.detach().clone() for p in model.parameters()],
            {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in model.parameters()})


def test_the_scale_grows_after_clean_steps_and_backs_off_at_an_overflow():
    model, update = _model_and_update(growth_interval=2, init_scale=2.0**10)
    loop = StepLoop(10)
    assert _step(model, update, loop) and _step(model, update, loop)
    assert update.scaler.get_scale() == 2.0**11  # 2 clean steps: x2
    params, moments = _snapshot(model, update.optimizer)
    lr_before = update.lr
    assert not _step(model, update, loop, poison=float("inf"))  # an overflowing step
    assert update.scaler.get_scale() == 2.0**10  # /2
    assert loop.overflows == 1 and loop.skipped == 0
    after, after_moments = _snapshot(model, update.optimizer)
    assert all(torch.equal(a, b) for a, b in zip(params, after, strict=True))
    for key, state in moments.items():  # parameters, both moments and the step: untouched
        for name, value in state.items():
            assert torch.equal(value, after_moments[key][name]), name
    assert update.scheduler.last_epoch == 3 and update.lr == lr_before  # the schedule advanced
    assert _step(model, update, loop)  # training goes on, and the run of overflows ends
    assert loop.overflows_in_a_row == 0


def test_non_finite_values_at_loss_scale_1_are_divergence_not_overflow():
    model, update = _model_and_update(init_scale=1.0)
    loop = StepLoop(10)
    with pytest.raises(ElectraError, match=r"loss scale 1\b.*divergence, not an fp16 overflow"):
        _step(model, update, loop, poison=float("nan"))


def test_many_overflows_in_a_row_are_an_error_that_says_what_to_do():
    model, update = _model_and_update(init_scale=2.0**60)
    loop = StepLoop(100, nonfinite_hint=lambda: "try a lower --lr")
    with pytest.raises(ElectraError) as info:
        for _ in range(MAX_OVERFLOWS_IN_A_ROW):
            _step(model, update, loop, poison=float("inf"))
    assert loop.overflows == MAX_OVERFLOWS_IN_A_ROW - 1
    message = str(info.value)
    assert f"{MAX_OVERFLOWS_IN_A_ROW} overflow(s) in a row" in message
    assert "try a lower --lr" in message and "--precision bf16 or fp32" in message


# ----------------------------------------------------------------------------- runs


def _fp16_run(data_dir, out, resume=False, steps=4, **train):
    from test_gpu_path import _tiny

    from electra.pretraining.loop import pretrain

    cfg = _tiny(steps, 1, save_every=2, precision="fp16", **train)
    return pretrain(cfg, data_dir, out, resume=resume, device="cpu", show_progress=False)


def test_an_fp16_pretraining_run_resumes_bit_exact(data_dir, tmp_path, monkeypatch):
    """Stopped after its step-2 checkpoint and resumed, an fp16 run ends with the weights and
    the loss scale of an uninterrupted one; its metrics count the skipped overflows."""
    from resume_helpers import interrupted_and_resumed

    _fp16_run(data_dir, tmp_path / "reference")
    interrupted_and_resumed(lambda out, resume=False: _fp16_run(data_dir, out, resume),
                            tmp_path / "out", monkeypatch, stop_after=2)
    for name in ("discriminator", "generator"):
        a, b = (load_file(str(tmp_path / run / "final" / name / "model.safetensors"))
                for run in ("reference", "out"))
        assert all(torch.equal(a[k], b[k]) for k in a)
    logs = [[json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text()
             .splitlines() if "loss_scale" in line] for run in ("reference", "out")]
    assert [r["step"] for r in logs[1]] == [1, 2, 3, 4]
    assert ([(r["loss_scale"], r["skipped_overflow"]) for r in logs[0]]
            == [(r["loss_scale"], r["skipped_overflow"]) for r in logs[1]])
    saved = json.loads((tmp_path / "out" / "settings.json").read_text())
    assert saved["train"]["precision"] == "fp16"
    trainer = torch.load(tmp_path / "out" / "checkpoints" / "step_00000004" / "trainer.pt",
                         weights_only=False)
    assert trainer["scaler"]["scale"] == logs[0][-1]["loss_scale"]


def test_the_compiled_step_refuses_fp16_in_one_line(data_dir, tmp_path):
    with pytest.raises(ElectraError, match="compile_step does not take fp16") as info:
        _fp16_run(data_dir, tmp_path / "out", compile_step=True)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_finetuning_trains_in_fp16_and_records_it(tiny_model, tmp_path):
    from electra.finetuning.run import finetune
    from electra.finetuning.settings import FinetuneSettings

    data = tmp_path / "SST-2"
    data.mkdir()
    rows = ["sentence\tlabel"] + [f"{'good fine' if i % 2 else 'bad awful'} day {i}\t{i % 2}"
                                  for i in range(24)]
    for split in ("train", "dev"):
        (data / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    results = finetune(tiny_model, "SST-2", data, tmp_path / "out",
                       FinetuneSettings(precision="fp16", device="cpu", epochs=1,
                                        batch_size=8))
    assert results["settings"]["precision"] == "fp16"
    assert 0.0 <= results["median"]["accuracy"] <= 1.0

"""`electra export --onnx`: a model directory as an ONNX graph with dynamic batch and sequence
axes, checked against PyTorch with ONNX Runtime before it is kept, and optionally an int8 copy
(dynamic quantisation of the matmul weights). The packages are an optional extra
(`pip install -e '.[onnx]'` in the checkout)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from electra.architectures import ARCHITECTURES
from electra.errors import ElectraError, install_hint
from electra.exporting.serving import (
    INPUT_NAMES,
    Served,
    check_out_dir,
    load_served,
)
from electra.fileutil import staged_dir
from electra.finetuning.model_io import finetuned_config
from electra.hub import resolve_model_path
from electra.model.card import default_name, write_model_card
from electra.model.encoder import known_padding
from electra.model.hf import read_config_json
from electra.tokenizer import copy_tokenizer_files, load_tokenizer, tokenized_batch

ONNX_PACKAGES = ("onnx", "onnxruntime", "onnxscript")
FP32_TOLERANCE = 1e-4
# A batch to check the graph with: padded rows of different lengths, one a sentence pair.
CHECK_TEXTS = ["the quick brown fox jumps over the lazy dog",
               "a short one",
               ("is this a question", "yes, and here is a second segment of the pair")]


def require_onnx() -> None:
    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ElectraError(f"ONNX export needs {', '.join(missing)}: {install_hint('onnx')}")


def check_batches(model_dir: Path, max_len: int) -> list[dict[str, torch.Tensor]]:
    """Two batches of other shapes, tokenised with the model's own tokenizer: `CHECK_TEXTS`
    padded (the one the graph is traced with), and its sentence pair alone, unpadded (a pair,
    so a SQuAD model has a context to score)."""
    tokenizer = load_tokenizer(model_dir)
    return [tokenized_batch(tokenizer, texts, max_len)
            for texts in (CHECK_TEXTS, CHECK_TEXTS[2:3])]


def torch_outputs(served: Served, batch: dict[str, torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        return [t.float().numpy() for t in served.module(*(batch[n] for n in INPUT_NAMES))]


def onnx_outputs(path: Path, batch: dict[str, torch.Tensor]) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {n: batch[n].numpy() for n in INPUT_NAMES if n in names})


def onnx_difference(served: Served, path: Path, batches: list[dict[str, torch.Tensor]]
                    ) -> float:
    """Largest difference between the graph at `path` and PyTorch over `batches`."""
    return max(max_difference(torch_outputs(served, b), onnx_outputs(path, b)) for b in batches)


def max_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Largest absolute difference over all outputs; masked logits (the dtype's minimum at
    padding) compare as equal where both are masked."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        masked = (x <= np.finfo(np.float32).min / 2) & (y <= np.finfo(np.float32).min / 2)
        worst = max(worst, float(np.abs(np.where(masked, 0.0, x - y)).max()))
    return worst


def export_graph(served: Served, path: Path, batch: dict[str, torch.Tensor]) -> None:
    """torch.export -> ONNX, batch and sequence axes dynamic. Attention runs the plain
    matmul-softmax-matmul kernel (every runtime has it), and the padding test is answered up
    front (`known_padding`), so the graph has no data-dependent branch."""
    from torch.export import Dim

    encoders = tuple(arch.load("encoder") for arch in ARCHITECTURES.values())
    [encoder] = [m for m in served.module.modules() if isinstance(m, encoders)]
    encoder.prepare_for_export()  # its architecture's graph for every runtime
    max_len = encoder.config.max_position_embeddings
    batch_dim, seq_dim = Dim("batch", min=1, max=4096), Dim("sequence", min=2, max=max_len)
    shapes = {name: {0: batch_dim, 1: seq_dim} for name in INPUT_NAMES}
    args = tuple(batch[n] for n in INPUT_NAMES)
    with known_padding(True), torch.no_grad():
        program = torch.onnx.export(served.module, args, input_names=list(INPUT_NAMES),
                                    output_names=list(served.output_names),
                                    dynamic_shapes=shapes, dynamo=True, external_data=False,
                                    verbose=False)
    program.save(str(path), external_data=False)


@contextlib.contextmanager
def quiet_exporters() -> Iterator[None]:
    """The exporter's and quantiser's advice (torchvision missing, pre-processing) is not for
    our users: warnings and log records below ERROR are dropped while they run."""
    root, previous = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)
    torch_onnx = logging.getLogger("torch.onnx")
    torch_previous = torch_onnx.level
    torch_onnx.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(previous)
        torch_onnx.setLevel(torch_previous)


def quantize_int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)


def export_onnx(model_dir: str | Path, out_dir: str | Path, task: str | None = None,
                int8: bool = False, overwrite: bool = False, card_extra: str | None = None,
                revision: str | None = None, card_license: str | None = None) -> dict:
    """Write OUT/model.onnx (+ model.int8.onnx), the model's config.json and tokenizer files,
    export.json (inputs, outputs, differences from PyTorch) and the model card (`card_extra`:
    the user's own section appended; `card_license`: the license its metadata states). Nothing
    is kept when the fp32 graph differs from PyTorch by more than `FP32_TOLERANCE`.
    `model_dir` may be a Hub id (at `revision`)."""
    require_onnx()
    model_dir, out = resolve_model_path(model_dir, revision, "MODEL"), Path(out_dir)
    check_out_dir(out, overwrite, "--onnx")
    served = load_served(model_dir, task)
    batches = check_batches(model_dir, 64)
    report = {"model": str(model_dir), "kind": served.kind, "task": task,
              "inputs": list(INPUT_NAMES), "outputs": list(served.output_names),
              "dynamic_axes": {"0": "batch", "1": "sequence"}}
    with staged_dir(out) as tmp:
        with quiet_exporters():
            export_graph(served, tmp / "model.onnx", batches[0])
        report["max_abs_diff"] = onnx_difference(served, tmp / "model.onnx", batches)
        if report["max_abs_diff"] > FP32_TOLERANCE:
            raise ElectraError(f"{model_dir}: the ONNX graph's outputs differ from PyTorch's by "
                               f"{report['max_abs_diff']:.2e} (> {FP32_TOLERANCE:g}); nothing "
                               "written")
        if int8:
            with quiet_exporters():
                quantize_int8(tmp / "model.onnx", tmp / "model.int8.onnx")
            report["int8_max_abs_diff"] = onnx_difference(served, tmp / "model.int8.onnx",
                                                          batches)
        # The model's config (this task's labels, also for one head of a multi-task model),
        # without the auto_map: the modeling code stays with the PyTorch directory.
        config = read_config_json(model_dir) if served.info is None else \
            finetuned_config(served.module.model, served.info)
        config.pop("auto_map", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        copy_tokenizer_files(model_dir, tmp)
        (tmp / "export.json").write_text(json.dumps(report, indent=2) + "\n")
        write_model_card(tmp, name=default_name(out), extra=card_extra, license_id=card_license)
    report["summary"] = (f"{out / 'model.onnx'}: {served.kind}, outputs "
                         f"{', '.join(served.output_names)}; ONNX Runtime vs PyTorch max |diff| "
                         f"{report['max_abs_diff']:.2e}"
                         + (f" (int8: {report['int8_max_abs_diff']:.2e})" if int8 else ""))
    return report

"""Any model directory electra writes, as one module a server calls:
(input_ids, attention_mask, token_type_ids) -> the named outputs `transformers`' classes
return for it (the same computation: `electra.model.task_heads.serving_outputs`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from electra.errors import ElectraError
from electra.fileutil import refuse_to_replace, staged_dir
from electra.finetuning.heads import FinetuneModel, MultitaskModel
from electra.finetuning.model_io import FINETUNE_FILE, finetuned_files, load_finetuned
from electra.hub import resolve_model_path, source_record
from electra.model.card import default_name, write_model_card
from electra.model.hf import (
    architecture_of,
    is_discriminator,
    load_encoder,
    load_pretrained,
    read_config_json,
    write_model_files,
)
from electra.model.networks import Discriminator
from electra.model.task_heads import serving_outputs

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class Served:
    """A loaded model, what it is, and what it outputs."""

    module: nn.Module  # ServingModel
    kind: str  # discriminator | generator | encoder | sequence | regression | token | span
    output_names: tuple[str, ...]
    info: dict | None  # finetune.json of a fine-tuned model (one task's, for multi-task)


class ServingModel(nn.Module):
    def __init__(self, model: nn.Module, kind: str, label_range: tuple[float, float] | None):
        super().__init__()
        self.model, self.kind, self.label_range = model, kind, label_range

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.kind in ("discriminator", "generator", "encoder"):
            return (self.model(input_ids, token_type_ids, attention_mask),)
        hidden = self.model.encoder(input_ids, token_type_ids, attention_mask)
        return serving_outputs(self.kind, self.model.task_head, hidden, attention_mask,
                               token_type_ids, self.label_range)


def output_names(kind: str, num_outputs: int = 0) -> tuple[str, ...]:
    if kind == "encoder":
        return ("last_hidden_state",)
    if kind == "span":
        return ("start_logits", "end_logits", "cls_logits")[:num_outputs]
    return ("logits",)


def load_served(model_dir: str | Path, task: str | None = None) -> Served:
    """A model directory (pre-trained or fine-tuned; `task` picks one of a multi-task model's
    heads) as a `ServingModel` in eval mode."""
    model_dir = Path(model_dir)
    if (model_dir / FINETUNE_FILE).is_file():
        model, _, info = load_finetuned(model_dir)
        model, info = single_task(model, info, task, model_dir)
        kind = info["head_kind"]
        module = ServingModel(model, kind, info["task"].get("label_range"))
        return Served(module.eval(), kind, output_names(kind, info["num_outputs"]), info)
    if task is not None:
        raise ElectraError(f"{model_dir}: --task is for multi-task models, and this is not a "
                           f"fine-tuned model (no {FINETUNE_FILE})")
    raw = read_config_json(model_dir)
    arch = architecture_of(raw)
    if arch in ("ElectraForMaskedLM", "BertForMaskedLM", "ModernBertForMaskedLM") \
            or is_discriminator(raw):
        loaded: nn.Module = load_pretrained(model_dir)
        kind = "discriminator" if isinstance(loaded, Discriminator) else "generator"
    elif arch in ("ElectraModel", "BertModel", "ModernBertModel", ""):
        loaded, kind = load_encoder(model_dir), "encoder"
    else:
        raise ElectraError(f"{model_dir}: architecture {arch!r} is not a model electra serves "
                           "(a discriminator, generator, encoder or fine-tuned model)")
    return Served(ServingModel(loaded, kind, None).eval(), kind, output_names(kind), None)


def single_task(model: FinetuneModel | MultitaskModel, info: dict, task: str | None,
                where: Path) -> tuple[FinetuneModel, dict]:
    """The single-task model and its finetune.json; one head of a multi-task model by name."""
    if isinstance(model, FinetuneModel):
        if task is not None and task.lower() != info["task"]["name"].lower():
            raise ElectraError(f"{where}: fine-tuned for {info['task']['name']!r}, not {task!r}")
        return model, info
    by_name = {t["task"]["name"].lower(): t for t in info["tasks"]}
    names = ", ".join(t["task"]["name"] for t in info["tasks"])
    if task is None:
        raise ElectraError(f"{where}: a multi-task model; name one task with --task ({names})")
    if task.lower() not in by_name:
        raise ElectraError(f"{where}: no head for task {task!r} (it has {names})")
    task_info = by_name[task.lower()]
    name = task_info["task"]["name"]
    shared = {k: v for k, v in info.items() if k not in ("tasks", "scores")}
    return model.single(name), {**shared, **task_info, **source_record(where, "source_model"),
                                "scores": (info.get("scores") or {}).get(name)}


def check_out_dir(out: Path, overwrite: bool, flag: str = "--hf") -> None:
    if out.exists() and not overwrite and (not out.is_dir() or any(out.iterdir())):
        raise refuse_to_replace(out, "files", flag)


def write_task_dir(model_dir: str | Path, task: str | None, out_dir: str | Path,
                   overwrite: bool = False, card_extra: str | None = None,
                   revision: str | None = None, card_license: str | None = None) -> Path:
    """A fine-tuned model, or one task of a multi-task model, as a single-task fine-tuned
    directory in the current layout (for `AutoModelFor...`, pipelines and `electra
    predict`), with its model card (`card_extra`: the user's own section appended;
    `card_license`: the license its metadata states).
    `model_dir` may be a Hub id (at `revision`)."""
    model_dir = resolve_model_path(model_dir, revision, "MODEL")
    check_out_dir(Path(out_dir), overwrite)
    loaded, _, info = load_finetuned(model_dir)
    single, task_info = single_task(loaded, info, task, model_dir)
    config, state = finetuned_files(single, task_info)
    with staged_dir(out_dir) as tmp:
        write_model_files(tmp, config, state, model_dir)
        (tmp / FINETUNE_FILE).write_text(json.dumps(task_info, indent=2) + "\n")
        write_model_card(tmp, name=default_name(Path(out_dir)), extra=card_extra,
                         license_id=card_license)
    return Path(out_dir)

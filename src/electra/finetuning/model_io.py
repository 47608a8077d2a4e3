"""Loading pre-trained encoders for fine-tuning and saving/loading fine-tuned models.

A fine-tuned model directory is a Hugging Face directory with its labels in config.json
(`id2label`), so the matching `AutoModelFor...` and `pipeline(...)` serve it, plus
finetune.json (task, settings, scores) for `electra evaluate/predict`:
- a tagger with a paper architecture is `transformers`' own `ElectraForTokenClassification`
  (dropout + linear per token: our head exactly);
- a modern-architecture classifier, tagger or SQuAD 1.1 model is `transformers`' own
  `ModernBertForSequenceClassification` / `ModernBertForTokenClassification` /
  `ModernBertForQuestionAnswering` (a multi-task one is served as `ModernBertModel`);
- every other model (the GLUE head on [CLS] without a pooler, the sigmoid regression head,
  XLNet's SQuAD head, anything with ALiBi) is remote code (`electra.model.hf`): the encoder
  under `electra.`, the head under `task_head.` (a multi-task model's under
  `task_heads.<task>.`, served as its encoder; `electra export --task` writes one task's
  directory).
Each architecture's layout is its record's `finetuned` (`electra.architectures`): a
`FinetunedLayout`, `ELECTRA_FINETUNED` or `MODERNBERT_FINETUNED` below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import torch

from electra.errors import ElectraError
from electra.fileutil import staged_dir
from electra.finetuning.heads import FinetuneModel, MultitaskModel, make_head
from electra.model import modern_hf
from electra.model.card import default_name, write_model_card
from electra.model.hf import (
    _load_strict,
    encoder_from_hf,
    encoder_to_hf,
    hf_config,
    read_model_dir,
    remote_code_config,
    write_model_files,
)
from electra.model.networks import build_encoder
from electra.model_config import ModelConfig
from electra.tokenizer import load_tokenizer

FINETUNE_FILE = "finetune.json"


def check_model_dir(model_dir: str | Path) -> None:
    """One error listing everything a model directory lacks (config, weights, tokenizer)."""
    d = Path(model_dir)
    if not d.is_dir():
        raise ElectraError(f"{d}: model directory does not exist")
    missing = []
    if not (d / "config.json").is_file():
        missing.append("config.json")
    if not ((d / "model.safetensors").is_file() or (d / "pytorch_model.bin").is_file()):
        missing.append("model.safetensors (or pytorch_model.bin)")
    if not ((d / "tokenizer.json").is_file() or (d / "vocab.txt").is_file()):
        missing.append("tokenizer files (tokenizer.json or vocab.txt)")
    if missing:
        raise ElectraError(f"{d}: not a usable model directory, missing {', '.join(missing)}")


def source_dir(model_dir: str | Path, revision: str | None = None) -> Path:
    """The directory fine-tuning reads for `model_dir`: itself, for a Hub id its snapshot in
    the cache (at `revision`), or for a pre-training checkpoint (OUT/checkpoints/step_N) its
    discriminator, exported once to OUT/exports/."""
    from electra.pretraining.checkpoint_export import main_network_dir

    return main_network_dir(model_dir, revision)


def load_source(model_dir: str | Path):
    """(encoder, tokenizer, config.json dict) of a pre-trained or fine-tuned directory, or of
    a pre-training checkpoint (`source_dir`)."""
    model_dir = source_dir(model_dir)
    check_model_dir(model_dir)
    cfg, raw, state = read_model_dir(model_dir)
    encoder = build_encoder(cfg)
    _load_strict(encoder, encoder_from_hf(state, cfg), model_dir)
    return encoder, load_tokenizer(model_dir), raw


def read_finetune_info(model_dir: str | Path) -> dict:
    path = Path(model_dir) / FINETUNE_FILE
    if not path.is_file():
        raise ElectraError(f"{model_dir}: no {FINETUNE_FILE} (not a fine-tuned model directory; "
                           "fine-tune it first with `electra finetune`)")
    return json.loads(path.read_text())


def load_finetuned(model_dir: str | Path
                   ) -> tuple[FinetuneModel | MultitaskModel, object, dict]:
    """(model with its head(s), tokenizer, finetune.json) of a directory written by
    `save_finetuned`: a FinetuneModel, or a MultitaskModel when finetune.json lists "tasks"."""
    info = read_finetune_info(model_dir)
    check_model_dir(model_dir)
    cfg, _, state = read_model_dir(model_dir)
    encoder = build_encoder(cfg)
    if "tasks" in info:
        model = MultitaskModel(encoder, {
            t["task"]["name"]: make_head(t["head_kind"], cfg, t["num_outputs"], 0.1)
            for t in info["tasks"]})
    else:
        model = FinetuneModel(encoder, info["head_kind"], info["num_outputs"])
    _load_strict(model.encoder, encoder_from_hf(state, cfg), model_dir)
    finetuned_layout(cfg).load_heads(model, state, model_dir)
    return model, load_tokenizer(model_dir), info


class FinetunedLayout(Protocol):
    """How one architecture's fine-tuned models are written and read (its record's
    `finetuned`)."""

    def files(self, model: FinetuneModel | MultitaskModel, info: dict
              ) -> tuple[dict, dict[str, torch.Tensor]]:
        """(config.json, state dict) of a fine-tuned model."""

    def load_heads(self, model: FinetuneModel | MultitaskModel, state: dict[str, torch.Tensor],
                   model_dir: str | Path) -> None:
        """The head(s) of `model` from the state dict `files` wrote."""


def finetuned_layout(cfg: ModelConfig) -> FinetunedLayout:
    """The fine-tuned layout of `cfg`'s architecture (ElectraError where it has none)."""
    return cfg.arch.load("finetuned")


def _load_named_heads(model: FinetuneModel | MultitaskModel, state: dict[str, torch.Tensor],
                      model_dir: str | Path) -> None:
    """Heads under our names (`task_head.`, a multi-task model's `task_heads.`), or
    transformers' ElectraForTokenClassification's `classifier.`."""
    if isinstance(model, MultitaskModel):
        head, prefix = model.task_heads, "task_heads."
    elif "classifier.weight" in state:  # transformers' ElectraForTokenClassification
        head, prefix = model.task_head.out, "classifier."
    else:
        head, prefix = model.task_head, "task_head."
    _load_strict(head, {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)},
                 model_dir)


def _native(model: FinetuneModel | MultitaskModel, info: dict) -> bool:
    """Whether transformers' own class computes this model exactly: a paper-architecture
    tagger (`ElectraForTokenClassification`)."""
    return (isinstance(model, FinetuneModel) and info["head_kind"] == "token"
            and model.encoder.config.position_bias == "none")


def finetuned_config(model: FinetuneModel | MultitaskModel, info: dict) -> dict:
    """config.json of a fine-tuned model, in the layout the module docstring describes."""
    return finetuned_files(model, info)[0]


def finetuned_files(model: FinetuneModel | MultitaskModel, info: dict
                    ) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json, state dict) of a fine-tuned model."""
    return finetuned_layout(model.encoder.config).files(model, info)


class ElectraFinetuned:
    """The BERT architecture's fine-tuned models: transformers' ElectraForTokenClassification
    for a tagger it computes, remote code for the rest."""

    def files(self, model: FinetuneModel | MultitaskModel, info: dict
              ) -> tuple[dict, dict[str, torch.Tensor]]:
        encoder = model.encoder
        cfg = encoder.config
        if isinstance(model, MultitaskModel):
            state = {**_prefixed("electra.", encoder.state_dict()),
                     **_prefixed("task_heads.", model.task_heads.state_dict())}
            return remote_code_config(cfg, "encoder"), state
        if _native(model, info):
            config = hf_config(cfg, "ElectraForTokenClassification")
            state = {**encoder_to_hf(encoder.state_dict()),
                     **_prefixed("classifier.", model.task_head.out.state_dict())}
        else:
            config = remote_code_config(cfg, info["head_kind"])
            state = {**_prefixed("electra.", encoder.state_dict()),
                     **_prefixed("task_head.", model.task_head.state_dict())}
        return {**config, **label_fields(info)}, state

    def load_heads(self, model: FinetuneModel | MultitaskModel, state: dict[str, torch.Tensor],
                   model_dir: str | Path) -> None:
        _load_named_heads(model, state, model_dir)


class ModernBertFinetuned:
    """The modern architecture's fine-tuned models in ModernBERT's layout: a single-task model
    as the matching ModernBertFor... class; a multi-task one as ModernBertModel (the encoder,
    which is what transformers serves), its heads under `task_heads.` for electra's own
    readers."""

    def files(self, model: FinetuneModel | MultitaskModel, info: dict
              ) -> tuple[dict, dict[str, torch.Tensor]]:
        cfg, encoder = model.encoder.config, model.encoder
        if isinstance(model, MultitaskModel):
            state = {**modern_hf.encoder_to_modernbert(encoder.state_dict(), prefix=""),
                     **_prefixed("task_heads.", model.task_heads.state_dict())}
            return modern_hf.modernbert_config(cfg, "ModernBertModel"), state
        kind = info["head_kind"]
        if kind not in modern_hf.TASK_CLASSES:
            raise ElectraError(f"a {kind!r} head (task {info['task']['name']}) has no ModernBert "
                               f"class that computes it; the modern architecture exports "
                               f"{', '.join(modern_hf.TASK_CLASSES)} heads")
        config = modern_hf.modernbert_config(cfg, modern_hf.TASK_CLASSES[kind])
        state = {**modern_hf.encoder_to_modernbert(encoder.state_dict()),
                 **modern_hf.head_to_modernbert(model.task_head.state_dict(),
                                                modern_hf.TASK_HEAD_RENAMES)}
        return {**config, **label_fields(info)}, state

    def load_heads(self, model: FinetuneModel | MultitaskModel, state: dict[str, torch.Tensor],
                   model_dir: str | Path) -> None:
        if isinstance(model, MultitaskModel):
            _load_named_heads(model, state, model_dir)
            return
        names = list(model.task_head.state_dict())
        _load_strict(model.task_head, modern_hf.head_from_modernbert(
            state, names, modern_hf.TASK_HEAD_RENAMES), model_dir)


ELECTRA_FINETUNED = ElectraFinetuned()
MODERNBERT_FINETUNED = ModernBertFinetuned()


def label_fields(info: dict) -> dict:
    """config.json's id2label / label2id (what pipelines print) and, for a regression task,
    problem_type "regression" and the label range the head's [0, 1] output maps back to."""
    task, n = info["task"], info["num_outputs"]
    if info["head_kind"] == "span":
        names = ["start", "end", "unanswerable"][:n]
    elif len(task.get("labels") or []) == n:  # the task's names for them where it has some
        names = [str(label) for label in task.get("served_labels") or task["labels"]]
    else:  # regression: one output, the score
        names = [task["name"]] if n == 1 else [f"LABEL_{i}" for i in range(n)]
    fields = {"id2label": dict(enumerate(names)),
              "label2id": {name: i for i, name in enumerate(names)}}
    if n == 1 and info["head_kind"] in ("sequence", "regression") and not task.get("labels"):
        fields["problem_type"] = "regression"
        if task.get("label_range"):
            fields["label_range"] = list(task["label_range"])
    return fields


def _prefixed(prefix: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {prefix + k: v for k, v in state.items()}


def save_finetuned(model: FinetuneModel | MultitaskModel, out_dir: str | Path,
                   tokenizer_dir: str | Path, info: dict) -> Path:
    out = Path(out_dir)
    config, state = finetuned_files(model, info)
    with staged_dir(out) as tmp:
        write_model_files(tmp, config, state, tokenizer_dir)
        (tmp / FINETUNE_FILE).write_text(json.dumps(info, indent=2) + "\n")
        write_model_card(tmp, name=default_name(out))
    return out

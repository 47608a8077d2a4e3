"""What a folder holds, as the commands that write into an existing OUT must know: a command
refuses an OUT that holds another command's output (a pre-training run, prepared data, a
fine-tuned model...), in one wording that names the flag that overrides it
(`electra.fileutil.refuse_to_replace`). Torch-free: read from the files alone."""

from __future__ import annotations

import json
from pathlib import Path

from electra.fileutil import refuse_to_replace

PREDICTIONS = "predictions"
EVALUATION = "evaluation results"


def held_output(out: str | Path) -> str | None:
    """What OUT holds, in words ("a pre-training run", "prepared data", ...; `EVALUATION` and
    `PREDICTIONS` for those commands' own), or None when OUT is missing or empty."""
    out = Path(out)
    if not out.is_dir() or not any(out.iterdir()):
        return None
    if (out / "settings.json").is_file():
        try:
            sections = set(json.loads((out / "settings.json").read_text()))
        except (OSError, json.JSONDecodeError):
            sections = set()
        for section, what in (("objective", "a pre-training run"),
                              ("multitask", "a multi-task run"), ("finetune", "a fine-tuning run"),
                              ("cvt", "a CVT run")):
            if section in sections:
                return what
        return "a run"
    if (out / "manifest.json").is_file():
        return "prepared data"
    if (out / "config.json").is_file():
        return "a model"
    if any((out / name).is_file() for name in ("tokenizer.json", "vocab.txt")):
        return "tokenizer files"
    if (out / "results.json").is_file():
        return EVALUATION
    return PREDICTIONS


def check_writable(out: str | Path, own: str, overwrite: bool = False) -> None:
    """Refuse OUT when it holds another command's output than `own` (an empty or missing OUT,
    or one holding `own`, is taken), unless `overwrite`."""
    held = held_output(out)
    if held is not None and held != own and not overwrite:
        raise refuse_to_replace(out, held)

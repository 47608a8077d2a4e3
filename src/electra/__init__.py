"""electra: compute-efficient pre-training of text encoders (ELECTRA family).

The commands are functions here too (`electra.api`): `electra.pretrain(data=..., out=...)`
runs what `electra pretrain --data ... --out ...` runs. They load on first use, so `import
electra` stays cheap and imports no torch. `electra.pretrain`, `electra.finetune` and
`electra.export` are also subpackages: called, they run their command
(`electra.command_package`).
"""

from __future__ import annotations

import importlib

from electra.version import __version__

_FUNCTIONS = ("train_vocab", "prepare", "score")  # electra.api's
_PACKAGES = ("pretrain", "finetune", "export")  # subpackages that run their command when called
__all__ = ["__version__", "train_vocab", "prepare", "pretrain", "finetune", "export", "score"]


def __getattr__(name: str):
    if name in _FUNCTIONS:
        return getattr(importlib.import_module("electra.api"), name)
    if name in (*_PACKAGES, "api"):  # importing binds it here: later lookups do not come back
        return importlib.import_module(f"electra.{name}")
    raise AttributeError(f"module 'electra' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "api"})

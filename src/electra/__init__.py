"""electra: compute-efficient pre-training of text encoders (ELECTRA family).

The commands are functions here too (`electra.api`): `electra.pretrain(data=..., out=...)`
runs what `electra pretrain --data ... --out ...` runs. They load on first use, so `import
electra` stays cheap and imports no torch.
"""

from __future__ import annotations

import sys
import types

from electra.version import __version__

_FUNCTIONS = ("train_vocab", "prepare", "pretrain", "finetune", "export", "score")
__all__ = ["__version__", *_FUNCTIONS]


def __getattr__(name: str):
    if name in _FUNCTIONS:
        from electra import api

        return getattr(api, name)
    raise AttributeError(f"module 'electra' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FUNCTIONS})


class _Package(types.ModuleType):
    """`electra.pretrain`, `electra.finetune` and `electra.export` are the commands, although
    subpackages of the same names exist: Python binds a subpackage to its parent's attribute
    when it loads, which would make the name mean the package or the function depending on
    what was imported first. That binding is skipped; `from electra.pretrain import loop`
    reaches the package's modules as before."""

    def __setattr__(self, name: str, value) -> None:
        if name in _FUNCTIONS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

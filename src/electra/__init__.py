"""electra: compute-efficient pre-training of text encoders (ELECTRA family).

Every command is a function of `electra.api`, and most are functions here too:
`electra.pretrain(data=..., out=...)` runs what `electra pretrain --data ... --out ...` runs.
`demo`, `flops`, `multitask` and `cvt` are only `electra.api`'s, since `electra.demo`,
`electra.flops`, `electra.multitask` and `electra.cvt` are modules. They load on first use, so
`import electra` stays cheap and imports no torch. The commands' code lives in plain subpackages
(`electra.pretraining`, `electra.finetuning`, `electra.exporting`, ...); the subpackages once
named `electra.pretrain`, `electra.finetune` and `electra.export` are refused with their new
names.
"""

from __future__ import annotations

import importlib
import sys

from electra.version import __version__

__all__ = ["__version__", "train_vocab", "prepare", "pretrain", "plot", "finetune", "evaluate",
           "predict", "cvt_evaluate", "cvt_predict", "cvt_vectors", "score", "minimal_pairs",
           "rerank", "export"]

# The subpackages' earlier names, now the commands' functions
MOVED = {"pretrain": "pretraining", "finetune": "finetuning", "export": "exporting"}


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("electra.api"), name)
    if name == "api":  # importing binds it here: later lookups do not come back
        return importlib.import_module("electra.api")
    raise AttributeError(f"module 'electra' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "api"})


class _MovedSubpackages:
    """An import finder, last in line: `import electra.pretrain.loop` fails in one line that
    names `electra.pretraining.loop`."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        parts = name.split(".")
        if len(parts) > 1 and parts[0] == __name__ and parts[1] in MOVED:
            new = ".".join([parts[0], MOVED[parts[1]], *parts[2:]])
            raise ModuleNotFoundError(f"{name} is now {new} (electra.{parts[1]} is the "
                                      "command's function)", name=name)
        return None


sys.meta_path.append(_MovedSubpackages)

"""`electra.pretrain`, `electra.finetune` and `electra.export` are subpackages and, called,
the commands of the same names (`electra.api`): `from electra import pretrain` then
`pretrain(data=..., out=...)` runs `electra pretrain`, while `import electra.pretrain.loop` and
`from electra.pretrain import loop` reach the package's modules as any package's. One object
for both names, whatever was imported first."""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from typing import Any


class CommandPackage(types.ModuleType):
    """A subpackage that runs its command when called."""

    @property
    def command(self):
        """The command's function (`electra.api`), loaded on first use."""
        return getattr(importlib.import_module("electra.api"), self.__name__.rpartition(".")[2])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.command(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:  # what `inspect.signature` and IDEs read
        return self.command.__signature__


def make_callable(name: str) -> None:
    """Turn the package module `name` (its `__name__`) into a `CommandPackage`."""
    sys.modules[name].__class__ = CommandPackage

"""The `electra` commands as Python functions, for notebooks and scripts (docs/api.md).

`electra.pretrain(data="data/", out="runs/tiny", preset="tiny-local", steps=200)` runs what
`electra pretrain --data data/ --out runs/tiny --preset tiny-local --steps 200` runs, through
the same function (`electra.pretrain.cli.run_pretrain`), and returns the result the command
prints. Keyword arguments are the flags' names with underscores (`--init-from` -> `init_from`);
`set` takes a dict {"SECTION.KEY": value} or the command line's "SECTION.KEY=VALUE" strings.
What is not given keeps the default of the command's parser, so every flag the command has, the
function has. Bad arguments, argparse's checks included, raise `ElectraError` with a one-line
message naming the argument, never `SystemExit`.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import inspect
import json
import numbers
import os
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from electra.cli_support import Count, LazyHelpStore, LazyNames
from electra.data import cli as data_cli
from electra.data.cli import PrepareResult, VocabResult
from electra.errors import ElectraError
from electra.export import cli as export_cli
from electra.export.cli import ExportResult
from electra.finetune import cli as finetune_cli
from electra.finetune.cli import FinetuneResult
from electra.pretrain import cli as pretrain_cli
from electra.pretrain.cli import PretrainResult
from electra.scoring import cli as scoring_cli
from electra.scoring.cli import ScoreResult

__all__ = ["train_vocab", "prepare", "pretrain", "finetune", "export", "score", "ElectraError",
           "VocabResult", "PrepareResult", "PretrainResult", "FinetuneResult", "ExportResult",
           "ScoreResult"]


@dataclass(frozen=True)
class Command:
    """One subcommand as a function: its parser (the flags, their defaults and checks) and
    the body the CLI runs."""

    name: str
    parser: argparse.ArgumentParser
    run: Callable[[argparse.Namespace], Any]

    @property
    def arguments(self) -> dict[str, argparse.Action]:
        """Each keyword argument (a flag's dest) and the action that reads it; where several
        flags share a dest (--precision, --bf16, --fp32), the flag of the dest's own name."""
        found: dict[str, argparse.Action] = {}
        for action in self.parser._actions:  # argparse has no public list of its actions
            if (action.dest == argparse.SUPPRESS or isinstance(action, argparse._HelpAction)
                    or action.dest.startswith("alias_")):  # a flag spelling of an argument
                continue
            if action.dest not in found or _flag_of(action.dest) in action.option_strings:
                found[action.dest] = action
        return found

    def namespace(self, kwargs: Mapping[str, Any]) -> argparse.Namespace:
        """What `parse_args` would return for these flags, checked as argparse checks them."""
        arguments = self.arguments
        for name in kwargs:
            if name not in arguments:
                close = difflib.get_close_matches(name, arguments, n=3, cutoff=0.6)
                raise ElectraError(
                    f"{self.name}: unknown argument {name!r}"
                    + (f" (did you mean {' or '.join(close)}?)" if close else "")
                    + f"; the arguments are the flags of `electra {self.name} --help`")
        args = argparse.Namespace(command=self.name)
        for action in self.parser._actions:  # alias_ flags: not given (the argument is)
            if action.dest.startswith("alias_"):
                setattr(args, action.dest, action.default)
        for dest, action in arguments.items():
            default = action.default
            if isinstance(default, str) and action.type is not None:
                default = _scalar(self.name, action, default)
            setattr(args, dest, copy.copy(default))
        for dest, value in self.parser._defaults.items():  # set_defaults: the CLI's func
            setattr(args, dest, value)
        for name, value in kwargs.items():
            if value is not None:  # None: not given, the default
                setattr(args, name, _value(self.name, arguments[name], value))
        given = {name for name, value in kwargs.items()
                 if value is not None and value is not False}
        missing = [_describe(a) for dest, a in arguments.items()
                   if a.required and getattr(args, dest) is None]
        if missing:
            raise ElectraError(f"{self.name}: the following arguments are required: "
                               f"{', '.join(missing)}")
        for group in self.parser._mutually_exclusive_groups:
            dests = list(dict.fromkeys(a.dest for a in group._group_actions))
            chosen = [dest for dest in dests if dest in given]
            if len(chosen) > 1:
                raise ElectraError(f"{self.name}: argument {_describe(arguments[chosen[1]])}: "
                                   f"not allowed with argument "
                                   f"{_describe(arguments[chosen[0]])}")
            if group.required and not chosen:
                raise ElectraError(f"{self.name}: one of the arguments "
                                   f"{', '.join(_describe(arguments[d]) for d in dests)} is "
                                   "required")
        return args

    def __call__(self, kwargs: Mapping[str, Any]):
        return self.run(self.namespace(kwargs))


def _flag_of(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _describe(action: argparse.Action) -> str:
    """`data (--data)`: the keyword and the flag, as messages name an argument."""
    flags = [s for s in action.option_strings if s.startswith("--")]
    return f"{action.dest} ({flags[0]})" if flags else action.dest


def _value(command: str, action: argparse.Action, value: Any) -> Any:
    """A keyword argument's value as parse_args would store it."""
    if isinstance(action, argparse._AppendAction):  # --set SECTION.KEY=VALUE, repeatable
        if isinstance(value, Mapping):
            return [f"{key}={json.dumps(item)}" for key, item in value.items()]
        items = [value] if isinstance(value, str) else list(value)
        return [_scalar(command, action, item) for item in items]
    if getattr(action.type, "comma_list", False) and isinstance(value, list | tuple):
        value = ",".join(map(str, value))  # report_to=["wandb", "mlflow"]
    if action.nargs == "?" and isinstance(value, bool):  # resume=True is --resume
        return action.const if value else action.default
    if action.nargs == 0:  # a switch: --quiet, --overwrite
        if not isinstance(value, bool):
            raise ElectraError(f"{command}: argument {_describe(action)}: expected True or "
                               f"False, got {value!r}")
        return action.const if value else action.default
    if action.nargs in ("+", "*"):
        items = [value] if isinstance(value, str | os.PathLike) else list(value)
        if action.nargs == "+" and not items:
            raise ElectraError(f"{command}: argument {_describe(action)}: expected at least "
                               "one value")
        return [_scalar(command, action, item) for item in items]
    return _scalar(command, action, value)


def _scalar(command: str, action: argparse.Action, value: Any) -> Any:
    """One value, converted by the flag's type and checked against its choices."""
    where = f"{command}: argument {_describe(action)}"
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    kind = action.type
    if isinstance(value, bool):
        raise ElectraError(f"{where}: expected a value, got {value!r}")
    if isinstance(value, str):
        if callable(kind):
            try:
                value = kind(value)
            except argparse.ArgumentTypeError as e:
                raise ElectraError(f"{where}: {e}") from None
            except (TypeError, ValueError):
                raise ElectraError(f"{where}: invalid {getattr(kind, '__name__', 'value')} "
                                   f"value: {value!r}") from None
    elif kind is None and isinstance(value, numbers.Real):
        value = str(value)  # a flag read as text: --budget-flops 1e16
    elif kind is int and isinstance(value, numbers.Integral):
        value = int(value)
    elif isinstance(kind, Count) and isinstance(value, numbers.Integral):
        try:
            value = kind(int(value))
        except argparse.ArgumentTypeError as e:
            raise ElectraError(f"{where}: {e}") from None
    elif kind is float and isinstance(value, numbers.Real):
        value = float(value)
    else:
        expected = ("a whole number" if isinstance(kind, Count)
                    else getattr(kind, "__name__", "a string") if kind is not None
                    else "a string")
        raise ElectraError(f"{where}: expected {expected}, got {value!r}")
    if action.choices is not None and value not in action.choices:
        raise ElectraError(f"{where}: invalid choice {value!r} (choose from "
                           f"{', '.join(map(str, action.choices))})")
    return value


def _command(module: ModuleType, name: str, run: Callable[[argparse.Namespace], Any]) -> Command:
    subcommands = argparse.ArgumentParser(prog="electra").add_subparsers(dest="command")
    module.add_parsers(subcommands)
    return Command(name, subcommands.choices[name], run)


COMMANDS = {
    "train_vocab": _command(data_cli, "vocab", data_cli.run_vocab),
    "prepare": _command(data_cli, "prepare", data_cli.run_prepare),
    "pretrain": _command(pretrain_cli, "pretrain", pretrain_cli.run_pretrain),
    "finetune": _command(finetune_cli, "finetune", finetune_cli.run_finetune),
    "export": _command(export_cli, "export", export_cli.run_export),
    "score": _command(scoring_cli, "score", scoring_cli.run_score),
}


def train_vocab(**flags: Any) -> VocabResult:
    """Train a vocabulary on text files, or adopt a vocab.txt: `electra vocab`."""
    return COMMANDS["train_vocab"](flags)


def prepare(**flags: Any) -> PrepareResult:
    """Tokenize and pack a corpus into training shards: `electra prepare`."""
    return COMMANDS["prepare"](flags)


def pretrain(**flags: Any) -> PretrainResult:
    """Pre-train an encoder (ELECTRA by default): `electra pretrain`."""
    return COMMANDS["pretrain"](flags)


def finetune(**flags: Any) -> FinetuneResult:
    """Fine-tune a model on GLUE, SQuAD, tagging or your own task: `electra finetune`."""
    return COMMANDS["finetune"](flags)


def export(model: str | os.PathLike, **flags: Any) -> ExportResult:
    """Export a model directory as ONNX, or one task's transformers directory: `electra
    export`."""
    return COMMANDS["export"]({"model": model, **flags})


def score(**flags: Any) -> ScoreResult:
    """Pseudo-log-likelihoods of texts: `electra score`."""
    return COMMANDS["score"](flags)


def _help_line(command: Command, action: argparse.Action) -> str:
    """One argument for a docstring, from its flag's help. A help text or choices that a
    registry gives (the task names, the scorers) are named, not loaded: they live beside
    torch code, and importing this module stays torch-free."""
    if isinstance(action, LazyHelpStore):
        text = f"see `electra {command.name} --help`"
    else:
        params = {**vars(action), "default": action.default, "prog": command.parser.prog,
                  "type": getattr(action.type, "__name__", action.type),
                  "choices": action.metavar if isinstance(action.choices, LazyNames)
                  else ", ".join(map(str, action.choices or ()))}
        text = (action.help or "") % params
        if action.choices is not None and "%(choices)s" not in (action.help or ""):
            text += f" (one of: {params['choices']})"
    head = _describe(action) + (", required" if action.required else "")
    return textwrap.fill(f"{head}: {text}", width=92, subsequent_indent="    ")


def _document(function: Callable, command: Command) -> None:
    """`help(function)` shows the command's keyword arguments: a signature and a docstring
    made from the parser, so a flag added to the command is documented here at once."""
    own = inspect.signature(function)
    positional = [p for p in own.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = [inspect.Parameter(dest, inspect.Parameter.KEYWORD_ONLY,
                                  default=inspect.Parameter.empty if action.required
                                  else action.default)
                for dest, action in command.arguments.items()
                if dest not in {p.name for p in positional}]
    function.__signature__ = own.replace(parameters=[*positional, *keywords])
    arguments = command.arguments
    lines = [_help_line(command, action) for action in arguments.values()
             if isinstance(action, LazyHelpStore) or action.help != argparse.SUPPRESS]
    intro = textwrap.fill(
        f"Returns the command's result, {own.return_annotation}; bad arguments and failures "
        f"raise ElectraError. The arguments are the flags of `electra {command.name}`, with "
        "underscores for dashes" + ("; `set` also takes a dict {'SECTION.KEY': value}"
                                    if "set" in arguments else "") + ":", width=92)
    function.__doc__ = (f"{inspect.cleandoc(function.__doc__ or '')}\n\n{intro}\n\n"
                        + "\n".join(lines) + "\n")


for _name, _function in (("train_vocab", train_vocab), ("prepare", prepare),
                         ("pretrain", pretrain), ("finetune", finetune), ("export", export),
                         ("score", score)):
    _document(_function, COMMANDS[_name])

"""The `electra` commands as Python functions, for notebooks and scripts (docs/api.md).

`electra.pretrain(data="data/", out="runs/tiny", preset="tiny-local", steps=200)` runs what
`electra pretrain --data data/ --out runs/tiny --preset tiny-local --steps 200` runs, through
the same function (`electra.pretraining.cli.run_pretrain`), and returns the result the command
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
from typing import Any

from electra.cli_support import Count, LazyHelpStore, LazyNames
from electra.command import CommandParser, Option
from electra.data.cli import PrepareResult, VocabResult
from electra.errors import ElectraError
from electra.exporting.cli import ExportResult
from electra.finetuning.cli import FinetuneResult
from electra.pretraining.cli import PretrainResult
from electra.scoring.cli import ScoreResult

__all__ = ["demo", "train_vocab", "prepare", "pretrain", "flops", "plot", "finetune", "evaluate",
           "predict", "multitask", "cvt", "cvt_evaluate", "cvt_predict", "cvt_vectors", "score",
           "minimal_pairs", "rerank", "export", "ElectraError", "VocabResult", "PrepareResult",
           "PretrainResult", "FinetuneResult", "ExportResult", "ScoreResult"]


@dataclass(frozen=True)
class Command:
    """One subcommand as a function: its parser, whose declared options (`electra.command`)
    give the keywords, their defaults and checks, and whose `run` is the body the CLI runs."""

    name: str
    parser: CommandParser

    @property
    def arguments(self) -> dict[str, Option]:
        return self.parser.arguments

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
        for alias in self.parser.aliases():  # a second spelling: not given (the argument is)
            if alias.dest not in arguments:
                setattr(args, alias.dest, alias.action.default)
        for dest, option in arguments.items():
            default = option.action.default
            if isinstance(default, str) and option.action.type is not None:
                default = _scalar(self.name, option, default)
            setattr(args, dest, copy.copy(default))
        for dest, value in self.parser.declared_defaults.items():  # the body, its printer
            setattr(args, dest, value)
        for name, value in kwargs.items():
            if value is not None:  # None: not given, the default
                setattr(args, name, _value(self.name, arguments[name], value))
        given = {name for name, value in kwargs.items()
                 if value is not None and value is not False}
        missing = [_describe(o) for dest, o in arguments.items()
                   if o.action.required and getattr(args, dest) is None]
        if missing:
            raise ElectraError(f"{self.name}: the following arguments are required: "
                               f"{', '.join(missing)}")
        for group in self.parser.exclusive_groups:
            dests = list(dict.fromkeys(o.dest for o in group.options))
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
        args = self.namespace(kwargs)
        return args.run(args)


def _describe(option: Option) -> str:
    """`data (--data)`: the keyword and the flag, as messages name an argument."""
    return option.dest if option.positional else f"{option.dest} ({option.flag})"


def _value(command: str, option: Option, value: Any) -> Any:
    """A keyword argument's value as parse_args would store it."""
    action = option.action
    if option.kind == "append":  # --set SECTION.KEY=VALUE, repeatable
        if isinstance(value, Mapping):
            return [f"{key}={json.dumps(item)}" for key, item in value.items()]
        items = [value] if isinstance(value, str) else list(value)
        return [_scalar(command, option, item) for item in items]
    if getattr(action.type, "comma_list", False) and isinstance(value, list | tuple):
        value = ",".join(map(str, value))  # report_to=["wandb", "mlflow"]
    if action.nargs == "?" and isinstance(value, bool):  # resume=True is --resume
        return action.const if value else action.default
    if option.is_switch:  # --quiet, --overwrite
        if not isinstance(value, bool):
            raise ElectraError(f"{command}: argument {_describe(option)}: expected True or "
                               f"False, got {value!r}")
        return action.const if value else action.default
    if action.nargs in ("+", "*"):
        items = [value] if isinstance(value, str | os.PathLike) else list(value)
        if action.nargs == "+" and not items:
            raise ElectraError(f"{command}: argument {_describe(option)}: expected at least "
                               "one value")
        return [_scalar(command, option, item) for item in items]
    return _scalar(command, option, value)


def _scalar(command: str, option: Option, value: Any) -> Any:
    """One value, converted by the flag's type and checked against its choices."""
    action = option.action
    where = f"{command}: argument {_describe(option)}"
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


# The functions' names where they differ from the command's (dashes become underscores)
FUNCTION_NAMES = {"vocab": "train_vocab"}


def _commands() -> dict[str, Command]:
    from electra.cli import build_parser

    return {FUNCTION_NAMES.get(name, name.replace("-", "_")): Command(name, parser)
            for name, parser in build_parser().subcommand_parsers.items()}


COMMANDS = _commands()


def demo(**flags: Any) -> dict:
    """The whole pipeline on a real corpus in a few minutes: `electra demo`."""
    return COMMANDS["demo"](flags)


def train_vocab(**flags: Any) -> VocabResult:
    """Train a vocabulary on text files, or adopt a vocab.txt: `electra vocab`."""
    return COMMANDS["train_vocab"](flags)


def prepare(**flags: Any) -> PrepareResult:
    """Tokenize and pack a corpus into training shards: `electra prepare`."""
    return COMMANDS["prepare"](flags)


def pretrain(**flags: Any) -> PretrainResult:
    """Pre-train an encoder (ELECTRA by default): `electra pretrain`."""
    return COMMANDS["pretrain"](flags)


def flops(**flags: Any) -> dict:
    """Training and inference FLOPs of a configuration (section 5.2.2): `electra flops`."""
    return COMMANDS["flops"](flags)


def plot(**flags: Any) -> dict:
    """Training curves of runs, against steps and FLOPs: `electra plot`."""
    return COMMANDS["plot"](flags)


def finetune(**flags: Any) -> FinetuneResult:
    """Fine-tune a model on GLUE, SQuAD, tagging or your own task: `electra finetune`."""
    return COMMANDS["finetune"](flags)


def evaluate(**flags: Any) -> dict:
    """Score a fine-tuned model on a dev set: `electra evaluate`."""
    return COMMANDS["evaluate"](flags)


def predict(**flags: Any) -> dict:
    """Test-set predictions (GLUE TSVs, SQuAD JSON): `electra predict`."""
    return COMMANDS["predict"](flags)


def multitask(**flags: Any) -> dict:
    """Multi-task fine-tuning and BAM's distillation (chapter 3): `electra multitask`."""
    return COMMANDS["multitask"](flags)


def cvt(**flags: Any) -> dict:
    """Cross-view training of taggers and parsers (chapter 4): `electra cvt`."""
    return COMMANDS["cvt"](flags)


def cvt_evaluate(**flags: Any) -> dict:
    """Score a CVT model on a split: `electra cvt-evaluate`."""
    return COMMANDS["cvt_evaluate"](flags)


def cvt_predict(**flags: Any) -> dict:
    """Tag or parse a file with a CVT model: `electra cvt-predict`."""
    return COMMANDS["cvt_predict"](flags)


def cvt_vectors(**flags: Any) -> dict:
    """Train word vectors for CVT's word embeddings: `electra cvt-vectors`."""
    return COMMANDS["cvt_vectors"](flags)


def score(**flags: Any) -> ScoreResult:
    """Pseudo-log-likelihoods of texts: `electra score`."""
    return COMMANDS["score"](flags)


def minimal_pairs(**flags: Any) -> dict:
    """BLiMP-style minimal-pair accuracy: `electra minimal-pairs`."""
    return COMMANDS["minimal_pairs"](flags)


def rerank(**flags: Any) -> dict:
    """Re-rank n-best lists with PLLs (section 5.4.5): `electra rerank`."""
    return COMMANDS["rerank"](flags)


def export(model: str | os.PathLike, **flags: Any) -> ExportResult:
    """Export a model directory as ONNX, or one task's transformers directory: `electra
    export`."""
    return COMMANDS["export"]({"model": model, **flags})


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "demo": demo, "train_vocab": train_vocab, "prepare": prepare, "pretrain": pretrain,
    "flops": flops, "plot": plot, "finetune": finetune, "evaluate": evaluate,
    "predict": predict, "multitask": multitask, "cvt": cvt, "cvt_evaluate": cvt_evaluate,
    "cvt_predict": cvt_predict, "cvt_vectors": cvt_vectors, "score": score,
    "minimal_pairs": minimal_pairs, "rerank": rerank, "export": export}


def help_text(command: str, option: Option, load: bool = False) -> str:
    """An option's help as `--help` prints it. A help text or choices that a registry gives
    (the task names, the scorers) are named, not loaded, unless `load`: they live beside torch
    code, and importing this module stays torch-free."""
    action = option.action
    if isinstance(action, LazyHelpStore):
        return action.help if load else f"see `electra {command} --help`"
    lazy = isinstance(action.choices, LazyNames) and not load
    params = {**vars(action), "default": action.default, "prog": f"electra {command}",
              "type": getattr(action.type, "__name__", action.type),
              "choices": action.metavar if lazy else ", ".join(map(str, action.choices or ()))}
    text = (action.help or "") % params
    if action.choices is not None and "%(choices)s" not in (action.help or ""):
        text += f" (one of: {params['choices']})"
    return text


def _help_line(command: Command, option: Option) -> str:
    """One argument for a docstring, from its flag's help."""
    head = _describe(option) + (", required" if option.action.required else "")
    return textwrap.fill(f"{head}: {help_text(command.name, option)}", width=92,
                         subsequent_indent="    ")


def _document(function: Callable, command: Command) -> None:
    """`help(function)` and `inspect.signature` show the command's keyword arguments with
    their types and defaults, from the options' declarations, so a flag added to the command
    is a documented keyword here at once."""
    own = inspect.signature(function)
    positional = [p.replace(annotation=command.arguments[p.name].annotation)
                  for p in own.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = [inspect.Parameter(dest, inspect.Parameter.KEYWORD_ONLY,
                                  default=inspect.Parameter.empty if option.action.required
                                  else option.action.default, annotation=option.annotation)
                for dest, option in command.arguments.items()
                if dest not in {p.name for p in positional}]
    function.__signature__ = own.replace(parameters=[*positional, *keywords])
    arguments = command.arguments
    lines = [_help_line(command, option) for option in arguments.values()
             if isinstance(option.action, LazyHelpStore) or option.action.help != argparse.SUPPRESS]
    intro = textwrap.fill(
        f"Returns the command's result, {own.return_annotation}; bad arguments and failures "
        f"raise ElectraError. The arguments are the flags of `electra {command.name}`, with "
        "underscores for dashes" + ("; `set` also takes a dict {'SECTION.KEY': value}"
                                    if "set" in arguments else "") + ":", width=92)
    function.__doc__ = (f"{inspect.cleandoc(function.__doc__ or '')}\n\n{intro}\n\n"
                        + "\n".join(lines) + "\n")


for _name, _function in FUNCTIONS.items():
    _document(_function, COMMANDS[_name])


def flags_reference() -> str:
    """docs/flags.md: every command's options as tables, from their declarations
    (`tools/flags_doc.py` writes it; a test checks the file is current)."""
    from electra.cli import build_parser
    from electra.command import flags_table

    head = ("# Every command's flags\n\n"
            "Generated from the options' declarations (`electra.command`) by `python "
            "tools/flags_doc.py`; a test fails when it is stale. Each flag is also a keyword "
            "of the command's Python function (docs/api.md), with the type shown, and where "
            "it sets a settings field, `--config` and `--set SECTION.KEY=VALUE` set the same "
            "field (the flag wins over the file, `--set` over both).\n")
    tables = [flags_table(name, parser, {o.flag: help_text(name, o, load=True)
                                         for o in parser.options if o.action.help})
              for name, parser in build_parser().subcommand_parsers.items()]
    return "\n".join([head, *tables])

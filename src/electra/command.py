"""A command's options, each declared once.

Every `electra` subcommand declares each option with one `add_argument` call on a
`CommandParser`. The parser records the declaration as an `Option`, and that record drives:

- the flag (argparse builds it from the same call);
- the Python function's keyword: its name, type annotation and default (`electra.api`);
- the settings field the flag sets, `setting="train.learning_rate"`: the command's body reads
  the flags' values as settings from `args.declared` (`DeclaredSettings`), and
  `electra.settings` records the flag as the value's source;
- the flags table in docs/flags.md (`flags_table`, checked by a test).

`add_argument` takes two keywords of its own besides argparse's: `setting` (the field the
flag sets) and `annotation` (the Python type, where the flag's `type` does not say it). A
command's body is `run(args) -> result`; `show(result)` prints it on the command line
(`CommandParser.runs`), and the Python function returns it. Building a parser imports no torch.
"""

from __future__ import annotations

import argparse
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# argparse's `action=` spellings of a switch: a flag that takes no value
SWITCHES = ("store_true", "store_false", "store_const")


def path(text: str | os.PathLike) -> str:
    """A flag type for a file or folder: the text as given; the Python API also takes a Path."""
    return os.fspath(text)


@dataclass(frozen=True)
class Option:
    """One declared option: the action argparse built from it, and what the declaration said
    beyond argparse (the settings field it sets, its Python type)."""

    action: argparse.Action
    kind: str  # argparse's `action=`: store, store_true, store_const, append, help, ...
    setting: str | None = None
    declared_annotation: Any = None
    group: ExclusiveGroup | None = None

    @property
    def dest(self) -> str:
        return self.action.dest

    @property
    def flag(self) -> str:
        """The long flag (`--init-from`), or the positional's name."""
        longs = [s for s in self.action.option_strings if s.startswith("--")]
        return longs[0] if longs else self.action.dest

    @property
    def positional(self) -> bool:
        return not self.action.option_strings

    @property
    def is_switch(self) -> bool:
        return self.kind in SWITCHES

    @property
    def is_alias(self) -> bool:
        """A second spelling of another option's value: `--bf16` for `--precision bf16`, or a
        flag stored under `alias_NAME` for the argument NAME (export's `--model`)."""
        return self.dest.startswith("alias_") or (
            self.kind == "store_const" and self.flag != "--" + self.dest.replace("_", "-"))

    @property
    def annotation(self) -> Any:
        """The keyword's Python type, from the declaration: `annotation=` where given, else
        what the flag's type, choices and arity say."""
        if self.declared_annotation is not None:
            value = self.declared_annotation
        elif self.kind in ("store_true", "store_false"):
            return bool
        elif self.kind == "append":
            value = list[str]
        else:
            value = _scalar_annotation(self.action)
            if self.action.nargs in ("+", "*"):
                value = value | list[value]  # one value, or several
            if self.action.nargs == "?" and self.action.const is True:
                value = bool | value  # --resume, or --resume auto
        if self.action.default is None and not self.action.required:
            return value | None
        return value


def _scalar_annotation(action: argparse.Action) -> Any:
    """A flag type may say its Python type as an `annotation` attribute (`cli_support.Count`)."""
    kind = action.type
    if isinstance(action.choices, tuple | list) and all(isinstance(c, str)
                                                        for c in action.choices):
        return typing.Literal[tuple(action.choices)]
    if kind is path:
        return str | os.PathLike
    if kind in (int, float, str):
        return kind
    return getattr(kind, "annotation", str)


class ExclusiveGroup:
    """`add_mutually_exclusive_group()` of a `CommandParser`: its options are recorded as
    the parser's, with the group beside them."""

    def __init__(self, parser: CommandParser, group: Any, required: bool):
        self.parser, self._group, self.required = parser, group, required

    def add_argument(self, *flags: str, setting: str | None = None, annotation: Any = None,
                     **kwargs: Any) -> argparse.Action:
        action = self._group.add_argument(*flags, **kwargs)
        self.parser.options.append(Option(action, _kind(kwargs), setting, annotation, self))
        return action

    @property
    def options(self) -> list[Option]:
        return [o for o in self.parser.options if o.group is self]


def _kind(kwargs: Mapping[str, Any]) -> str:
    action = kwargs.get("action", "store")
    return action if isinstance(action, str) else "store"


class CommandParser(argparse.ArgumentParser):
    """An argparse parser that records each option's declaration (`options`), its mutually
    exclusive groups and its defaults, so the Python API, the settings and the docs read the
    declarations rather than argparse's internals. A usage error is one line naming the command
    and where its help is, not the whole usage first; argparse builds every subcommand's parser
    of this class too."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.options: list[Option] = []
        self.exclusive_groups: list[ExclusiveGroup] = []
        self.declared_defaults: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *flags: str, setting: str | None = None, annotation: Any = None,
                     **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*flags, **kwargs)
        self.options.append(Option(action, _kind(kwargs), setting, annotation))
        return action

    def add_mutually_exclusive_group(self, *, required: bool = False) -> ExclusiveGroup:
        group = ExclusiveGroup(self, super().add_mutually_exclusive_group(required=required),
                               required)
        self.exclusive_groups.append(group)
        return group

    def set_defaults(self, **kwargs: Any) -> None:
        super().set_defaults(**kwargs)
        self.declared_defaults.update(kwargs)

    def runs(self, body: Callable[[argparse.Namespace], Any],
             show: Callable[[Any], None] | None = None) -> None:
        """The command's body, `body(args) -> result`, which the Python function returns, and
        how the command line shows the result (`show`; default: nothing more)."""
        self.set_defaults(run=body, show=show or show_nothing)

    def seal(self) -> None:
        """Once every option is added: `args.declared`, the settings the options set."""
        self.set_defaults(declared=DeclaredSettings.of(self.options))

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    @property
    def arguments(self) -> dict[str, Option]:
        """Each keyword of the command's Python function (an option's dest) and its option;
        aliases (`--bf16`), help and version are not keywords."""
        return {o.dest: o for o in self.options
                if o.kind not in ("help", "version") and not o.is_alias}

    def aliases(self) -> Iterable[Option]:
        return (o for o in self.options if o.is_alias)


@dataclass(frozen=True)
class SettingFlag:
    """An option that sets a settings field (its declaration's `setting`)."""

    setting: str  # "train.learning_rate"
    dest: str
    flag: str
    switch: bool
    default: Any


@dataclass(frozen=True)
class DeclaredSettings:
    """The settings fields a command's options set, as `args.declared` carries them to the
    command's body (a value, equal across builds of the parser)."""

    options: tuple[SettingFlag, ...]

    @classmethod
    def of(cls, options: Iterable[Option]) -> DeclaredSettings:
        return cls(tuple(SettingFlag(o.setting, o.dest, o.flag, o.is_switch, o.action.default)
                         for o in options if o.setting is not None and not o.is_alias))

    def from_args(self, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
        """{section: {field: value}}, as `electra.settings.resolve` takes flags: None where the
        flag was not given (a switch left off, an empty list included), so the settings
        file's or the preset's value stands. A `--no-X` switch sets its field to False."""
        flags: dict[str, dict[str, Any]] = {}
        for option in self.options:
            value = getattr(args, option.dest)
            if value == option.default and (option.switch or value == ()):
                value = None
            elif option.switch and option.flag.startswith("--no-"):
                value = False
            elif isinstance(value, tuple):
                value = list(value)
            section, field = option.setting.split(".", 1)
            flags.setdefault(section, {})[field] = value
        return flags

    @property
    def flag_names(self) -> dict[str, str]:
        """{"train.learning_rate": "--lr", ...}: the flag that sets a field, for messages."""
        return {o.setting: o.flag for o in self.options}


def show_nothing(result: Any) -> None:
    """For a command that prints as it goes (`electra demo`)."""


def annotation_text(annotation: Any) -> str:
    """`int | None`, `Literal['tiny', 'small'] | None`: a keyword's type as docs show it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(annotation_text(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin is not None:  # list[str], dict[str, Any]
        return f"{origin.__name__}[{', '.join(annotation_text(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", getattr(annotation, "_name", str(annotation)))


def flags_table(name: str, parser: CommandParser, helps: Mapping[str, str]) -> str:
    """One command's options as a markdown table: the flag, the Python keyword and its type,
    the settings field it sets, and its help (`helps`: each dest's help as `--help` prints
    it)."""
    rows = [f"### electra {name}", "", "| flag | Python keyword | setting | what it does |",
            "|---|---|---|---|"]
    for option in parser.options:
        if option.kind in ("help", "version"):
            continue
        spellings = ", ".join(f"`{s}`" for s in option.action.option_strings) or f"`{option.flag}`"
        typed = annotation_text(option.annotation).replace("|", "\\|")  # not a column
        keyword = "(same keyword)" if option.is_alias else f"`{option.dest}: {typed}`"
        setting = f"`{option.setting}`" if option.setting else ""
        text = " ".join(helps.get(option.flag, "").split()).replace("|", "\\|")
        rows.append(f"| {spellings} | {keyword} | {setting} | {text} |")
    return "\n".join(rows) + "\n"


class CommandGroups(CommandParser):
    """`electra`'s own parser: it keeps its subcommands' parsers by name."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.subcommand_parsers: dict[str, CommandParser] = {}
        super().__init__(*args, **kwargs)

    def add_commands(self, modules: Sequence[str]) -> None:
        """Add each module's subcommands (its `add_parsers(sub)`), in order."""
        import importlib

        sub = self.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                  parser_class=CommandParser)
        for module in modules:
            importlib.import_module(module).add_parsers(sub)
        for parser in sub.choices.values():
            parser.seal()
        self.subcommand_parsers.update(sub.choices)

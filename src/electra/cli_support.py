"""What the `electra` command groups share.

A command group is a module with `add_parsers(sub)` that adds its subcommands to the
`electra` parser; `electra.cli.COMMAND_GROUPS` lists them. Building the parser imports no
torch, so `electra --help` and the commands that need no model start at once: names from
registries that live beside torch code (the tasks, the PLL scorers) are looked up only when
argparse checks a value or prints help (`LazyNames`, `LazyHelpStore`).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from electra.precision import PRECISIONS
from electra.presets import SIZES
from electra.progress import Progress


def _device_names() -> tuple[str, ...]:
    from electra.device import BACKENDS

    return ("auto", *BACKENDS)


class Count:
    """A flag type for a whole number of at least `minimum`; takes the flag's text, or an int
    from the Python API."""

    annotation = int  # the Python API's keyword type (`electra.command`)

    def __init__(self, minimum: int):
        self.minimum = minimum
        self.__name__ = "positive" if minimum == 1 else "count"  # argparse names it in errors

    def __call__(self, text: str | int) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < self.minimum:
            what = "positive" if self.minimum == 1 else f"at least {self.minimum}"
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value


# Flag types for counts, checked at the flag: a typo such as `--max-train-examples 0` is an
# error, not a run over everything. NON_NEGATIVE where 0 means something documented (a seed, a
# shard index, "never" for an interval).
POSITIVE = Count(1)
NON_NEGATIVE = Count(0)


def add_device_flag(p: argparse.ArgumentParser, default: str | None = "auto",
                    setting: str | None = None) -> None:
    """`--device`, the same for every command (`electra.device.resolve_device`); `default`
    None where a settings file may give it (the field `setting`)."""
    p.add_argument("--device", default=default, choices=LazyNames(_device_names), setting=setting,
                   metavar="DEVICE", help="%(choices)s; auto (default): a CUDA GPU, else an "
                   "Apple GPU (mps), else the CPU (electra.device's backends, in AUTO_ORDER)")


def add_revision_flag(p: argparse.ArgumentParser, flags: str = "--model") -> None:
    """`--revision`: which version of a Hub id the command reads (`electra.hub`)."""
    p.add_argument("--revision", metavar="REV", help=f"with a Hub id as {flags}: its branch, "
                   "tag or commit (default: main)")


def add_license_flag(p: argparse.ArgumentParser, cards: str) -> None:
    """`--license`, beside `--card-extra`: the license `cards` state (`electra.model.card`)."""
    p.add_argument("--license", metavar="ID", help=f"the license {cards} model card states in "
                   "its metadata: an id the Hugging Face Hub accepts (apache-2.0, mit, "
                   "cc-by-4.0, ...; default: none stated)")


def add_precision_flags(p: argparse.ArgumentParser, setting: str | None = None) -> None:
    """`--precision` and its aliases `--bf16` and `--fp32`, one `args.precision` (None when
    none is given: the command's default, auto; `electra.precision`); `setting`: the settings
    field it sets."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--precision", choices=PRECISIONS, setting=setting,
                       help="auto (default): bf16 on CUDA GPUs with native bf16 and on CPUs "
                       "with AVX512-BF16 or AMX, fp16 with "
                       "dynamic loss scaling on older CUDA GPUs (T4, V100, P100), fp32 "
                       "elsewhere. bf16 is refused on CPUs without native bf16, where it runs "
                       "~85x slower (ELECTRA_ALLOW_SLOW_BF16=1 overrides); fp16 skips and "
                       "counts the steps whose scaled gradients overflow")
    group.add_argument("--bf16", dest="precision", action="store_const", const="bf16",
                       help="= --precision bf16")
    group.add_argument("--fp32", dest="precision", action="store_const", const="fp32",
                       help="= --precision fp32")


def show_json(result: Any) -> None:
    """A command's result as one JSON line on stdout."""
    print(json.dumps(result))


def show_json_indented(result: Any) -> None:
    print(json.dumps(result, indent=2))


def show_summary(result: Any) -> None:
    """A result record's `summary`, as one JSON line."""
    print(json.dumps(result.summary))


def show_progress(quiet: bool = False) -> Progress:
    """How a command shows its progress (`electra.progress`), decided here for every command:
    nothing with `--quiet`; a bar on a terminal; elsewhere (a pipe, a log file, a batch job's
    output) plain lines, one per log interval, since a bar there is noise. A command that
    fails still writes its one error line last."""
    if quiet:
        return Progress.OFF
    return Progress.BAR if sys.stderr.isatty() else Progress.LINES


class LazyNames(Sequence[str]):
    """A registry's names for `choices=`, read from `load()` on first use. Give the argument a
    `metavar` (argparse lists the choices in place of a missing one when the argument is added)
    and "%(choices)s" in its help."""

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:
        self._load = load

    @functools.cached_property
    def _names(self) -> tuple[str, ...]:
        return tuple(self._load())

    def __getitem__(self, index):
        return self._names[index]

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, value: object) -> bool:
        return value in self._names


class LazyHelpStore(argparse.Action):
    """argparse's plain "store", with a help text that may be a callable, called when help is
    printed: `add_argument("--task", action=LazyHelpStore, help=lambda: ...)`."""

    def __init__(self, option_strings, dest, help=None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self._help = help

    @property
    def help(self):
        return self._help() if callable(self._help) else self._help

    @help.setter
    def help(self, value) -> None:
        self._help = value

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)


def per_size(defaults: Callable[[str], tuple[float, ...]], index: int) -> str:
    """Item `index` of each size's defaults, for a help text: `per_size(finetune_defaults, 1)`
    gives "0.8 tiny, 0.8 small, 0.8 base, 0.9 large"."""
    return ", ".join(f"{defaults(size)[index]:g} {size}" for size in SIZES)

"""The `electra` command: each subcommand parses flags and calls one library function.

The subcommands come in groups, one module each, every one with the same hook,
`add_parsers(sub)`; `COMMAND_GROUPS` lists them in the order `electra --help` shows them.
Building the parser imports no torch (see `electra.cli_support`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from electra.errors import EXIT_PREEMPTED, ElectraError, Preempted
from electra.version import __version__

COMMAND_GROUPS = (
    "electra.demo.cli",  # demo
    "electra.data.cli",  # vocab, prepare
    "electra.pretrain.cli",  # pretrain, flops
    "electra.runtime.cli",  # plot
    "electra.finetune.cli",  # finetune, evaluate, predict
    "electra.multitask.commands",  # multitask (BAM)
    "electra.cvt.cli",  # cvt, cvt-evaluate, cvt-predict
    "electra.scoring.cli",  # score, minimal-pairs, rerank
    "electra.export.cli",  # export (ONNX, one task's transformers directory)
)


class OneLineErrors(argparse.ArgumentParser):
    """A usage error is one line naming the command and where its help is, not the whole usage
    first; every subcommand's parser is one of these too (argparse builds them of this class)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="electra", description="Pre-train ELECTRA-family text encoders and count their "
        "compute. Each subcommand has its own --help.")
    parser.add_argument("--version", action="version", version=f"electra {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        importlib.import_module(group).add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except ElectraError as e:
        message = " ".join(str(e).split())  # always one line, whatever the cause's text
        print(f"electra {args.command}: error: {message}", file=sys.stderr)
        return 1
    except Preempted as e:
        print(f"electra {args.command}: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_PREEMPTED
    except KeyboardInterrupt:
        print(f"electra {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

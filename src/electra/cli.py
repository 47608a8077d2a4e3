"""The `electra` command: each subcommand parses flags and calls one library function.

The subcommands come in groups, one module each, every one with the same hook,
`add_parsers(sub)`; `COMMAND_GROUPS` lists them in the order `electra --help` shows them. Each
declares its options once (`electra.command`): the flags here, the Python functions in
`electra.api` and docs/flags.md come from the same declarations.
Building the parser imports no torch (see `electra.cli_support`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from electra.command import CommandGroups
from electra.errors import EXIT_PREEMPTED, ElectraError, Preempted
from electra.version import __version__

COMMAND_GROUPS = (
    "electra.demo.cli",  # demo
    "electra.data.cli",  # vocab, prepare
    "electra.pretraining.cli",  # pretrain, flops
    "electra.runtime.cli",  # plot
    "electra.finetuning.cli",  # finetune, evaluate, predict
    "electra.multitask.commands",  # multitask (BAM)
    "electra.cvt.cli",  # cvt, cvt-evaluate, cvt-predict
    "electra.scoring.cli",  # score, minimal-pairs, rerank
    "electra.exporting.cli",  # export (ONNX, one task's transformers directory)
)


def build_parser() -> CommandGroups:
    parser = CommandGroups(
        prog="electra", description="Pre-train ELECTRA-family text encoders and count their "
        "compute. Each subcommand has its own --help.")
    parser.add_argument("--version", action="version", version=f"electra {__version__}")
    parser.add_commands(COMMAND_GROUPS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.show(args.run(args))
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

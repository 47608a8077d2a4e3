"""`electra demo`: its flags (building the parser imports no torch; the demo itself is imported
when it runs)."""

from __future__ import annotations

from electra.cli_support import NON_NEGATIVE, POSITIVE, add_device_flag, add_precision_flags
from electra.command import path
from electra.config import DEMO_PRESETS
from electra.errors import ElectraError
from electra.settings import add_settings_flags


def add_parsers(sub) -> None:
    _add_demo(sub)


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on a real corpus in a few minutes",
                       description="Fetch a small English Wikipedia corpus (or use --corpus), "
                       "train a vocabulary, prepare data, pre-train the tiny-local (or tiny) "
                       "preset, evaluate on held-out text, export, and print a summary.")
    p.add_argument("--corpus", type=path,
                   nargs="+", help="your own corpus instead of the Wikipedia one")
    p.add_argument("--out", type=path, default="runs/demo",
                   help="the demo's folder: vocabulary, data, run, summary (default %(default)s)")
    p.add_argument("--budget", setting="demo.budget_seconds",
                   metavar="DURATION", help="the whole demo, set-up and check "
                   "included, ends within this (default 10m): pre-training gets what set-up "
                   "leaves, less what the evaluation and the check need; the summary says how "
                   "many steps that bought")
    p.add_argument("--steps", setting="demo.steps",
                   type=POSITIVE, help="pre-train exactly this many steps instead of a "
                   "budget")
    p.add_argument("--vocab-size", setting="demo.vocab_size", type=POSITIVE, help="default 8192")
    p.add_argument("--batch-size", setting="demo.batch_size", type=POSITIVE, help="default 32")
    p.add_argument("--seed", setting="demo.seed", type=NON_NEGATIVE, help="default 1")
    p.add_argument("--preset", setting="demo.preset", choices=DEMO_PRESETS,
                   help="tiny-local (default: learns context within the demo's budget; its "
                        "ALiBi bias makes its exports transformers remote code) or tiny (the "
                        "plain architecture, transformers' own ELECTRA classes; "
                        "docs/pretraining.md)")
    add_precision_flags(p, setting="demo.precision")
    add_device_flag(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--check-task", choices=("chunk", "SST-2"),
                   help="the downstream check: the pre-trained discriminator and random weights "
                   "of its shape, fine-tuned with 3 seeds each. chunk (default): CoNLL-2000 "
                   "chunking, 2,000 sentences, 3 epochs, F1 on its test set; SST-2: 10,000 "
                   "sentences, one epoch, dev accuracy (the demo's model does not gain there "
                   "yet)")
    p.add_argument("--check-data", type=path,
                   metavar="DIR", help="the check's data: CoNLL-2000's folder "
                   "(train.txt, test.txt) for chunk, a GLUE folder (SST-2/train.tsv, dev.tsv) for "
                   "SST-2; default: $ELECTRA_CHECK_DATA, or ../shared/data/conll2000 (or glue) "
                   "beside this checkout")
    p.add_argument("--no-check", action="store_true", help="skip the downstream check")
    add_settings_flags(p, ("demo", "check"), "check.seeds=5")
    p.runs(run_demo_command)


def run_demo_command(args) -> dict:
    """`electra demo`, which prints its own summary; returns it."""
    import dataclasses

    from electra.demo.check import CHECKS
    from electra.demo.run import DemoSettings, run_demo
    from electra.pretraining.budget import parse_duration
    from electra.settings import one_length, resolve

    if args.steps is not None and args.budget:
        raise ElectraError("--steps and --budget together: give one")
    demo = DemoSettings()
    check = dataclasses.replace(CHECKS[args.check_task or "chunk"])
    flags = args.declared.from_args(args)
    flags["demo"]["budget_seconds"] = parse_duration(args.budget) if args.budget else None
    one_length(flags["demo"], "steps" if args.steps is not None
               else "budget_seconds" if args.budget else None, ("steps", "budget_seconds"))
    resolve({"demo": demo, "check": check}, args.config, flags, args.set,
            flag_names=args.declared.flag_names)
    return run_demo(corpus=args.corpus, out_dir=args.out, steps=demo.steps,
             vocab_size=demo.vocab_size, batch_size=demo.batch_size, seed=demo.seed,
             overwrite=args.overwrite, preset=demo.preset, precision=demo.precision,
             check=not args.no_check, check_data=args.check_data, check_settings=check,
             budget_seconds=demo.budget_seconds, device=args.device)

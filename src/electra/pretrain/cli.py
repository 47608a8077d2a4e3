"""The pre-training commands, `electra pretrain` and `electra flops`. Each parses its flags and
calls one library function (imported when it runs, so that building the parser stays
torch-free; see `electra.cli_support`)."""

from __future__ import annotations

import json
from pathlib import Path

from electra.cli_support import add_device_flag, add_precision_flags, show_progress
from electra.config import GENERATOR_KINDS, OBJECTIVE_NAMES, PRESETS
from electra.errors import EXIT_PREEMPTED, ElectraError, install_hint
from electra.settings import set_help

PRESET_NAMES = tuple(PRESETS)
SECTIONS = ("model", "objective", "train")  # --config / --set sections: PretrainConfig's


def add_parsers(sub) -> None:
    for add in (_add_pretrain, _add_flops):
        add(sub)


def _add_pretrain(sub) -> None:
    p = sub.add_parser("pretrain", help="pre-train an encoder (ELECTRA by default)",
                       description="Pre-train on prepared data with the chosen objective "
                       "(ELECTRA's replaced token detection by default). Writes "
                       "OUT/config.json, OUT/metrics.jsonl, checkpoints under OUT/checkpoints "
                       "and, at the end, the objective's models under OUT/final/ (Hugging Face "
                       "format; ELECTRA: discriminator and generator). Run under `torchrun` "
                       "for several processes.", epilog=f"On SIGTERM or SIGUSR1 the current "
                       f"step is finished, a checkpoint written, one line printed on stderr, "
                       f"and the exit status is {EXIT_PREEMPTED}; the same command with "
                       f"--resume continues exactly. Exit status 1: an error (one line on "
                       f"stderr).")
    p.add_argument("--preset", choices=PRESET_NAMES,
                   help="model size and recipe: Table 5.1, or ours for CPUs (default tiny; "
                   "with --init-from, the checkpoint's size; docs/pretraining.md)")
    p.add_argument("--init-from", metavar="DIR", help="continue pre-training from these "
                   "weights: a finished run (OUT or OUT/final), a Hugging Face ELECTRA "
                   "discriminator, or one encoder (ELECTRA or BERT, MLM head or none); sizes "
                   "and vocabulary come from it, optimizer and schedule start fresh "
                   "(docs/pretraining.md)")
    p.add_argument("--init-generator", metavar="DIR", help="with --init-from: the generator "
                   "(ElectraForMaskedLM or BertForMaskedLM) to continue; default: the run's "
                   "own generator/, else a new one at the preset's width")
    p.add_argument("--objective", choices=OBJECTIVE_NAMES,
                   help="pre-training objective (default: electra); other objective settings "
                   "via --set objective.KEY=VALUE (generator, sharing, algorithm, ...)")
    p.add_argument("--data", required=True, help="directory written by `electra prepare`")
    p.add_argument("--out", required=True)
    p.add_argument("--config", metavar="FILE", help="JSON settings file: an object of "
                   "sections (model, objective, train) and optionally the preset, the shape of "
                   "OUT/config.json's `config`; flags and --set override it")
    p.add_argument("--steps", type=int, help="optimizer steps (default: the preset's); or "
                   "give a budget instead")
    p.add_argument("--budget", metavar="DURATION", help="train for this long, set-up to "
                   "export included: 90s, 45m, 2h, 1h30m. The run times its first steps, plans "
                   "the steps that fit, and ends its learning-rate schedule at the last one; a "
                   "resumed run counts the time already spent (docs/pretraining.md)")
    p.add_argument("--budget-flops", metavar="FLOPS", help="train for the steps these training "
                   "FLOPs buy, counted as `electra flops` counts them, e.g. 1e16")
    p.add_argument("--batch-size", type=int, help="examples per optimizer step, all processes")
    p.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--seed", type=int)
    add_precision_flags(p)
    p.add_argument("--skip-nonfinite", action="store_true", help="skip a step whose loss or "
                   "gradient is NaN/inf (no update; the schedule advances; counted as "
                   "skipped_nonfinite in the metrics) instead of stopping with an error")
    p.add_argument("--compile", action="store_true", help="torch.compile the Transformer "
                   "layers (train.compile; opt-in: compiling takes minutes, and needs a C++ "
                   "compiler on CPU)")
    p.add_argument("--compile-step", action="store_true", help="compile the whole step "
                   "(forward, backward, clipping, AdamW) as one graph, replayed as a CUDA graph "
                   "on CUDA (train.compile_step; compiles once per run; one process, torch >= "
                   "2.11, not fp16; opt-in: 0.88-0.90x the eager step on a CPU, not yet timed "
                   "on a GPU, docs/speed.md)")
    p.add_argument("--log-every", type=int)
    p.add_argument("--eval-every", type=int,
                   help="steps between held-out probes (fixed-corruption discriminator AUCs; "
                        "default: 4 per run, 0: none; needs a held-out split)")
    p.add_argument("--save-every", type=int)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help=set_help(SECTIONS, "objective.disc_weight=50"))
    p.add_argument("--resume", action="store_true", help="continue from OUT's latest checkpoint")
    p.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event "
                   f"files under OUT/tensorboard/ (needs: {install_hint('plot')})")
    add_device_flag(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_pretrain)


def build_pretrain_config(args):
    """The run's configuration and, with --init-from, its starting point (else None)."""
    from electra.config import PretrainConfig, merge
    from electra.settings import apply_sets

    source = None
    preset = args.preset or "tiny"
    if args.init_from:
        from electra.presets import infer_preset
        from electra.pretrain.init_from import find_source

        objective = args.objective or _set_value(args.set, "objective.name") or "electra"
        source = find_source(args.init_from, args.init_generator, objective)
        preset = args.preset or infer_preset(source.main_config)
    elif args.init_generator:
        raise ElectraError("--init-generator needs --init-from")
    if args.steps is not None and (args.budget or args.budget_flops):
        raise ElectraError("--steps and a budget (--budget, --budget-flops) together: give one")
    if args.budget and args.budget_flops:
        raise ElectraError("--budget and --budget-flops together: give one")
    cfg = PretrainConfig.load(args.config) if args.config else PretrainConfig.from_preset(
        preset)
    if args.budget:
        from electra.pretrain.budget import parse_duration

        cfg.train.budget_seconds, cfg.train.budget_flops = parse_duration(args.budget), None
    elif args.budget_flops:
        from electra.pretrain.budget import parse_flops

        cfg.train.budget_flops, cfg.train.budget_seconds = parse_flops(args.budget_flops), None
    elif args.steps is not None:  # steps given: a budget from --config no longer applies
        cfg.train.budget_seconds = cfg.train.budget_flops = None
    flags = {"steps": args.steps, "batch_size": args.batch_size, "grad_accum": args.grad_accum,
             "learning_rate": args.lr, "warmup_steps": args.warmup_steps, "seed": args.seed,
             "log_every": args.log_every, "save_every": args.save_every,
             "eval_every": args.eval_every}
    merge(cfg.train, {k: v for k, v in flags.items() if v is not None}, where="flags")
    if args.objective:
        cfg.objective.name = args.objective
    if args.precision:
        cfg.train.precision = args.precision
    if args.skip_nonfinite:
        cfg.train.skip_nonfinite = True
    if args.compile:
        cfg.train.compile = True
    if args.compile_step:
        cfg.train.compile_step = True
    apply_sets({"model": cfg.model, "objective": cfg.objective, "train": cfg.train}, args.set)
    if source is not None:
        from electra.pretrain.init_from import adopt_checkpoint, explicit_model_fields

        config_file = json.loads(Path(args.config).read_text()) if args.config else None
        adopt_checkpoint(cfg, source, explicit_model_fields(args.preset, config_file, args.set))
    cfg.validate()
    return cfg, source


def _set_value(items: list[str], key: str) -> str | None:
    """The value a `--set KEY=VALUE` gives KEY (the last one), if any."""
    values = [item.partition("=")[2] for item in items if item.partition("=")[0] == key]
    return values[-1] if values else None


def _run_pretrain(args) -> None:
    from electra.pretrain.loop import pretrain

    cfg, source = build_pretrain_config(args)
    summary = pretrain(cfg, args.data, args.out, resume=args.resume, device=args.device,
                       show_progress=not args.quiet and show_progress(),
                       tensorboard=args.tensorboard, init=source)
    if summary.get("final"):
        print(json.dumps(summary, indent=2))


def _add_flops(sub) -> None:
    p = sub.add_parser("flops", help="count training and inference FLOPs (section 5.2.2)",
                       description="Print one JSON object with train_flops, infer_flops (one "
                       "example of length S) and params, counted by the rules of the "
                       "dissertation's section 5.2.2 and the official implementation, with the "
                       "objective's own accounting (the count `electra pretrain` logs).")
    p.add_argument("--preset", default="small", choices=PRESET_NAMES)
    p.add_argument("--objective", default="electra", choices=OBJECTIVE_NAMES)
    p.add_argument("--steps", type=int, help="default: the preset's (Table 5.1)")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--generator-multiplier", type=float,
                   help="generator width / model width (default: the preset's)")
    p.add_argument("--generator", choices=GENERATOR_KINDS,
                   help="generator kind (default: mlm)")
    p.add_argument("--set", action="append", default=[], metavar="objective.KEY=VALUE",
                   help="any objective config field, e.g. --set objective.generator_layers=6")
    p.set_defaults(func=_run_flops)


def _run_flops(args) -> None:
    from electra.pretrain.flops_report import main_flops

    overrides: dict = {}
    for item in args.set:
        key, sep, raw = item.partition("=")
        section, dot, field = key.partition(".")
        if not sep or section != "objective" or not dot:
            raise ElectraError(f"--set {item!r}: expected objective.KEY=VALUE")
        try:
            overrides[field] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[field] = raw
    if args.generator_multiplier is not None:
        overrides["generator_multiplier"] = args.generator_multiplier
    if args.generator is not None:
        overrides["generator"] = args.generator
    print(json.dumps(main_flops(args.preset, args.objective, args.steps, args.batch_size,
                                args.seq_len, vocab_size=args.vocab_size,
                                overrides=overrides)))

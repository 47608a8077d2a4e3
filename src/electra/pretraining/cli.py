"""The pre-training commands, `electra pretrain` and `electra flops`. Each parses its flags and
calls one library function (imported when it runs, so that building the parser stays
torch-free; see `electra.cli_support`). `run_pretrain` is the command's body, which the CLI and
the Python API (`electra.api`) share."""

from __future__ import annotations

import json
from dataclasses import dataclass

from electra.cli_support import (
    NON_NEGATIVE,
    POSITIVE,
    add_device_flag,
    add_license_flag,
    add_precision_flags,
    add_revision_flag,
    show_json,
    show_progress,
)
from electra.command import path
from electra.config import GENERATOR_KINDS, OBJECTIVE_NAMES, PRESETS, TrainConfig
from electra.errors import EXIT_PREEMPTED, ElectraError
from electra.runtime.cli import add_report_flags, report_targets
from electra.settings import add_settings_flags

PRESET_NAMES = tuple(PRESETS)
_TINY, _TRAIN = PRESETS["tiny"], TrainConfig()  # the defaults --help shows
SECTIONS = ("model", "objective", "train")  # --config / --set sections: PretrainConfig's


def add_parsers(sub) -> None:
    for add in (_add_pretrain, _add_flops):
        add(sub)


def _add_pretrain(sub) -> None:
    p = sub.add_parser("pretrain", help="pre-train an encoder (ELECTRA by default)",
                       description="Pre-train on prepared data with the chosen objective "
                       "(ELECTRA's replaced token detection by default). Writes "
                       "OUT/settings.json (what --config reads back), OUT/run.json (data, start "
                       "model, budget), OUT/metrics.jsonl, checkpoints under OUT/checkpoints "
                       "and, at the end, the objective's models under OUT/final/ (Hugging Face "
                       "format; ELECTRA: discriminator and generator). Run under `torchrun` "
                       "for several processes.", epilog=f"On SIGTERM or SIGUSR1 the current "
                       f"step is finished, a checkpoint written, one line printed on stderr, "
                       f"and the exit status is {EXIT_PREEMPTED}; the same command with "
                       f"--resume (or --resume auto) continues exactly. Exit status 1: an "
                       f"error (one line on stderr).")
    p.add_argument("--preset", choices=PRESET_NAMES,
                   help="model size and recipe: Table 5.1, or ours for CPUs (default tiny; "
                   "with --init-from, the checkpoint's size; docs/pretraining.md)")
    p.add_argument("--init-from", type=path,
                   metavar="DIR|ID", help="continue pre-training from these "
                   "weights: a finished run (OUT or OUT/final), a Hugging Face ELECTRA "
                   "discriminator, or one encoder (ELECTRA or BERT, MLM head or none), as a "
                   "folder or a Hub id ORG/NAME (from the Hub's cache); sizes and vocabulary "
                   "come from it, optimizer and schedule start fresh (docs/pretraining.md)")
    p.add_argument("--init-generator", type=path,
                   metavar="DIR|ID", help="with --init-from: the generator "
                   "(ElectraForMaskedLM or BertForMaskedLM) to continue, a folder or a Hub id; "
                   "default: the run's own generator/, else a new one at the preset's width")
    add_revision_flag(p, "--init-from")
    p.add_argument("--objective", choices=OBJECTIVE_NAMES, setting="objective.name",
                   help="pre-training objective (default: electra); other objective settings "
                   "via --set objective.KEY=VALUE (generator, sharing, algorithm, ...)")
    p.add_argument("--data", type=path,
                   required=True, help="directory written by `electra prepare`")
    p.add_argument("--out", type=path,
                   required=True, help="the run's folder: settings.json, run.json, "
                   "metrics.jsonl, checkpoints/, final/ (a new folder, or this run's with "
                   "--resume)")
    _add_length_flags(p)
    _add_step_flags(p)
    _add_run_flags(p)
    p.runs(run_pretrain, _show_pretrain)


def _add_length_flags(p) -> None:
    """How long a run trains and at what rate: steps or a budget, batch, learning rate."""
    p.add_argument("--steps", type=POSITIVE, setting="train.steps",
                   help="optimizer steps (default: the preset's); or "
                   "give a budget instead")
    p.add_argument("--budget", metavar="DURATION", setting="train.budget_seconds",
                   help="train for this long, set-up to "
                   "export included: 90s, 45m, 2h, 1h30m. The run times its first steps, plans "
                   "the steps that fit, and ends its learning-rate schedule at the last one; a "
                   "resumed run counts the time already spent (docs/pretraining.md)")
    p.add_argument("--budget-flops", metavar="FLOPS", setting="train.budget_flops",
                   help="train for the steps these training "
                   "FLOPs buy, counted as `electra flops` counts them, e.g. 1e16")
    p.add_argument("--batch-size", type=POSITIVE, setting="train.batch_size",
                   help="examples per optimizer step, all "
                   f"processes (default: the preset's; tiny {_TINY.batch_size})")
    p.add_argument("--grad-accum", type=POSITIVE, setting="train.grad_accum",
                   help="micro-batches per optimizer step "
                   f"(default {_TRAIN.grad_accum})")
    p.add_argument("--lr", type=float, setting="train.learning_rate",
                   help=f"peak learning rate (default: the preset's; tiny "
                   f"{_TINY.learning_rate:g})")
    p.add_argument("--warmup-steps", type=NON_NEGATIVE, setting="train.warmup_steps",
                   help="linear warm-up to the peak "
                   f"(default: the preset's; tiny {_TINY.warmup_steps})")
    p.add_argument("--seed", type=NON_NEGATIVE, setting="train.seed",
                   help=f"default {_TRAIN.seed}")


def _add_step_flags(p) -> None:
    """How each step runs: precision, the non-finite guard, compiling."""
    add_precision_flags(p, setting="train.precision")
    p.add_argument("--skip-nonfinite", action="store_true", setting="train.skip_nonfinite",
                   help="skip a step whose loss or "
                   "gradient is NaN/inf (no update; the schedule advances; counted as "
                   "skipped_nonfinite in the metrics) instead of stopping with an error")
    p.add_argument("--compile", action="store_true", setting="train.compile",
                   help="torch.compile the Transformer "
                   "layers (train.compile; opt-in: compiling takes minutes, and needs a C++ "
                   "compiler on CPU)")
    p.add_argument("--compile-step", action="store_true", setting="train.compile_step",
                   help="compile the whole step "
                   "(forward, backward, clipping, AdamW) as one graph, replayed as a CUDA graph "
                   "on CUDA (train.compile_step; compiles once per run; one process, torch >= "
                   "2.11, not fp16; opt-in: 0.88-0.90x the eager step on a CPU, not yet timed "
                   "on a GPU, docs/speed.md)")


def _add_run_flags(p) -> None:
    """What the run writes and where: logs, probes, checkpoints, settings, resuming, sinks,
    model cards."""
    p.add_argument("--log-every", type=POSITIVE, setting="train.log_every",
                   help=f"steps between lines of OUT/metrics.jsonl (default {_TRAIN.log_every})")
    p.add_argument("--eval-every", type=NON_NEGATIVE, setting="train.eval_every",
                   help="steps between held-out probes (fixed-corruption discriminator AUCs; "
                        "default: 4 per run, 0: none; needs a held-out split)")
    p.add_argument("--save-every", type=NON_NEGATIVE, setting="train.save_every",
                   help="steps between checkpoints "
                   f"(default {_TRAIN.save_every}; the newest {_TRAIN.keep_checkpoints} are kept)")
    p.add_argument("--keep-every", type=NON_NEGATIVE, metavar="K", setting="train.keep_every",
                   help="also keep every checkpoint whose step is a multiple of K "
                   "(train.keep_every; default 0: only the train.keep_checkpoints newest), e.g. "
                   "for a learning curve")
    add_settings_flags(p, SECTIONS, "objective.disc_weight=50", preset=True)
    p.add_argument("--resume", nargs="?", const=True, default=False, choices=("auto",),
                   help="continue from OUT's latest checkpoint (OUT must hold the run); "
                   "`--resume auto`: continue OUT's run if it holds one, else start it, so one "
                   "command line starts and requeues a job (docs/pretraining.md)")
    add_report_flags(p)
    add_device_flag(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    p.add_argument("--card-extra", type=path,
                   metavar="FILE", help="a markdown file appended to the "
                   "model card (README.md) of each OUT/final/ folder")
    add_license_flag(p, "each OUT/final/ folder's")


def resolve_pretrain_settings(args, preset: str | None):
    """The run's configuration on `preset` (default tiny) and where each value came from
    (`electra.settings`: preset, --config, flags, --set)."""
    from electra.config import PretrainConfig
    from electra.settings import Sources, apply_preset, config_preset, resolve

    named = args.preset or config_preset(args.config)
    cfg = PretrainConfig.from_preset(named or preset or "tiny")
    sections = {"model": cfg.model, "objective": cfg.objective, "train": cfg.train}
    sources = Sources()
    if named:
        apply_preset(sections, sources, f"--preset {named}" if args.preset
                     else f"{args.config}: preset")
    flags = args.declared.from_args(args)
    flags["train"].update(budget_settings(args))
    resolve(sections, args.config, flags, args.set, sources, preset=True,
            flag_names=args.declared.flag_names)
    return cfg, sources


def budget_settings(args) -> dict:
    """`--budget` and `--budget-flops` as their train settings (seconds, FLOPs). A budget given
    clears a --config's other budget, --steps both (`electra.settings.one_length`); a budget
    leaves train.steps as it is."""
    from electra.pretraining.budget import parse_duration, parse_flops
    from electra.settings import one_length

    train = {"budget_seconds": parse_duration(args.budget) if args.budget else None,
             "budget_flops": parse_flops(args.budget_flops) if args.budget_flops else None}
    given = ("budget_seconds" if args.budget else "budget_flops" if args.budget_flops
             else "steps" if args.steps is not None else None)
    one_length(train, given, ("steps", "budget_seconds", "budget_flops"))
    train.pop("steps", None)  # --steps itself is a declared setting
    return train


def build_pretrain_config(args):
    """The run's configuration, where each value came from, and, with --init-from, its
    starting point (else None)."""
    if args.init_generator and not args.init_from:
        raise ElectraError("--init-generator needs --init-from")
    if args.revision and not args.init_from:
        raise ElectraError("--revision picks a version of --init-from's Hub id; give --init-from")
    if args.steps is not None and (args.budget or args.budget_flops):
        raise ElectraError("--steps and a budget (--budget, --budget-flops) together: give one")
    if args.budget and args.budget_flops:
        raise ElectraError("--budget and --budget-flops together: give one")
    cfg, sources = resolve_pretrain_settings(args, None)
    source = None
    if args.init_from:
        from electra.presets import infer_preset
        from electra.pretraining.init_from import adopt_checkpoint, find_source

        source = find_source(args.init_from, args.init_generator, cfg.objective.name,
                             args.revision)
        if sources.of("model.hidden_size").kind != "preset":  # no preset named: the checkpoint's
            cfg, sources = resolve_pretrain_settings(args, infer_preset(source.main_config))
        adopt_checkpoint(cfg, source, sources)
    cfg.validate()
    return cfg, sources, source


def default_preset_note(sources) -> list[str]:
    """What a run on the default preset says once its checks have passed."""
    if sources.of("model.hidden_size").kind != "default":
        return []
    return ["no --preset: training `tiny`, the paper's architecture at a CPU size, which learns "
            "no context at small budgets; --preset tiny-local does (docs/pretraining.md, "
            "presets)"]


@dataclass(frozen=True)
class PretrainResult:
    """What `electra pretrain` made: OUT, the exported networks (`final`: name -> directory;
    empty on the processes of a multi-process run other than the first), the steps and
    training FLOPs of the run, and `summary`, which the command prints."""

    out: str
    final: dict[str, str]
    steps: int
    flops: float
    summary: dict

    @property
    def discriminator(self) -> str | None:
        return self.final.get("discriminator")

    @property
    def generator(self) -> str | None:
        return self.final.get("generator")


def _show_pretrain(result: PretrainResult) -> None:
    if result.final:  # the main process's
        print(json.dumps(result.summary, indent=2))


def run_pretrain(args) -> PretrainResult:
    from electra.model.card import add_card_extra, read_card_extra, read_card_license
    from electra.pretraining.loop import pretrain

    cfg, sources, source = build_pretrain_config(args)
    extra = read_card_extra(args.card_extra)
    card_license = read_card_license(args.license)
    summary = pretrain(cfg, args.data, args.out, resume=args.resume, device=args.device,
                       show_progress=show_progress(args.quiet),
                       report_to=report_targets(args), init=source, sources=sources,
                       notes=default_preset_note(sources) if source is None else [])
    if summary.get("final"):  # the main process's: it wrote the cards
        add_card_extra(f"{args.out}/final", extra, card_license)
    return PretrainResult(summary["out"], dict(summary.get("final") or {}), summary["steps"],
                          summary["flops"], summary)


def _add_flops(sub) -> None:
    p = sub.add_parser("flops", help="count training and inference FLOPs (section 5.2.2)",
                       description="Print one JSON object with train_flops, infer_flops (one "
                       "example of length S) and params, counted by the rules of the "
                       "dissertation's section 5.2.2 and the official implementation, with the "
                       "objective's own accounting (the count `electra pretrain` logs). "
                       "`--config OUT/settings.json` counts a run's configuration.")
    p.add_argument("--preset", choices=PRESET_NAMES, help="default small")
    p.add_argument("--objective", choices=OBJECTIVE_NAMES, setting="objective.name",
                   help="default electra")
    p.add_argument("--steps", type=POSITIVE, setting="train.steps", help="default: the "
                   "preset's (Table 5.1; BERT's step count for mlm)")
    p.add_argument("--batch-size", type=POSITIVE, setting="train.batch_size",
                   help="examples per step (default: the preset's)")
    p.add_argument("--seq-len", type=POSITIVE, help="default: the preset's")
    p.add_argument("--vocab-size", type=POSITIVE, setting="model.vocab_size",
                   help="default 30522 (BERT's)")
    p.add_argument("--generator-multiplier", type=float,
                   setting="objective.generator_multiplier",
                   help="generator width / model width (default: the preset's)")
    p.add_argument("--generator", choices=GENERATOR_KINDS, setting="objective.generator",
                   help="generator kind (default: mlm)")
    add_settings_flags(p, SECTIONS, "objective.generator_layers=6", preset=True)
    p.runs(run_flops, show_json)


def run_flops(args) -> dict:
    """`electra flops`: train_flops, infer_flops and params."""
    from electra.config import PretrainConfig
    from electra.pretraining.flops_report import flops_report
    from electra.settings import Sources, config_preset, resolve

    cfg = PretrainConfig.from_preset(args.preset or config_preset(args.config) or "small")
    sources = resolve({"model": cfg.model, "objective": cfg.objective, "train": cfg.train},
                      args.config, args.declared.from_args(args), args.set, Sources(),
                      preset=True, flag_names=args.declared.flag_names)
    steps = cfg.train.steps if sources.of("train.steps").kind != "default" else None
    return flops_report(cfg, args.seq_len, steps)

"""The scoring commands: `electra score`, `minimal-pairs` and `rerank` (see docs/scoring.md).
Flags only: each calls its library function in `electra.scoring.commands`, imported when it runs
so that building the parser stays torch-free (`electra.cli_support`). `run_score` is `score`'s
body, which the CLI and the Python API (`electra.api`) share."""

from __future__ import annotations

from dataclasses import dataclass

from electra.cli_support import (
    POSITIVE,
    LazyNames,
    add_device_flag,
    add_revision_flag,
    show_json_indented,
    show_progress,
    show_summary,
)
from electra.command import path
from electra.progress import Progress


def add_parsers(sub) -> None:
    for add in (_add_score, _add_minimal_pairs, _add_rerank):
        add(sub)


def _scorer_names() -> tuple[str, ...]:
    from electra.scoring.load import SCORER_NAMES

    return SCORER_NAMES


def _add_scorer_flags(p, model_required: bool = True) -> None:
    p.add_argument("--model", type=path, required=model_required,
                   help="model directory: a masked LM (ELECTRA generator or BERT MLM), an "
                   "Electric or ELECTRA-TT discriminator, or a two-tower generator; or a "
                   "Hugging Face Hub id, ORG/NAME (from the Hub's cache)")
    add_revision_flag(p)
    p.add_argument("--generator", help="ELECTRA-TT: the two-tower generator directory")
    p.add_argument("--scorer", choices=LazyNames(_scorer_names), metavar="NAME",
                   help="%(choices)s; default: from the model's config.json (architecture and "
                   "objective)")
    p.add_argument("--batch-size", type=POSITIVE, default=32,
                   help="sequences per forward pass (MLM: masked copies); default 32")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                       help="fp32 (default: the same scores on every machine) or bf16 autocast "
                       "(refused on CPUs without native bf16); the flag every command takes")
    group.add_argument("--bf16", dest="precision", action="store_const", const="bf16",
                       help="= --precision bf16")
    add_device_flag(p)
    p.add_argument("--mask-prob", type=float, help="ELECTRA-TT's k/n: default the training "
                   "run's mask_prob, else 0.15")
    p.add_argument("--tt-positives", choices=["n", "n-k"], default="n",
                   help="ELECTRA-TT denominator: n as section 5.4.5 writes it (default) or "
                   "Algorithm 2's n - k")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _scorer_options(args):
    from electra.scoring.commands import ScorerOptions

    return ScorerOptions(model=args.model, generator=args.generator, scorer=args.scorer,
                         batch_size=args.batch_size, bf16=args.precision == "bf16",
                         device=args.device,
                         mask_prob=args.mask_prob, positives=args.tt_positives,
                         revision=args.revision)


def _add_score(sub) -> None:
    p = sub.add_parser("score", help="pseudo-log-likelihoods of texts (section 5.4.5)",
                       description="Score each text (one per line, or JSON lines with "
                       "--text-field) with a pseudo-log-likelihood: n masked passes for a "
                       "masked LM, one pass for Electric, ELECTRA-TT or a two-tower model. "
                       "Writes JSON lines {index, line, text, pll, num_tokens[, tokens, "
                       "token_scores]}.")
    _add_scorer_flags(p)
    p.add_argument("--input", type=path,
                   required=True, help="text file (.txt) or JSON lines (.jsonl), "
                   ".gz ok")
    p.add_argument("--text-field", default="text", help="JSON lines field (default: text)")
    p.add_argument("--out", type=path, required=True, help="output JSON lines file")
    p.add_argument("--per-token", action="store_true", help="also write tokens and their "
                   "log-probabilities")
    p.runs(run_score, show_summary)


@dataclass(frozen=True)
class ScoreResult:
    """What `electra score` wrote: the JSON lines file, how many texts, the scorer, and
    `summary`, which the command prints (truncated texts, seconds)."""

    out: str
    texts: int
    scorer: str
    summary: dict


def run_score(args) -> ScoreResult:
    from electra.scoring.commands import score_file

    summary = score_file(_scorer_options(args), args.input, args.out, args.text_field,
                         args.per_token, _bar(args))
    return ScoreResult(summary["out"], summary["texts"], summary["scorer"], summary)


def _add_minimal_pairs(sub) -> None:
    p = sub.add_parser("minimal-pairs", help="BLiMP-style minimal-pair accuracy",
                       description="For each pair (BLiMP JSON lines: UID, field, "
                       "linguistics_term, pairID, sentence_good, sentence_bad), check that the "
                       "good sentence has the higher pseudo-log-likelihood; print the accuracy "
                       "overall and per field, phenomenon and paradigm as JSON.")
    _add_scorer_flags(p)
    p.add_argument("--data", type=path, required=True, help="JSON lines file (.gz ok)")
    p.add_argument("--limit", type=POSITIVE, help="first N pairs of each paradigm (UID)")
    p.add_argument("--out", type=path, help="also write the JSON result here")
    p.runs(run_minimal_pairs, show_json_indented)


def run_minimal_pairs(args) -> dict:
    """`electra minimal-pairs`: accuracy overall and per field, phenomenon and paradigm."""
    from electra.scoring.commands import minimal_pairs_file

    return minimal_pairs_file(_scorer_options(args), args.data, args.limit, args.out,
                              _bar(args))


def _add_rerank(sub) -> None:
    p = sub.add_parser("rerank", help="re-rank n-best lists with PLLs (section 5.4.5)",
                       description="Choose argmax score + lambda * PLL in each n-best list "
                       "(JSON lines {id, reference?, hypotheses: [{text, score, pll?}]}); "
                       "lambda is tuned on --dev by word error rate over 0.05, 0.1, ..., 1.0, "
                       "or fixed with --lambda. PLLs come from the 'pll' fields or --model.")
    _add_scorer_flags(p, model_required=False)
    p.add_argument("--nbest", type=path,
                   required=True, help="n-best lists to re-rank (the test split)")
    p.add_argument("--dev", type=path, help="n-best lists with references to tune lambda on")
    p.add_argument("--lambda", dest="lam", type=float, help="fixed lambda (no tuning)")
    p.add_argument("--out", type=path, help="write the chosen hypotheses here (JSON lines)")
    p.runs(run_rerank, show_json_indented)


def run_rerank(args) -> dict:
    """`electra rerank`: lambda and word error rates before and after."""
    from electra.scoring.commands import rerank_files

    return rerank_files(_scorer_options(args), args.nbest, args.dev, args.lam, args.out,
                        _bar(args))


def _bar(args) -> Progress:
    """Scoring's progress: a bar on a terminal, a line every 30 s in a log, none with --quiet."""
    return show_progress(args.quiet)

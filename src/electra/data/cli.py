"""The data commands, `electra vocab` and `electra prepare`. Each parses its flags and calls one
library function (imported when it runs, so that building the parser stays torch-free; see
`electra.cli_support`). `run_vocab` and `run_prepare` are the commands' bodies, which the CLI
and the Python API (`electra.api`) share."""

from __future__ import annotations

from dataclasses import dataclass

from electra.cli_support import (
    NON_NEGATIVE,
    POSITIVE,
    LazyNames,
    add_revision_flag,
    show_progress,
    show_summary,
)
from electra.command import path
from electra.data.split import DEFAULT_HELDOUT_FRACTION, MAX_HELDOUT_DOCUMENTS, MIN_HELDOUT_CORPUS
from electra.errors import ElectraError, install_hint

CORPUS_HELP = ("files or directories: plain text, JSON lines (.jsonl/.json), either .gz or .zst; "
               "Parquet (.parquet); a `datasets` save_to_disk folder (Parquet, Arrow and zstd "
               f"need: {install_hint('corpora')})")
TEXT_FIELD_HELP = "the JSON lines field or Parquet/Arrow column holding the text (default: text)"


def add_parsers(sub) -> None:
    for add in (_add_vocab, _add_prepare):
        add(sub)


def _add_vocab(sub) -> None:
    p = sub.add_parser("vocab", help="train a vocabulary (or adopt a vocab.txt)",
                       description="Train a vocabulary with the `tokenizers` library: BERT-style "
                       "WordPiece (default; special tokens [PAD] [UNK] [CLS] [SEP] [MASK]), "
                       "SentencePiece-style Unigram (<pad> <unk> [CLS] [SEP] [MASK], as ALBERT) "
                       "or byte-level BPE (<s> <pad> </s> <unk> <mask>, as RoBERTa). Writes "
                       "tokenizer.json (plus vocab.txt for WordPiece) and the tokenizer config "
                       "naming the special tokens (loadable by transformers.AutoTokenizer).")
    p.add_argument("--corpus", type=path, nargs="+", help=CORPUS_HELP)
    p.add_argument("--kind", choices=LazyNames(_vocab_kinds), metavar="KIND",
                   default="wordpiece", help="the subword model: %(choices)s (default: "
                   "%(default)s)")
    p.add_argument("--vocab-size", type=POSITIVE, default=30522, help="default: %(default)s")
    p.add_argument("--out", type=path, required=True, help="output directory")
    p.add_argument("--from-vocab", type=path,
                   help="use this existing WordPiece vocab.txt instead of "
                   "training")
    p.add_argument("--cased", action="store_true", help="keep case (and, for WordPiece, accents)")
    p.add_argument("--text-field", default="text", help=TEXT_FIELD_HELP)
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    p.runs(run_vocab, _show_vocab)


@dataclass(frozen=True)
class VocabResult:
    """What `electra vocab` wrote: the tokenizer directory."""

    out: str


def _vocab_kinds() -> tuple[str, ...]:
    from electra.data.vocab import KINDS

    return KINDS


def _show_vocab(result: VocabResult) -> None:
    print(f"vocabulary written to {result.out}")


def run_vocab(args) -> VocabResult:
    from electra.data.vocab import train_vocab, vocab_from_file

    if args.from_vocab:
        if args.kind != "wordpiece":
            raise ElectraError("--from-vocab adopts a WordPiece vocab.txt; it does not "
                               f"go with --kind {args.kind}")
        out = vocab_from_file(args.from_vocab, args.out, lowercase=not args.cased,
                              overwrite=args.overwrite)
    else:
        if not args.corpus:
            raise ElectraError("give --corpus PATH... or --from-vocab FILE")
        out = train_vocab(args.corpus, args.vocab_size, args.out, lowercase=not args.cased,
                          text_field=args.text_field, overwrite=args.overwrite,
                          show_progress=show_progress(args.quiet), kind=args.kind)
    return VocabResult(str(out))


def _add_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="tokenize and pack a corpus into training shards",
                       description="Stream a corpus (plain text with blank lines between "
                       "documents, JSON lines, Parquet or a `datasets` save_to_disk folder; .gz, "
                       ".zst and directories ok), tokenize it, pack sentences into [CLS] A "
                       "[SEP] B [SEP] examples as the official ELECTRA data builder does, and "
                       "write token shards plus manifest.json. The output is the same whatever "
                       "--workers. With --verify DIR, check a prepared directory's shards "
                       "against its manifest instead.")
    p.add_argument("--corpus", type=path, nargs="+", help=CORPUS_HELP)
    p.add_argument("--tokenizer", type=path,
                   help="a tokenizer directory: written by `electra vocab`, or "
                   "a released model's (tokenizer.json, or vocab.txt + tokenizer_config.json), "
                   "as a folder or a Hugging Face Hub id, ORG/NAME (from the Hub's cache)")
    add_revision_flag(p, "--tokenizer")
    p.add_argument("--seq-len", type=POSITIVE, default=128, help="default: %(default)s")
    p.add_argument("--out", type=path,
                   help="folder for the shards and manifest.json (required unless "
                   "--verify)")
    p.add_argument("--heldout-fraction", type=float, default=DEFAULT_HELDOUT_FRACTION,
                   help="share of documents kept aside as a held-out split for the probes "
                   "(default %(default)s; at least one document when the corpus has "
                   f"{MIN_HELDOUT_CORPUS} or more, none below that; 0 = no held-out split)")
    p.add_argument("--max-heldout-documents", type=NON_NEGATIVE, default=MAX_HELDOUT_DOCUMENTS,
                   help="cap on held-out documents (default %(default)s)")
    p.add_argument("--text-field", default="text", help=TEXT_FIELD_HELP)
    p.add_argument("--seed", type=NON_NEGATIVE, default=12345,
                   help="chooses the held-out documents and each document's packing draws")
    p.add_argument("--workers", type=POSITIVE, default=None,
                   help="tokenizing and packing processes (default: the available cores; 1 = "
                   "in this process)")
    p.add_argument("--num-shards", type=POSITIVE, default=1, metavar="N",
                   help="prepare on N machines: this one prepares part --shard-index of N (the "
                   "documents whose index is that modulo N; each machine reads the whole "
                   "corpus and tokenizes its part); combine the parts with --merge")
    p.add_argument("--shard-index", type=NON_NEGATIVE, default=0, metavar="I",
                   help="which part this machine prepares, 0 to N-1 (default 0)")
    p.add_argument("--merge", type=path,
                   nargs="+", metavar="PART", help="combine the N parts' directories "
                   "into --out without tokenizing again (same examples as a one-machine "
                   "prepare, grouped by part)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--verify", type=path, metavar="DIR", help="check every shard of DIR (sizes and "
                   "SHA-256) against its manifest and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    p.runs(run_prepare, show_summary)


@dataclass(frozen=True)
class PrepareResult:
    """What `electra prepare` wrote: the directory and each split's size (`splits`: name ->
    num_examples, num_tokens); with --verify, the check's report (`verified`) instead.
    `summary` is what the command prints."""

    out: str | None
    splits: dict
    verified: dict | None = None

    @property
    def summary(self) -> dict:
        if self.verified is not None:
            return self.verified
        return {"out": self.out, "splits": self.splits}


def run_prepare(args) -> PrepareResult:
    if args.verify:
        from electra.data.dataset import verify_data

        return PrepareResult(None, {}, verify_data(args.verify))
    if args.merge:
        from electra.data.merge import merge_parts

        if not args.out:
            raise ElectraError("--merge: give --out")
        manifest = merge_parts(args.merge, args.out, overwrite=args.overwrite)
        return PrepareResult(args.out, _split_sizes(manifest))
    missing = [flag for flag, value in (("--corpus", args.corpus), ("--tokenizer", args.tokenizer),
                                        ("--out", args.out)) if not value]
    if missing:
        raise ElectraError(f"give {', '.join(missing)} (or --verify DIR, or --merge PART...)")
    from electra.data.prepare import prepare_corpus

    manifest = prepare_corpus(args.corpus, args.tokenizer, args.seq_len, args.out,
                              text_field=args.text_field, seed=args.seed,
                              heldout_fraction=args.heldout_fraction,
                              max_heldout_documents=args.max_heldout_documents,
                              overwrite=args.overwrite,
                              show_progress=show_progress(args.quiet), workers=args.workers,
                              num_parts=args.num_shards, part_index=args.shard_index,
                              revision=args.revision)
    return PrepareResult(args.out, _split_sizes(manifest))


def _split_sizes(manifest: dict) -> dict:
    return {name: {k: s[k] for k in ("num_examples", "num_tokens")}
            for name, s in manifest["splits"].items()}

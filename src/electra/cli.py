"""The `electra` command: each subcommand parses flags and calls one library function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from electra.config import DEMO_PRESETS, OBJECTIVE_NAMES
from electra.errors import EXIT_PREEMPTED, ElectraError, Preempted


def _show_progress() -> bool:
    """Progress bars only on a terminal: in a pipe or a log file they are noise, and the one
    line that reports an error must stay the only line on stderr."""
    return sys.stderr.isatty()


def _add_vocab(sub) -> None:
    p = sub.add_parser("vocab", help="train a WordPiece vocabulary (or adopt a vocab.txt)",
                       description="Train a BERT-style WordPiece vocabulary with the `tokenizers` "
                       "library and write vocab.txt, tokenizer.json and the tokenizer config "
                       "(loadable by transformers.AutoTokenizer).")
    p.add_argument("--corpus", nargs="+", help="text/JSONL files (.gz ok) or directories")
    p.add_argument("--vocab-size", type=int, default=30522, help="default: %(default)s")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--from-vocab", help="use this existing vocab.txt instead of training")
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--text-field", default="text", help="JSON lines field (default: text)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.set_defaults(func=_run_vocab)


def _run_vocab(args) -> None:
    from electra.tokenizer import train_vocab, vocab_from_file

    if args.from_vocab:
        out = vocab_from_file(args.from_vocab, args.out, lowercase=not args.cased,
                              overwrite=args.overwrite)
    else:
        if not args.corpus:
            raise ElectraError("vocab: give --corpus PATH... or --from-vocab FILE")
        out = train_vocab(args.corpus, args.vocab_size, args.out, lowercase=not args.cased,
                          text_field=args.text_field, overwrite=args.overwrite,
                          show_progress=_show_progress())
    print(f"vocabulary written to {out}")


def _add_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="tokenize and pack a corpus into training shards",
                       description="Stream a corpus (plain text with blank lines between "
                       "documents, or JSON lines; .gz and directories ok), tokenize it, pack "
                       "sentences into [CLS] A [SEP] B [SEP] examples as the official ELECTRA "
                       "data builder does, and write token shards plus manifest.json. The "
                       "output is the same whatever --workers. With --verify DIR, check a "
                       "prepared directory's shards against its manifest instead.")
    p.add_argument("--corpus", nargs="+", help="text/JSONL files (.gz ok) or directories")
    p.add_argument("--tokenizer", help="directory written by `electra vocab`")
    p.add_argument("--seq-len", type=int, default=128, help="default: %(default)s")
    p.add_argument("--out")
    p.add_argument("--heldout-fraction", type=float, default=0.0,
                   help="share of documents kept aside as a held-out split (default 0)")
    p.add_argument("--text-field", default="text")
    p.add_argument("--seed", type=int, default=12345,
                   help="chooses the held-out documents and each document's packing draws")
    p.add_argument("--workers", type=int, default=None,
                   help="tokenizing and packing processes (default: the available cores; 1 = "
                   "in this process)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--verify", metavar="DIR", help="check every shard of DIR (sizes and "
                   "SHA-256) against its manifest and exit")
    p.set_defaults(func=_run_prepare)


def _run_prepare(args) -> None:
    if args.verify:
        from electra.data.dataset import verify_data

        print(json.dumps(verify_data(args.verify)))
        return
    missing = [flag for flag, value in (("--corpus", args.corpus), ("--tokenizer", args.tokenizer),
                                        ("--out", args.out)) if not value]
    if missing:
        raise ElectraError(f"give {', '.join(missing)} (or --verify DIR)")
    from electra.data.prepare import prepare_corpus

    manifest = prepare_corpus(args.corpus, args.tokenizer, args.seq_len, args.out,
                              text_field=args.text_field, seed=args.seed,
                              heldout_fraction=args.heldout_fraction, overwrite=args.overwrite,
                              show_progress=_show_progress(), workers=args.workers)
    splits = {name: {k: s[k] for k in ("num_examples", "num_tokens")}
              for name, s in manifest["splits"].items()}
    print(json.dumps({"out": args.out, "splits": splits}))


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
    p.add_argument("--preset", default="tiny", help="tiny, tiny-local (ours, for CPUs; see "
                   "README: Presets), small, base or large (Table 5.1)")
    p.add_argument("--objective", choices=OBJECTIVE_NAMES,
                   help="pre-training objective (default: electra); other objective settings "
                   "via --set objective.KEY=VALUE (generator, sharing, algorithm, ...)")
    p.add_argument("--data", required=True, help="directory written by `electra prepare`")
    p.add_argument("--out", required=True)
    p.add_argument("--config", help="JSON file with config overrides (same shape as "
                   "OUT/config.json's `config`)")
    p.add_argument("--steps", type=int)
    p.add_argument("--batch-size", type=int, help="examples per optimizer step, all processes")
    p.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (CUDA, and CPUs with "
                   "native bf16: AVX512-BF16 or AMX; refused on others, where it is ~85x "
                   "slower than fp32; ELECTRA_ALLOW_SLOW_BF16=1 overrides)")
    p.add_argument("--skip-nonfinite", action="store_true", help="skip a step whose loss or "
                   "gradient is NaN/inf (no update; the schedule advances; counted as "
                   "skipped_nonfinite in the metrics) instead of stopping with an error")
    p.add_argument("--compile", action="store_true", help="torch.compile the Transformer "
                   "layers (train.compile; opt-in: compiling takes minutes, and needs a C++ "
                   "compiler on CPU)")
    p.add_argument("--log-every", type=int)
    p.add_argument("--eval-every", type=int,
                   help="steps between held-out probes (fixed-corruption discriminator AUCs; "
                        "default: 4 per run, 0: none; needs a held-out split)")
    p.add_argument("--save-every", type=int)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="any config field, e.g. --set objective.disc_weight=50")
    p.add_argument("--resume", action="store_true", help="continue from OUT's latest checkpoint")
    p.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event "
                   "files under OUT/tensorboard/ (needs: pip install 'electra[plot]')")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_pretrain)


def build_pretrain_config(args):
    from electra.config import PretrainConfig, merge, set_dotted

    cfg = PretrainConfig.load(args.config) if args.config else PretrainConfig.from_preset(
        args.preset)
    flags = {"steps": args.steps, "batch_size": args.batch_size, "grad_accum": args.grad_accum,
             "learning_rate": args.lr, "warmup_steps": args.warmup_steps, "seed": args.seed,
             "log_every": args.log_every, "save_every": args.save_every,
             "eval_every": args.eval_every}
    merge(cfg.train, {k: v for k, v in flags.items() if v is not None}, where="flags")
    if args.objective:
        cfg.objective.name = args.objective
    if args.bf16:
        cfg.train.bf16 = True
    if args.skip_nonfinite:
        cfg.train.skip_nonfinite = True
    if args.compile:
        cfg.train.compile = True
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ElectraError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        set_dotted(cfg, key, value)
    cfg.validate()
    return cfg


def _run_pretrain(args) -> None:
    from electra.train.loop import pretrain

    cfg = build_pretrain_config(args)
    summary = pretrain(cfg, args.data, args.out, resume=args.resume, device=args.device,
                       show_progress=not args.quiet and _show_progress(),
                       tensorboard=args.tensorboard)
    if summary.get("final"):
        print(json.dumps(summary, indent=2))


def _add_flops(sub) -> None:
    p = sub.add_parser("flops", help="count training and inference FLOPs (section 5.2.2)",
                       description="Print one JSON object with train_flops, infer_flops (one "
                       "example of length S) and params, counted by the rules of the "
                       "dissertation's section 5.2.2 and the official implementation, with the "
                       "objective's own accounting (the count `electra pretrain` logs).")
    p.add_argument("--preset", default="small")
    p.add_argument("--objective", default="electra", choices=OBJECTIVE_NAMES)
    p.add_argument("--steps", type=int, help="default: the preset's (Table 5.1)")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--generator-multiplier", type=float,
                   help="generator width / model width (default: the preset's)")
    p.add_argument("--generator", choices=["mlm", "unigram", "uniform"],
                   help="generator kind (default: mlm)")
    p.add_argument("--set", action="append", default=[], metavar="objective.KEY=VALUE",
                   help="any objective config field, e.g. --set objective.generator_layers=6")
    p.set_defaults(func=_run_flops)


def _run_flops(args) -> None:
    from electra.objectives import main_flops

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


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on a real corpus in a few minutes",
                       description="Fetch a small English Wikipedia corpus (or use --corpus), "
                       "train a vocabulary, prepare data, pre-train the tiny-local (or tiny) "
                       "preset, evaluate on held-out text, export, and print a summary.")
    p.add_argument("--corpus", nargs="+", help="your own corpus instead of the Wikipedia one")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--steps", type=int, default=None, help="default: a few minutes' worth")
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--preset", choices=DEMO_PRESETS, default="tiny-local",
                   help="tiny-local (default: learns context within the demo's budget; its "
                        "ALiBi bias is not in transformers' ELECTRA) or tiny (the plain "
                        "architecture, exports load in transformers; README: Presets)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.set_defaults(func=_run_demo)


def _run_demo(args) -> None:
    from electra.demo import run_demo

    run_demo(corpus=args.corpus, out_dir=args.out, steps=args.steps,
             vocab_size=args.vocab_size, batch_size=args.batch_size, seed=args.seed,
             overwrite=args.overwrite, preset=args.preset)


def _add_finetune_flags(p, train: bool) -> None:
    p.add_argument("--model", required=True, help="model directory (HF ELECTRA/BERT format)")
    p.add_argument("--task", help="CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI, glue, "
                   "chunk, ner, pos, squad, squad2 or user"
                   + ("" if train else " (default: the model's)"), required=train)
    p.add_argument("--data", required=True, help="data directory (GLUE: the folder holding "
                   "CoLA/, SST-2/, ...; or one task's folder; SQuAD: {train,dev,test}-v1.1.json "
                   "or -v2.0.json, .gz ok)")
    p.add_argument("--out", required=True)
    p.add_argument("--max-seq-len", type=int, help="default: 128 (384 for SQuAD), or the "
                   "fine-tuned model's")
    p.add_argument("--eval-batch-size", type=int, default=128)
    p.add_argument("--max-eval-examples", type=int, help="score only the first K dev examples")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    if not train:
        return
    p.add_argument("--seeds", type=int, default=1, help="fine-tunings from the same checkpoint; "
                   "results report their median (default 1; the papers use 10)")
    p.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    p.add_argument("--epochs", type=float, help="default: 10 for RTE and STS-B, 2 for SQuAD, "
                   "3 otherwise")
    p.add_argument("--max-train-examples", type=int, help="train on the first K examples")
    p.add_argument("--lr", type=float, help="default by size: 3e-4 small/tiny, 1e-4 base, "
                   "5e-5 large (Table 5.2)")
    p.add_argument("--layerwise-decay", type=float, help="default 0.8, 0.9 for large")
    p.add_argument("--lr-decay-style", default="dissertation",
                   choices=["dissertation", "official"],
                   help="layer depths as the dissertation defines them (head = layer 0) or as "
                   "the official code (an extra pooler slot); see electra.finetune.optim")
    p.add_argument("--size", choices=["tiny", "small", "base", "large"],
                   help="model size for the defaults (default: from the hidden size)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--no-length-sort", action="store_true", help="training batches in plain "
                   "random order (default: grouped by length, less padding)")
    p.add_argument("--warmup-fraction", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--save-all-seeds", action="store_true",
                   help="keep every seed's model (default: only the best, OUT/model)")
    p.add_argument("--glue-tasks", help="with --task glue: comma-separated subset")
    p.add_argument("--text-a", help="user task: column/field of the first text")
    p.add_argument("--text-b", help="user task: column/field of the second text (optional)")
    p.add_argument("--label", help="user task: column/field of the label")
    p.add_argument("--label-type", choices=["class", "real"], default="class",
                   help="user task: classification or regression")
    p.add_argument("--doc-stride", type=int, help="SQuAD: tokens between windows (default 128)")
    p.add_argument("--max-query-len", type=int,
                   help="SQuAD: question tokens kept (default 64)")
    p.add_argument("--log-every", type=int, default=10,
                   help="steps between lines of OUT/seed<k>/metrics.jsonl (default 10)")
    p.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event "
                   "files under OUT/tensorboard/seed<k>/ (needs: pip install 'electra[plot]')")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_finetune(sub) -> None:
    p = sub.add_parser("finetune", help="fine-tune on GLUE, SQuAD, tagging or your own task",
                       description="Fine-tune a pre-trained model N times (--seeds) with the "
                       "recipe of Table 5.2 and write OUT/results.json (per-seed dev scores, "
                       "median, mean, std, settings, prediction files) and OUT/model (best seed).")
    _add_finetune_flags(p, train=True)
    p.set_defaults(func=_run_finetune)
    p = sub.add_parser("evaluate", help="score a fine-tuned model on a dev set",
                       description="Evaluate a model written by `electra finetune` (OUT/model) "
                       "and write OUT/results.json and the dev predictions.")
    _add_finetune_flags(p, train=False)
    p.set_defaults(func=_run_evaluate)
    p = sub.add_parser("predict", help="test-set predictions (GLUE TSVs, SQuAD JSON)",
                       description="Predict the test split with a fine-tuned model: GLUE tasks "
                       "give the server's TSV files (CoLA.tsv, MNLI-m.tsv, ...), SQuAD the "
                       "official JSON for DATA/test-v1.1.json (or -v2.0), others JSONL.")
    _add_finetune_flags(p, train=False)
    p.set_defaults(func=_run_predict)


def _finetune_settings(args, train: bool):
    from electra.finetune.loop import FinetuneSettings

    s = FinetuneSettings(eval_batch_size=args.eval_batch_size, bf16=args.bf16,
                         device=args.device, max_eval_examples=args.max_eval_examples)
    if args.max_seq_len is not None:
        s.max_seq_len = args.max_seq_len
    if train:
        for name in ("seeds", "seed", "epochs", "max_train_examples", "lr", "layerwise_decay",
                     "lr_decay_style", "size", "batch_size", "warmup_fraction", "weight_decay",
                     "save_all_seeds", "log_every", "tensorboard"):
            setattr(s, name, getattr(args, name))
        s.length_sorted = not args.no_length_sort
    return s


def _user_options(args) -> dict:
    return {"text_a": args.text_a, "text_b": args.text_b, "label": args.label,
            "label_type": args.label_type}


def _run_finetune(args) -> None:
    from electra.finetune.loop import finetune
    from electra.tasks import get_task

    settings = _finetune_settings(args, train=True)
    progress = not args.quiet and _show_progress()
    if args.task.lower() == "glue":
        from electra.finetune.glue_suite import run_glue

        names = args.glue_tasks.split(",") if args.glue_tasks else None
        res = run_glue(args.model, args.data, args.out, settings, names, progress)
        print(json.dumps({"glue_score": res["glue_score"],
                          "tasks": {k: v["median"] for k, v in res["tasks"].items()}}))
        return
    options = _user_options(args) if args.task.lower() == "user" else {}
    if args.task.lower() in ("squad", "squad2"):
        options = {"doc_stride": args.doc_stride, "max_query_len": args.max_query_len}
    task = get_task(args.task, **options)
    res = finetune(args.model, args.task, args.data, args.out, settings, progress, task=task)
    print(json.dumps({"task": res["task"], "median": res["median"],
                      "results": f"{args.out}/results.json"}))


def _run_evaluate(args) -> None:
    from electra.finetune.predict import evaluate

    res = evaluate(args.model, args.data, args.out, args.task,
                   _finetune_settings(args, train=False), args.max_seq_len)
    print(json.dumps({"task": res["task"], "scores": res["scores"]}))


def _run_predict(args) -> None:
    from electra.finetune.predict import predict

    written = predict(args.model, args.data, args.out, args.task,
                      _finetune_settings(args, train=False), args.max_seq_len)
    print(json.dumps({"written": written}))


def _add_scorer_flags(p, model_required: bool = True) -> None:
    p.add_argument("--model", required=model_required,
                   help="model directory: a masked LM (ELECTRA generator or BERT MLM), an "
                   "Electric or ELECTRA-TT discriminator, or a two-tower generator")
    p.add_argument("--generator", help="ELECTRA-TT: the two-tower generator directory")
    p.add_argument("--scorer", choices=["mlm", "electric", "electra-tt", "two-tower"],
                   help="default: from the model's config.json (architecture and objective)")
    p.add_argument("--batch-size", type=int, default=32,
                   help="sequences per forward pass (MLM: masked copies); default 32")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--mask-prob", type=float, help="ELECTRA-TT's k/n: default the training "
                   "run's mask_prob, else 0.15")
    p.add_argument("--tt-positives", choices=["n", "n-k"], default="n",
                   help="ELECTRA-TT denominator: n as section 5.4.5 writes it (default) or "
                   "Algorithm 2's n - k")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _scorer_options(args):
    from electra.scoring.commands import ScorerOptions

    return ScorerOptions(model=args.model, generator=args.generator, scorer=args.scorer,
                         batch_size=args.batch_size, bf16=args.bf16, device=args.device,
                         mask_prob=args.mask_prob, positives=args.tt_positives)


def _add_score(sub) -> None:
    p = sub.add_parser("score", help="pseudo-log-likelihoods of texts (section 5.4.5)",
                       description="Score each text (one per line, or JSON lines with "
                       "--text-field) with a pseudo-log-likelihood: n masked passes for a "
                       "masked LM, one pass for Electric, ELECTRA-TT or a two-tower model. "
                       "Writes JSON lines {index, line, text, pll, num_tokens[, tokens, "
                       "token_scores]}.")
    _add_scorer_flags(p)
    p.add_argument("--input", required=True, help="text file (.txt) or JSON lines (.jsonl), "
                   ".gz ok")
    p.add_argument("--text-field", default="text", help="JSON lines field (default: text)")
    p.add_argument("--out", required=True, help="output JSON lines file")
    p.add_argument("--per-token", action="store_true", help="also write tokens and their "
                   "log-probabilities")
    p.set_defaults(func=_run_score)


def _run_score(args) -> None:
    from electra.scoring.commands import score_file

    print(json.dumps(score_file(_scorer_options(args), args.input, args.out, args.text_field,
                                args.per_token, not args.quiet and _show_progress())))


def _add_minimal_pairs(sub) -> None:
    p = sub.add_parser("minimal-pairs", help="BLiMP-style minimal-pair accuracy",
                       description="For each pair (BLiMP JSON lines: UID, field, "
                       "linguistics_term, pairID, sentence_good, sentence_bad), check that the "
                       "good sentence has the higher pseudo-log-likelihood; print the accuracy "
                       "overall and per field, phenomenon and paradigm as JSON.")
    _add_scorer_flags(p)
    p.add_argument("--data", required=True, help="JSON lines file (.gz ok)")
    p.add_argument("--limit", type=int, help="first N pairs of each paradigm (UID)")
    p.add_argument("--out", help="also write the JSON result here")
    p.set_defaults(func=_run_minimal_pairs)


def _run_minimal_pairs(args) -> None:
    from electra.scoring.commands import minimal_pairs_file

    print(json.dumps(minimal_pairs_file(_scorer_options(args), args.data, args.limit, args.out,
                                        not args.quiet and _show_progress()), indent=2))


def _add_rerank(sub) -> None:
    p = sub.add_parser("rerank", help="re-rank n-best lists with PLLs (section 5.4.5)",
                       description="Choose argmax score + lambda * PLL in each n-best list "
                       "(JSON lines {id, reference?, hypotheses: [{text, score, pll?}]}); "
                       "lambda is tuned on --dev by word error rate over 0.05, 0.1, ..., 1.0, "
                       "or fixed with --lambda. PLLs come from the 'pll' fields or --model.")
    _add_scorer_flags(p, model_required=False)
    p.add_argument("--nbest", required=True, help="n-best lists to re-rank (the test split)")
    p.add_argument("--dev", help="n-best lists with references to tune lambda on")
    p.add_argument("--lambda", dest="lam", type=float, help="fixed lambda (no tuning)")
    p.add_argument("--out", help="write the chosen hypotheses here (JSON lines)")
    p.set_defaults(func=_run_rerank)


def _run_rerank(args) -> None:
    from electra.scoring.commands import rerank_files

    print(json.dumps(rerank_files(_scorer_options(args), args.nbest, args.dev, args.lam,
                                  args.out, not args.quiet and _show_progress()), indent=2))


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="training curves of runs, against steps and FLOPs",
                       description="Draw each metric of RUN/metrics.jsonl (pretrain OUT, or a "
                       "finetune OUT's seed<k>/) in its own subplot, several runs overlaid, "
                       "against steps and against training FLOPs. Needs matplotlib "
                       "(pip install 'electra[plot]').")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or metrics.jsonl)")
    p.add_argument("--out", required=True, help="image file: .png, .pdf or .svg")
    p.add_argument("--x", choices=["step", "flops", "both"], default="both",
                   help="x axis (default both: each metric against steps and, beside it, FLOPs)")
    p.add_argument("--metrics", help="comma-separated keys (default: every loss, accuracy, "
                   "AUC and dev score present)")
    p.set_defaults(func=_run_plot)


def _run_plot(args) -> None:
    from electra.plot import plot

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    print(json.dumps(plot(args.runs, args.out, metrics, args.x)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="electra", description="Pre-train ELECTRA-family text encoders and count their "
        "compute. Each subcommand has its own --help.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # BAM and CVT keep their subcommands in their own packages.
    from electra.cvt.cli import add_parsers as add_cvt
    from electra.multitask.commands import add_multitask

    for add in (_add_demo, _add_vocab, _add_prepare, _add_pretrain, _add_flops,
                _add_finetune, add_multitask, add_cvt, _add_score, _add_minimal_pairs,
                _add_rerank, _add_plot):
        add(sub)
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

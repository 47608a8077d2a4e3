"""`electra vocab`: train a vocabulary (WordPiece, SentencePiece-style Unigram or byte-level
BPE) on a corpus, or build a tokenizer directory around an existing vocab.txt. The directories
written load with `electra.tokenizer.load_tokenizer` and `transformers.AutoTokenizer`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer, UnigramTrainer, WordPieceTrainer

from electra.data.corpus import iter_documents
from electra.errors import ElectraError
from electra.fileutil import install_dir, refuse_to_replace, staged_dir
from electra.progress import CountProgress, Progress, progress_mode
from electra.tokenizer import (
    ALL_TOKENIZER_FILES,
    BERT_SPECIALS,
    MODEL_MAX_LENGTH,
    ROLES,
    add_bert_post_processor,
    bert_pipeline,
    electra_post_processor,
    read_vocab,
)

KINDS = ("wordpiece", "unigram", "bpe")
# The special tokens `electra vocab` gives each kind, in the order of their ids (0-4): BERT's;
# ALBERT's (a SentencePiece encoder with BERT's input layout); RoBERTa's (pad is id 1).
KIND_SPECIALS: dict[str, dict[str, str]] = {
    "wordpiece": dict(BERT_SPECIALS),
    "unigram": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    "bpe": {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"},
}

def train_vocab(
    corpus: Sequence[str | Path],
    vocab_size: int,
    out_dir: str | Path,
    lowercase: bool = True,
    text_field: str = "text",
    min_frequency: int = 2,
    show_progress: bool | Progress = True,
    overwrite: bool = False,
    kind: str = "wordpiece",
) -> Path:
    """Train a vocabulary on a corpus and write a tokenizer directory. `kind`: "wordpiece"
    (BERT's pipeline), "unigram" (SentencePiece-style: NFKC, Metaspace, Unigram LM) or "bpe"
    (byte-level, as GPT-2/RoBERTa: no unknown characters). `min_frequency` applies to
    WordPiece and BPE merges (the Unigram trainer has none). `show_progress`: a `Progress`
    (`electra.progress`; True: the bar, False: nothing); lines count the documents read every
    `electra.progress.LINE_INTERVAL_S` seconds and at the end."""
    if kind not in KINDS:
        raise ElectraError(f"vocabulary kind must be one of {', '.join(KINDS)}, got {kind!r}")
    specials = KIND_SPECIALS[kind]
    if vocab_size <= len(specials):
        raise ElectraError(
            f"vocab size {vocab_size} is too small: it must exceed the "
            f"{len(specials)} special tokens plus the corpus's alphabet"
        )
    if min_frequency < 1:
        raise ElectraError(f"min_frequency must be >= 1, got {min_frequency}")
    out = _check_out_dir(out_dir, overwrite)
    show_progress = progress_mode(show_progress)
    tokenizer, trainer = _untrained(kind, vocab_size, lowercase, min_frequency,
                                    show_progress is Progress.BAR)  # the trainer's own bars
    texts = _texts(corpus, text_field, show_progress)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    size = tokenizer.get_vocab_size()
    if size > vocab_size:
        raise ElectraError(
            f"vocab size {vocab_size} is too small: the special tokens and the corpus's "
            f"alphabet alone need {size} entries"
        )
    tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda t: t[1])]
    if tokens[: len(specials)] != list(specials.values()):
        raise ElectraError(f"trained vocabulary: special tokens are not ids 0..{len(specials) - 1}"
                           " in order")
    if kind == "wordpiece":
        add_bert_post_processor(tokenizer, specials)
        return _write(tokenizer, out, specials, _wordpiece_config(lowercase), tokens)
    tokenizer.post_processor = electra_post_processor(
        tokenizer, specials["cls"], specials["sep"],
        processors.ByteLevel(trim_offsets=True) if kind == "bpe" else None)
    return _write(tokenizer, out, specials, _fast_config())


def vocab_from_file(
    vocab_txt: str | Path, out_dir: str | Path, lowercase: bool = True, overwrite: bool = False
) -> Path:
    """Build a tokenizer directory around an existing vocab.txt (e.g. BERT's), no training.
    Its special tokens are BERT's, at whatever ids the file has them."""
    path = Path(vocab_txt)
    if not path.is_file():
        raise ElectraError(f"vocabulary file does not exist: {path}")
    tokens = read_vocab(path)
    missing = [token for token in BERT_SPECIALS.values() if token not in set(tokens)]
    if missing:
        raise ElectraError(f"{path}: missing special tokens {', '.join(missing)}")
    out = _check_out_dir(out_dir, overwrite)
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = bert_pipeline(
        models.WordPiece(vocab=vocab, unk_token=BERT_SPECIALS["unk"],
                         continuing_subword_prefix="##"), lowercase)
    tokenizer.add_special_tokens(list(BERT_SPECIALS.values()))
    add_bert_post_processor(tokenizer, BERT_SPECIALS)
    return _write(tokenizer, out, BERT_SPECIALS, _wordpiece_config(lowercase), tokens)


# --- internals -------------------------------------------------------------------------------


def _untrained(kind: str, vocab_size: int, lowercase: bool, min_frequency: int,
               show_progress: bool):
    """An empty pipeline of `kind` and its trainer."""
    specials = list(KIND_SPECIALS[kind].values())
    unk = KIND_SPECIALS[kind]["unk"]
    if kind == "wordpiece":
        tokenizer = bert_pipeline(
            models.WordPiece(unk_token=unk, continuing_subword_prefix="##"), lowercase)
        return tokenizer, WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
            continuing_subword_prefix="##", show_progress=show_progress)
    if kind == "unigram":
        # SentencePiece's defaults: NFKC, runs of whitespace as one space, a meta symbol
        # before each word (so a word is the same at the start of a text and inside it).
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
            + ([normalizers.Lowercase()] if lowercase else []))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        return tokenizer, UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                         unk_token=unk, show_progress=show_progress)
    # Byte-level BPE: every byte is in the alphabet, so nothing is ever unknown (<unk> is
    # there for the role only). A space is added before the first word, so that a sentence
    # tokenized on its own (as packing does) starts with the same pieces as inside a text.
    tokenizer = Tokenizer(models.BPE())
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer, BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                 special_tokens=specials, show_progress=show_progress,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def _texts(corpus: Sequence[str | Path], text_field: str,
           show_progress: Progress) -> Iterator[str]:
    with CountProgress(show_progress, "reading corpus") as progress:
        for doc in iter_documents(corpus, text_field=text_field):
            progress.update(1)
            yield doc.text


def _check_out_dir(out_dir: str | Path, overwrite: bool) -> Path:
    """Refuse to clobber an existing tokenizer unless asked (checked before the slow part)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ElectraError(f"output path exists and is not a directory: {out}")
    if out.is_dir() and not overwrite and any(
            (out / name).exists() for name in ALL_TOKENIZER_FILES):
        raise refuse_to_replace(out, "tokenizer files")
    return out


def _wordpiece_config(lowercase: bool) -> dict:
    return {
        "tokenizer_class": "ElectraTokenizer",
        "do_lower_case": lowercase,
        "strip_accents": None if lowercase else False,
        "tokenize_chinese_chars": True,
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
    }


def _fast_config() -> dict:
    """Unigram and BPE directories load as transformers' generic fast tokenizer, which runs
    tokenizer.json as it is; segment ids are asked for, as ELECTRA uses them."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
    }


def _write(tokenizer: Tokenizer, out: Path, specials: dict[str, str], config: dict,
           vocab_txt: list[str] | None = None) -> Path:
    """Write all tokenizer files into a temp dir beside `out`, then move them in place, so a
    failure never leaves a half-written tokenizer."""
    with staged_dir(out, install=_install) as tmp:
        if vocab_txt is not None:
            with open(tmp / "vocab.txt", "w", encoding="utf-8", newline="\n") as handle:
                handle.writelines(token + "\n" for token in vocab_txt)
        tokenizer.save(str(tmp / "tokenizer.json"))
        roles = {f"{role}_token": specials[role] for role in ROLES}
        _write_json(tmp / "tokenizer_config.json", {**config, **roles})
        _write_json(tmp / "special_tokens_map.json", roles)
    return out


def _install(tmp: Path, out: Path) -> None:
    """A new or empty `out` becomes the tokenizer directory; into a non-empty one (e.g. a
    model directory) the files are moved one by one, leaving its other files alone (but not
    tokenizer files of another kind: an old vocab.txt would outlive a new BPE)."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        install_dir(tmp, out)
    else:
        written = {path.name for path in tmp.iterdir()}
        for name in ALL_TOKENIZER_FILES:
            if name in written:
                os.replace(tmp / name, out / name)
            else:
                (out / name).unlink(missing_ok=True)
        tmp.rmdir()


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

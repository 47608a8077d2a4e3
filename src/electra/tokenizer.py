"""WordPiece vocabularies: train one on a corpus, or adopt an existing vocab.txt, and load it.

A tokenizer directory holds vocab.txt (the vocabulary's identity, see `vocab_checksum`),
tokenizer.json (the exact `tokenizers` pipeline) and the two small JSON files Hugging Face
`transformers` needs to load the same tokenizer with `AutoTokenizer.from_pretrained`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import WordPieceTrainer
from tqdm import tqdm

from electra.data.corpus import iter_documents
from electra.errors import ElectraError
from electra.fileutil import install_dir, staged_dir

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# Order matters: a trained vocab gets ids 0..4 in this order, so padding is always id 0.
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
TOKENIZER_FILES = (
    "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"
)
MODEL_MAX_LENGTH = 512


def train_vocab(
    corpus: Sequence[str | Path],
    vocab_size: int,
    out_dir: str | Path,
    lowercase: bool = True,
    text_field: str = "text",
    min_frequency: int = 2,
    show_progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Train a BERT-style WordPiece vocabulary on a corpus and write a tokenizer directory."""
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ElectraError(
            f"vocab size {vocab_size} is too small: it must exceed the "
            f"{len(SPECIAL_TOKENS)} special tokens plus the corpus's alphabet"
        )
    if min_frequency < 1:
        raise ElectraError(f"min_frequency must be >= 1, got {min_frequency}")
    out = _check_out_dir(out_dir, overwrite)
    model = models.WordPiece(unk_token=UNK, continuing_subword_prefix="##")
    tokenizer = _pipeline(model, lowercase)
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        show_progress=show_progress,
    )
    texts = _texts(corpus, text_field, show_progress)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    size = tokenizer.get_vocab_size()
    if size > vocab_size:
        raise ElectraError(
            f"vocab size {vocab_size} is too small: the special tokens and the corpus's "
            f"alphabet alone need {size} entries"
        )
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    _check_specials([token for token, _ in vocab], "trained vocabulary", require_order=True)
    return _write(tokenizer, [token for token, _ in vocab], out, lowercase)


def vocab_from_file(
    vocab_txt: str | Path, out_dir: str | Path, lowercase: bool = True, overwrite: bool = False
) -> Path:
    """Build a tokenizer directory around an existing vocab.txt (e.g. BERT's), no training."""
    path = Path(vocab_txt)
    if not path.is_file():
        raise ElectraError(f"vocabulary file does not exist: {path}")
    tokens = _read_vocab(path)
    _check_specials(tokens, str(path), require_order=False)
    out = _check_out_dir(out_dir, overwrite)
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = _pipeline(
        models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##"), lowercase
    )
    return _write(tokenizer, tokens, out, lowercase)


def load_tokenizer(tokenizer_dir: str | Path) -> Tokenizer:
    """Load the `tokenizers` pipeline of a tokenizer directory (tokenizer.json, else vocab.txt)."""
    directory = Path(tokenizer_dir)
    if not directory.is_dir():
        raise ElectraError(f"tokenizer directory does not exist: {directory}")
    json_path = directory / "tokenizer.json"
    if json_path.is_file():
        try:
            return Tokenizer.from_file(str(json_path))
        except Exception as err:  # tokenizers raises a bare Exception on bad JSON
            raise ElectraError(f"{json_path}: cannot load tokenizer ({err})") from None
    vocab_path = directory / "vocab.txt"
    if not vocab_path.is_file():
        raise ElectraError(f"{directory}: missing tokenizer.json and vocab.txt")
    tokens = _read_vocab(vocab_path)
    _check_specials(tokens, str(vocab_path), require_order=False)
    lowercase = _config_lowercase(directory / "tokenizer_config.json")
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = _pipeline(
        models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##"), lowercase
    )
    _add_post_processor(tokenizer)
    return tokenizer


def vocab_checksum(tokenizer_dir: str | Path) -> str:
    """sha256 of vocab.txt: the vocabulary's identity, used to catch data/model mismatches."""
    path = Path(tokenizer_dir) / "vocab.txt"
    if not path.is_file():
        raise ElectraError(f"{tokenizer_dir}: missing vocab.txt")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def special_token_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """Ids of the special tokens by role; errors if the vocabulary lacks one."""
    ids: dict[str, int] = {}
    for key, token in zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS, strict=True):
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise ElectraError(f"the tokenizer's vocabulary has no {token} token")
        ids[key] = token_id
    return ids


def copy_tokenizer_files(src_dir: str | Path, dst_dir: str | Path) -> list[Path]:
    """Copy the tokenizer files next to a model or data set so it is self-contained."""
    src, dst = Path(src_dir), Path(dst_dir)
    if not (src / "vocab.txt").is_file():
        raise ElectraError(f"{src}: missing vocab.txt (not a tokenizer directory)")
    dst.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            copied.append(Path(shutil.copyfile(src / name, dst / name)))
    return copied


# --- internals -------------------------------------------------------------------------------


def _pipeline(model: models.Model, lowercase: bool) -> Tokenizer:
    """The BERT pipeline: clean + (lowercase, strip accents), split on whitespace/punctuation,
    WordPiece, and [CLS] A [SEP] B [SEP] with token type ids."""
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _add_post_processor(tokenizer: Tokenizer) -> None:
    cls_id, sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    tokenizer.post_processor = processors.BertProcessing((SEP, sep_id), (CLS, cls_id))


def _texts(corpus: Sequence[str | Path], text_field: str, show_progress: bool) -> Iterator[str]:
    docs = iter_documents(corpus, text_field=text_field)
    for doc in tqdm(docs, desc="reading corpus", unit=" docs", disable=not show_progress):
        yield doc.text


def _read_vocab(path: Path) -> list[str]:
    """One token per line; blank or duplicate tokens would silently shift ids, so refuse them."""
    tokens: list[str] = []
    seen: dict[str, int] = {}
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            try:
                token = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise ElectraError(f"{path}:{lineno}: not valid UTF-8") from None
            if not token.strip():
                raise ElectraError(f"{path}:{lineno}: empty token")
            if token in seen:
                raise ElectraError(
                    f"{path}:{lineno}: duplicate token {token!r} (first on line {seen[token]})"
                )
            seen[token] = lineno
            tokens.append(token)
    if not tokens:
        raise ElectraError(f"{path}: vocabulary is empty")
    return tokens


def _check_specials(tokens: list[str], where: str, require_order: bool) -> None:
    index = {token: i for i, token in enumerate(tokens)}
    missing = [t for t in SPECIAL_TOKENS if t not in index]
    if missing:
        raise ElectraError(f"{where}: missing special tokens {', '.join(missing)}")
    if index[PAD] != 0:
        raise ElectraError(f"{where}: {PAD} must have id 0 (line 1), found id {index[PAD]}")
    if require_order and tokens[: len(SPECIAL_TOKENS)] != list(SPECIAL_TOKENS):
        raise ElectraError(f"{where}: special tokens are not ids 0..4 in order")


def _config_lowercase(config_path: Path) -> bool:
    if not config_path.is_file():
        return True
    try:
        return bool(json.loads(config_path.read_text(encoding="utf-8")).get("do_lower_case", True))
    except (json.JSONDecodeError, AttributeError) as err:
        raise ElectraError(f"{config_path}: not a valid tokenizer config ({err})") from None


def _check_out_dir(out_dir: str | Path, overwrite: bool) -> Path:
    """Refuse to clobber an existing tokenizer unless asked (checked before the slow part)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ElectraError(f"output path exists and is not a directory: {out}")
    if out.is_dir() and not overwrite and any((out / name).exists() for name in TOKENIZER_FILES):
        raise ElectraError(f"{out} already holds tokenizer files; choose another directory")
    return out


def _write(tokenizer: Tokenizer, tokens: list[str], out: Path, lowercase: bool) -> Path:
    """Write all tokenizer files into a temp dir beside `out`, then move them in place, so a
    failure never leaves a half-written tokenizer."""
    _add_post_processor(tokenizer)
    with staged_dir(out, install=_install) as tmp:
        with open(tmp / "vocab.txt", "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(token + "\n" for token in tokens)
        tokenizer.save(str(tmp / "tokenizer.json"))
        specials = {
            "pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP,
            "mask_token": MASK,
        }
        config = {
            "tokenizer_class": "ElectraTokenizer",
            "do_lower_case": lowercase,
            "strip_accents": None if lowercase else False,
            "tokenize_chinese_chars": True,
            "model_max_length": MODEL_MAX_LENGTH,
            "clean_up_tokenization_spaces": False,
            **specials,
        }
        _write_json(tmp / "tokenizer_config.json", config)
        _write_json(tmp / "special_tokens_map.json", specials)
    return out


def _install(tmp: Path, out: Path) -> None:
    """A new or empty `out` becomes the tokenizer directory; into a non-empty one (e.g. a
    model directory) the files are moved one by one, leaving its other files alone."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        install_dir(tmp, out)
    else:
        for name in TOKENIZER_FILES:
            os.replace(tmp / name, out / name)
        tmp.rmdir()


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

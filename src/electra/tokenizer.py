"""Tokenizer directories: load one (written by `electra vocab`, or a released model's), know
its special tokens by role, identify its vocabulary, copy it beside data and models. Training
vocabularies is `electra.data.vocab`.

A tokenizer directory holds tokenizer.json (any `tokenizers` pipeline) and/or vocab.txt (a BERT
WordPiece vocabulary; tokenizer_config.json's `do_lower_case` says whether it is uncased), plus
the small JSON files Hugging Face `transformers` reads (`AutoTokenizer.from_pretrained`).

Special tokens are known by their role, never by an id or a spelling: pad, unk, cls, sep and
mask are the tokens that tokenizer_config.json or special_tokens_map.json name as `pad_token`,
... `mask_token` (as transformers writes them; RoBERTa's are `<pad>`, `<unk>`, `<s>`, `</s>`,
`<mask>`), else BERT's `[PAD]` ... `[MASK]`. A tokenizer that lacks one is refused. Every input
electra builds has ELECTRA's layout, `cls A sep (B sep)` with segment ids 0 and 1, whatever
post-processor the directory's pipeline came with (`load_tokenizer`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from electra.errors import ElectraError
from electra.fileutil import sha256_file
from electra.hub import resolve_model_path

if TYPE_CHECKING:
    import torch

ROLES = ("pad", "unk", "cls", "sep", "mask")
BERT_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
# What `electra vocab` writes for a WordPiece vocabulary (Unigram and BPE have no vocab.txt).
TOKENIZER_FILES = (
    "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"
)
# Every tokenizer file a released model may ship (transformers' slow tokenizers read the
# others): copied next to data and models so that they stay self-contained.
ALL_TOKENIZER_FILES = TOKENIZER_FILES + (
    "vocab.json", "merges.txt", "added_tokens.json", "spiece.model", "sentencepiece.bpe.model"
)
CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")  # the latter wins, as in HF
MODEL_MAX_LENGTH = 512
_MODEL_KINDS = {"WordPiece": "wordpiece", "Unigram": "unigram", "BPE": "bpe",
                "WordLevel": "wordlevel"}
_INFO_ATTR = "electra_info"  # where `load_tokenizer` keeps a pipeline's TokenizerInfo


@dataclass(frozen=True)
class TokenizerInfo:
    """What electra needs of a tokenizer besides its pipeline: the special token of each role
    and its id (keys: ROLES), the vocabulary size, and the model kind (wordpiece, unigram,
    bpe, wordlevel)."""

    source: str  # the directory it was read from ("" if none), for messages
    kind: str
    special_tokens: dict[str, str]
    special_ids: dict[str, int]
    vocab_size: int


def load_tokenizer(tokenizer_dir: str | Path, revision: str | None = None) -> Tokenizer:
    """The `tokenizers` pipeline of a tokenizer directory: tokenizer.json, else vocab.txt (a
    BERT WordPiece, uncased unless tokenizer_config.json says `do_lower_case: false`).
    `tokenizer_dir` may be a released model's Hub id, read from the Hub's cache at `revision`
    (`electra.hub.resolve_model_path`).

    The special tokens' roles are checked (a missing one is an error naming the directory and
    the role), truncation and padding saved in the file are dropped (callers set their own),
    and unless the pipeline already adds them as ELECTRA does, its post-processor becomes
    `cls $A sep` / `cls $A sep $B:1 sep:1` (keeping a byte-level offset trimmer), so that
    `encode(a, b)` gives the layout pre-training packs. The result carries its TokenizerInfo:
    `tokenizer_info(tokenizer)`, `special_token_ids(tokenizer)`."""
    directory = resolve_model_path(tokenizer_dir, revision, "--tokenizer")
    tokenizer, named = _read_pipeline(directory)
    info = _resolve_roles(tokenizer, named, str(directory))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    if not _has_electra_layout(tokenizer, info.special_ids["cls"], info.special_ids["sep"]):
        tokenizer.post_processor = electra_post_processor(
            tokenizer, info.special_tokens["cls"], info.special_tokens["sep"],
            _byte_level_trimmer(json.loads(tokenizer.to_str()).get("post_processor")))
    setattr(tokenizer, _INFO_ATTR, info)
    return tokenizer


def tokenizer_info(source: str | Path | Tokenizer) -> TokenizerInfo:
    """The TokenizerInfo of a tokenizer directory or of a pipeline from `load_tokenizer`; a
    pipeline built some other way is read with BERT's spellings."""
    if isinstance(source, Tokenizer):
        info = getattr(source, _INFO_ATTR, None)
        return info if info is not None else _resolve_roles(source, {}, "")
    return getattr(load_tokenizer(source), _INFO_ATTR)


def special_token_ids(source: str | Path | TokenizerInfo | Tokenizer) -> dict[str, int]:
    """Ids of the special tokens by role ({"pad": .., "unk": .., "cls": .., "sep": ..,
    "mask": ..}) of a tokenizer directory, its TokenizerInfo, or a pipeline from
    `load_tokenizer`; errors if a role is missing."""
    info = source if isinstance(source, TokenizerInfo) else tokenizer_info(source)
    return dict(info.special_ids)


def vocab_checksum(tokenizer_dir: str | Path) -> str:
    """The vocabulary's identity, used to catch data/model mismatches: the SHA-256 of vocab.txt
    in a WordPiece directory that has one (as always), otherwise the SHA-256 of the pipeline's
    token -> id map (added tokens included) as canonical JSON: sorted keys, no spaces, UTF-8."""
    directory = Path(tokenizer_dir)
    vocab_txt, json_path = directory / "vocab.txt", directory / "tokenizer.json"
    if not json_path.is_file():
        if not vocab_txt.is_file():
            raise ElectraError(f"{directory}: missing tokenizer.json and vocab.txt")
        return sha256_file(vocab_txt)
    tokenizer = _from_json(json_path)
    if vocab_txt.is_file() and type(tokenizer.model).__name__ == "WordPiece":
        return sha256_file(vocab_txt)
    canonical = json.dumps(tokenizer.get_vocab(with_added_tokens=True), sort_keys=True,
                           ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def copy_tokenizer_files(src_dir: str | Path, dst_dir: str | Path) -> list[Path]:
    """Copy the tokenizer files next to a model or data set so it is self-contained."""
    src, dst = Path(src_dir), Path(dst_dir)
    if not ((src / "tokenizer.json").is_file() or (src / "vocab.txt").is_file()):
        raise ElectraError(f"{src}: missing tokenizer.json and vocab.txt (not a tokenizer "
                           "directory)")
    dst.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in ALL_TOKENIZER_FILES:
        if (src / name).is_file():
            copied.append(Path(shutil.copyfile(src / name, dst / name)))
    return copied


# --- internals -------------------------------------------------------------------------------


def bert_pipeline(model: models.Model, lowercase: bool,
                   strip_accents: bool | None = None) -> Tokenizer:
    """The BERT pipeline: clean + (lowercase, strip accents), split on whitespace/punctuation,
    WordPiece."""
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True,
        strip_accents=lowercase if strip_accents is None else strip_accents, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def add_bert_post_processor(tokenizer: Tokenizer, specials: dict[str, str]) -> None:
    cls, sep = specials["cls"], specials["sep"]
    tokenizer.post_processor = processors.BertProcessing(
        (sep, tokenizer.token_to_id(sep)), (cls, tokenizer.token_to_id(cls)))


def electra_post_processor(tokenizer: Tokenizer, cls: str, sep: str,
                            trimmer: processors.PostProcessor | None = None
                            ) -> processors.PostProcessor:
    """`cls A sep` and `cls A sep B sep` with segment ids 0 and 1: ELECTRA's (and BERT's)
    layout, the one pre-training packs."""
    template = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))])
    return template if trimmer is None else processors.Sequence([trimmer, template])


def _has_electra_layout(tokenizer: Tokenizer, cls_id: int, sep_id: int) -> bool:
    """Whether the pipeline's post-processor already gives `cls A sep (B sep)` with segment ids
    0/1, checked on what it does rather than on its type (BERT's files say it three ways)."""
    def probe():
        return tokenizer.encode("a", add_special_tokens=False)

    piece = probe().ids
    n = len(piece)
    single = tokenizer.post_process(probe(), None, add_special_tokens=True)
    pair = tokenizer.post_process(probe(), probe(), add_special_tokens=True)
    return (single.ids == [cls_id, *piece, sep_id] and single.type_ids == [0] * (n + 2)
            and pair.ids == [cls_id, *piece, sep_id, *piece, sep_id]
            and pair.type_ids == [0] * (n + 2) + [1] * (n + 1))


def _byte_level_trimmer(spec: dict | None) -> processors.PostProcessor | None:
    """The byte-level offset trimming of a post-processor being replaced (RoBERTa's and
    GPT-2's do it; SQuAD's answer spans read the offsets), if it had one."""
    if not spec:
        return None
    if spec.get("type") == "Sequence":
        return next(filter(None, map(_byte_level_trimmer, spec.get("processors", []))), None)
    if spec.get("type") in ("ByteLevel", "RobertaProcessing"):
        return processors.ByteLevel(trim_offsets=spec.get("trim_offsets", True),
                                    add_prefix_space=spec.get("add_prefix_space", True))
    return None


def _from_json(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on bad JSON
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ElectraError(f"{path}: cannot load tokenizer ({reason})") from None


def _read_pipeline(directory: Path) -> tuple[Tokenizer, dict[str, str]]:
    """A directory's pipeline as its files define it, and the role tokens its configs name."""
    if not directory.is_dir():
        raise ElectraError(f"tokenizer directory does not exist: {directory}")
    configs = [_read_config(directory / name) for name in CONFIG_FILES]
    named: dict[str, str] = {}
    for config in configs:  # special_tokens_map.json last: it wins, as in transformers
        for role in ROLES:
            value = config.get(f"{role}_token")
            if isinstance(value, dict):  # an AddedToken as transformers serializes it
                value = value.get("content")
            if isinstance(value, str) and value:
                named[role] = value
    json_path = directory / "tokenizer.json"
    if json_path.is_file():
        return _from_json(json_path), named
    vocab_path = directory / "vocab.txt"
    if not vocab_path.is_file():
        raise ElectraError(f"{directory}: missing tokenizer.json and vocab.txt")
    tokens = read_vocab(vocab_path)
    lowercase = bool(configs[0].get("do_lower_case", True))
    strip_accents = configs[0].get("strip_accents")
    vocab = {token: i for i, token in enumerate(tokens)}
    unk = named.get("unk", BERT_SPECIALS["unk"])
    model = models.WordPiece(vocab=vocab, unk_token=unk, continuing_subword_prefix="##")
    tokenizer = bert_pipeline(model, lowercase,
                               None if strip_accents is None else bool(strip_accents))
    # As transformers' BertTokenizer: the special tokens are matched whole in the text.
    tokenizer.add_special_tokens([token for role in ROLES
                                  if (token := named.get(role, BERT_SPECIALS[role])) in vocab])
    return tokenizer, named


def _resolve_roles(tokenizer: Tokenizer, named: dict[str, str], where: str) -> TokenizerInfo:
    """Each role's token (named in the configs, else BERT's spelling) and id; one error naming
    every missing role, or two roles sharing a token. `where`: the directory, or "" for a
    pipeline that came from none."""
    prefix = f"{where}: " if where else ""
    tokens = {role: named.get(role, BERT_SPECIALS[role]) for role in ROLES}
    ids = {role: tokenizer.token_to_id(token) for role, token in tokens.items()}
    missing = [role for role in ROLES if ids[role] is None]
    if missing:
        reasons = [f"{role}_token {tokens[role]!r} is not in its vocabulary" if role in named
                   else f"no {role}_token in {' or '.join(CONFIG_FILES)} and no "
                        f"{tokens[role]} in its vocabulary" for role in missing]
        listing = (missing[0] if len(missing) == 1
                   else f"{', '.join(missing[:-1])} or {missing[-1]}")
        raise ElectraError(f"{prefix}the tokenizer has no {listing} token "
                           f"({'; '.join(reasons)})")
    seen: dict[int, str] = {}
    for role in ROLES:
        if ids[role] in seen:
            raise ElectraError(f"{prefix}the {seen[ids[role]]} and {role} tokens are the same "
                               f"({tokens[role]!r}); electra needs five distinct special tokens")
        seen[ids[role]] = role
    kind = _MODEL_KINDS.get(type(tokenizer.model).__name__, type(tokenizer.model).__name__)
    return TokenizerInfo(where, kind.lower(), tokens, {r: int(i) for r, i in ids.items()},
                         tokenizer.get_vocab_size())


def _read_config(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ElectraError(f"{path}: not a valid tokenizer config ({err})") from None
    if not isinstance(config, dict):
        raise ElectraError(f"{path}: not a valid tokenizer config (not a JSON object)")
    return config


def read_vocab(path: Path) -> list[str]:
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


def tokenized_batch(tokenizer, texts: list, max_len: int | None = None
                    ) -> dict[str, torch.Tensor]:
    """Texts (or (text, pair) tuples) as one padded batch of torch tensors (input_ids,
    attention_mask, token_type_ids), tokenised with a model's own `tokenizers` pipeline
    (padding with its pad token's id, truncating to `max_len`)."""
    import torch  # this module stays torch-free until a batch is made

    tokenizer.enable_padding(pad_id=special_token_ids(tokenizer)["pad"])
    if max_len is not None:
        tokenizer.enable_truncation(max_len)
    encodings = tokenizer.encode_batch(texts)
    return {"input_ids": torch.tensor([e.ids for e in encodings]),
            "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
            "token_type_ids": torch.tensor([e.type_ids for e in encodings])}

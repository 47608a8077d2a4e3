"""Any tokenizer, not only our WordPiece: Unigram and byte-level BPE vocabularies, released
models' tokenizer directories (RoBERTa-style, cased vocab.txt), special tokens by role,
the vocabulary's identity, bad tokenizers refused in one line, and the held-out split that
`electra prepare` keeps by default."""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

from electra.cli import main
from electra.data.corpus import iter_documents, split_sentences
from electra.data.dataset import PretrainingDataset
from electra.data.prepare import prepare_corpus
from electra.data.split import (
    MIN_HELDOUT_CORPUS,
    first_heldout,
    heldout_selector,
    split_documents,
)
from electra.data.vocab import train_vocab
from electra.data.word_cache import WordCache, words_are_independent
from electra.errors import ElectraError
from electra.tokenizer import (
    ROLES,
    TokenizerInfo,
    load_tokenizer,
    special_token_ids,
    tokenizer_info,
    vocab_checksum,
)

SENTENCES = [
    "The café in Zürich was naïve, they said.",
    "KALOMI rentas vorqui!",
    "Unseen words like xylophone get split?",
]
ROBERTA = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}
TINY_RUN = {
    "preset": "tiny",
    "model": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "objective": {"generator_multiplier": 0.5},
    "train": {"steps": 3, "batch_size": 4, "warmup_steps": 1, "log_every": 1,
              "save_every": 100, "seed": 1},
}


@pytest.fixture(scope="module")
def kind_dirs(tmp_path_factory: pytest.TempPathFactory, corpus_file: Path,
              vocab_dir: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    dirs = {"wordpiece": vocab_dir}
    for kind in ("unigram", "bpe"):
        dirs[kind] = train_vocab([corpus_file], 600, root / kind, kind=kind,
                                 show_progress=False)
    return dirs


def roberta_style_dir(corpus: Path, out: Path) -> Path:
    """A RoBERTa-style directory as transformers writes it (RobertaTokenizerFast around a
    byte-level BPE trained here: no hub), post-processor `<s> A </s></s> B </s>` included."""
    transformers = pytest.importorskip("transformers")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([str(corpus)], BpeTrainer(
        vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    hf = transformers.RobertaTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
        cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    hf.save_pretrained(str(out))
    return out


# --- vocabularies of each kind ---------------------------------------------------------------


def test_each_kind_has_its_special_tokens_by_role(kind_dirs: dict[str, Path]) -> None:
    """Unigram: ALBERT's tokens; BPE: RoBERTa's, so pad is id 1 and cls id 0. Each is named in
    both config files, as transformers writes them."""
    expected = {
        "unigram": ({"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                     "mask": "[MASK]"}, {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}),
        "bpe": (ROBERTA, {"pad": 1, "unk": 3, "cls": 0, "sep": 2, "mask": 4}),
    }
    for kind, (tokens, ids) in expected.items():
        directory = kind_dirs[kind]
        assert sorted(p.name for p in directory.iterdir()) == [
            "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
        info = tokenizer_info(directory)
        assert (info.kind, info.special_tokens, info.special_ids) == (kind, tokens, ids)
        assert special_token_ids(directory) == special_token_ids(info) == ids
        assert special_token_ids(load_tokenizer(directory)) == ids
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            config = json.loads((directory / name).read_text())
            assert {role: config[f"{role}_token"] for role in ROLES} == tokens
        assert 300 < info.vocab_size <= 600


@pytest.mark.parametrize("kind", ["wordpiece", "unigram", "bpe"])
def test_transformers_loads_every_kind_with_the_same_ids(kind_dirs: dict[str, Path],
                                                         kind: str) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(kind_dirs[kind]), local_files_only=True)
    ours = load_tokenizer(kind_dirs[kind])
    for sentence in SENTENCES:
        assert hf(sentence)["input_ids"] == ours.encode(sentence).ids
    pair, enc = hf(SENTENCES[0], SENTENCES[1]), ours.encode(SENTENCES[0], SENTENCES[1])
    assert pair["input_ids"] == enc.ids and pair["token_type_ids"] == enc.type_ids
    ids = special_token_ids(ours)
    assert [ids[r] for r in ROLES] == [hf.pad_token_id, hf.unk_token_id, hf.cls_token_id,
                                       hf.sep_token_id, hf.mask_token_id]
    assert enc.ids[0] == ids["cls"] and enc.ids.count(ids["sep"]) == 2
    assert hf.model_max_length == 512


def test_unigram_and_bpe_pipelines(kind_dirs: dict[str, Path]) -> None:
    """Unigram: SentencePiece's meta symbol and NFKC; BPE: byte-level (no unknown character,
    offsets trimmed of the leading space); both lower-case by default and decode back."""
    unigram, bpe = load_tokenizer(kind_dirs["unigram"]), load_tokenizer(kind_dirs["bpe"])
    assert unigram.encode("the of", add_special_tokens=False).tokens[0].startswith("\u2581")
    assert unigram.encode("ﬁ").ids == unigram.encode("fi").ids  # NFKC
    text = "the émoji 🙂 of"
    enc = bpe.encode(text, add_special_tokens=False)
    assert special_token_ids(bpe)["unk"] not in enc.ids
    assert bpe.decode(enc.ids) == " " + text  # the added prefix space
    assert all(text[start] != " " for start, end in enc.offsets if end > start)
    for tok in (unigram, bpe):
        assert tok.encode("The Of").ids == tok.encode("the of").ids
        assert not words_are_independent(tok)


def test_vocab_kind_errors(corpus_file: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(ElectraError, match="kind must be one of wordpiece, unigram, bpe"):
        train_vocab([corpus_file], 600, tmp_path / "x", kind="sentencepiece")
    with pytest.raises(ElectraError, match="alphabet alone need"):  # 256 bytes + 5 specials
        train_vocab([corpus_file], 200, tmp_path / "y", kind="bpe", show_progress=False)
    assert main(["vocab", "--from-vocab", str(corpus_file), "--kind", "bpe",
                 "--out", str(tmp_path / "z")]) == 1
    assert "--from-vocab" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# --- released models' directories ------------------------------------------------------------


def test_roberta_style_directory_written_by_transformers(corpus_file: Path,
                                                         tmp_path: Path) -> None:
    """Roles from tokenizer_config.json (transformers 5 writes no special_tokens_map.json);
    inputs in ELECTRA's layout `<s> A </s> B </s>` with segment ids, not RoBERTa's
    `</s></s>`; the byte-level offset trimming kept; single sentences as transformers has them."""
    transformers = pytest.importorskip("transformers")
    directory = roberta_style_dir(corpus_file, tmp_path / "roberta")
    info = tokenizer_info(directory)
    assert info.special_tokens == ROBERTA and info.kind == "bpe"
    assert info.special_ids == {"pad": 1, "unk": 3, "cls": 0, "sep": 2, "mask": 4}
    ours = load_tokenizer(directory)
    hf = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    for sentence in SENTENCES:
        assert ours.encode(sentence).ids == hf(sentence)["input_ids"]
    a = ours.encode(SENTENCES[0], add_special_tokens=False).ids
    b = ours.encode(SENTENCES[1], add_special_tokens=False).ids
    enc = ours.encode(SENTENCES[0], SENTENCES[1])
    assert enc.ids == [0, *a, 2, *b, 2]
    assert enc.type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    text = "hello there world"
    offsets = ours.encode(text, add_special_tokens=False).offsets
    assert all(text[start] != " " for start, end in offsets if end > start)
    # the directory's own files are left as they are, and copied whole
    assert json.loads((directory / "tokenizer.json").read_text())["post_processor"]["type"] \
        == "RobertaProcessing"


def test_cased_and_uncased_vocab_txt_with_a_config(make_corpus, tmp_path: Path) -> None:
    """A released BERT directory without tokenizer.json: vocab.txt + tokenizer_config.json,
    whose do_lower_case is read; the word cache's fast path applies, and the vocabulary's
    identity is vocab.txt's SHA-256."""
    trained = train_vocab([make_corpus(80)], 400, tmp_path / "cased", lowercase=False,
                          show_progress=False)
    for lowercase in (False, True):
        bare = tmp_path / f"bare-{lowercase}"
        bare.mkdir()
        shutil.copyfile(trained / "vocab.txt", bare / "vocab.txt")
        (bare / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}))
        tok = load_tokenizer(bare)
        assert (tok.encode("The").ids == tok.encode("the").ids) is lowercase
        assert words_are_independent(tok)
        assert vocab_checksum(bare) == hashlib.sha256(
            (bare / "vocab.txt").read_bytes()).hexdigest() == vocab_checksum(trained)
    reference = load_tokenizer(trained)
    cased = load_tokenizer(tmp_path / "bare-False")
    for sentence in SENTENCES:
        assert cased.encode(sentence).ids == reference.encode(sentence).ids
        assert cased.encode(sentence, "x").type_ids == reference.encode(sentence, "x").type_ids


def test_vocab_txt_roles_named_in_the_config(tmp_path: Path) -> None:
    tokens = ["<unk>", "<cls>", "<pad>", "<sep>", "<mask>", "the", "cat", "##s", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({
        "pad_token": "<pad>", "unk_token": {"content": "<unk>", "lstrip": False},
        "cls_token": "<cls>", "sep_token": "<sep>", "mask_token": "<mask>"}))
    tok = load_tokenizer(tmp_path)
    assert special_token_ids(tok) == {"pad": 2, "unk": 0, "cls": 1, "sep": 3, "mask": 4}
    assert tok.encode("The cats dog").tokens == ["<cls>", "the", "cat", "##s", "<unk>", "<sep>"]
    assert tok.encode("the <mask> cat", add_special_tokens=False).tokens == [
        "the", "<mask>", "cat"]  # matched whole, as transformers' BertTokenizer does


# --- vocabulary identity -----------------------------------------------------------------------


def test_vocab_checksum_of_each_kind(kind_dirs: dict[str, Path], tmp_path: Path) -> None:
    """WordPiece with vocab.txt: its SHA-256, as always. Otherwise the token -> id map as
    canonical JSON: the same for a copy or a re-formatted tokenizer.json, not for another
    vocabulary."""
    wordpiece = kind_dirs["wordpiece"]
    assert vocab_checksum(wordpiece) == hashlib.sha256(
        (wordpiece / "vocab.txt").read_bytes()).hexdigest()
    for kind in ("unigram", "bpe"):
        directory = kind_dirs[kind]
        vocab = Tokenizer.from_file(str(directory / "tokenizer.json")).get_vocab()
        canonical = json.dumps(vocab, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        assert vocab_checksum(directory) == hashlib.sha256(canonical.encode()).hexdigest()
        spaced = tmp_path / kind
        spaced.mkdir()
        spec = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        (spaced / "tokenizer.json").write_text(json.dumps(spec, indent=4), encoding="utf-8")
        assert vocab_checksum(spaced) == vocab_checksum(directory)
    assert vocab_checksum(kind_dirs["unigram"]) != vocab_checksum(kind_dirs["bpe"])
    # a WordPiece directory with only tokenizer.json is identified by its vocabulary too
    only_json = tmp_path / "only-json"
    only_json.mkdir()
    shutil.copyfile(wordpiece / "tokenizer.json", only_json / "tokenizer.json")
    assert len(vocab_checksum(only_json)) == 64
    assert vocab_checksum(only_json) != vocab_checksum(wordpiece)


# --- bad tokenizers: one line, nothing written -------------------------------------------------


def _prepare_fails(capsys, corpus: Path, tokenizer: Path, out: Path) -> str:
    capsys.readouterr()
    assert main(["prepare", "--corpus", str(corpus), "--tokenizer", str(tokenizer), "--out",
                 str(out), "--workers", "1"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("electra prepare: error: "), lines
    assert not out.exists() and not any(p.name.startswith(f".{out.name}")
                                        for p in out.parent.iterdir())
    return lines[0]


def test_bad_tokenizers_are_refused_in_one_line(kind_dirs: dict[str, Path], corpus_file: Path,
                                                tmp_path: Path, capsys) -> None:
    # no mask token: the configs name none, and [MASK] is not in the vocabulary
    no_mask = tmp_path / "no-mask"
    shutil.copytree(kind_dirs["bpe"], no_mask)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        config = json.loads((no_mask / name).read_text())
        del config["mask_token"]
        (no_mask / name).write_text(json.dumps(config))
    line = _prepare_fails(capsys, corpus_file, no_mask, tmp_path / "out")
    assert str(no_mask) in line and "no mask token" in line and "[MASK]" in line
    # a GPT-2-like directory: every missing role is named
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    shutil.copyfile(kind_dirs["bpe"] / "tokenizer.json", gpt2 / "tokenizer.json")
    (gpt2 / "tokenizer_config.json").write_text(json.dumps({"unk_token": "<unk>"}))
    line = _prepare_fails(capsys, corpus_file, gpt2, tmp_path / "out")
    assert "no pad, cls, sep or mask token" in line
    # a role named in the config but absent from the vocabulary
    named = {f"{role}_token": token for role, token in ROBERTA.items()}
    (gpt2 / "tokenizer_config.json").write_text(json.dumps({**named, "mask_token": "<MASK>"}))
    assert "mask_token '<MASK>' is not in its vocabulary" in _prepare_fails(
        capsys, corpus_file, gpt2, tmp_path / "out")
    # two roles on one token
    (gpt2 / "tokenizer_config.json").write_text(json.dumps({**named, "pad_token": "</s>"}))
    assert "the pad and sep tokens are the same" in _prepare_fails(
        capsys, corpus_file, gpt2, tmp_path / "out")
    # unreadable tokenizer.json
    broken = tmp_path / "broken"
    shutil.copytree(kind_dirs["unigram"], broken)
    (broken / "tokenizer.json").write_text('{"version": "1.0", "model": {')
    line = _prepare_fails(capsys, corpus_file, broken, tmp_path / "out")
    assert f"{broken / 'tokenizer.json'}: cannot load tokenizer" in line
    # an invalid config
    (no_mask / "tokenizer_config.json").write_text("{oops")
    assert "not a valid tokenizer config" in _prepare_fails(capsys, corpus_file, no_mask,
                                                            tmp_path / "out")


def test_a_tokenizer_not_loaded_from_a_directory_uses_bert_spellings(vocab_dir: Path) -> None:
    raw = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    assert special_token_ids(raw) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    info = tokenizer_info(raw)
    assert isinstance(info, TokenizerInfo) and info.source == ""
    with pytest.raises(ElectraError, match=r"^the tokenizer has no pad, unk, cls, sep or mask"):
        special_token_ids(Tokenizer(models.BPE()))


# --- preparation with any tokenizer ------------------------------------------------------------


def _stored(data_dir: Path, split: str = "train") -> list[list[int]]:
    dataset = PretrainingDataset(data_dir, split)
    return [dataset.example(i)[0].tolist() for i in range(len(dataset))]


@pytest.mark.parametrize("kind", ["unigram", "bpe", "roberta"])
def test_prepare_tokenizes_other_pipelines_directly(kind: str, kind_dirs, make_corpus,
                                                    tmp_path: Path) -> None:
    """Non-BERT pipelines skip the word cache: each sentence goes to encode_batch, and the
    packed examples are those ids between the tokenizer's own cls and sep; batches are padded
    with its pad id."""
    corpus = make_corpus(60, seed=5)
    directory = (roberta_style_dir(corpus, tmp_path / "roberta") if kind == "roberta"
                 else kind_dirs[kind])
    tok = load_tokenizer(directory)
    ids = special_token_ids(tok)
    assert not WordCache(tok).enabled
    manifest = prepare_corpus([corpus], directory, 512, tmp_path / "data", heldout_fraction=0.0,
                              show_progress=False, workers=1)
    assert manifest["special_token_ids"] == ids
    assert manifest["vocab_checksum"] == vocab_checksum(directory)
    assert vocab_checksum(tmp_path / "data" / "tokenizer") == vocab_checksum(directory)
    expected = [i for doc in iter_documents([corpus]) for e in tok.encode_batch(
        split_sentences(doc.text), add_special_tokens=False) for i in e.ids]
    examples = _stored(tmp_path / "data")
    assert all(e[0] == ids["cls"] and e[-1] == ids["sep"] for e in examples)
    assert [i for e in examples for i in e[1:-1] if i != ids["sep"]] == expected
    dataset = PretrainingDataset(tmp_path / "data")
    batch = dataset.get_batch(range(len(dataset)))
    padding = batch["attention_mask"] == 0
    assert padding.any() and (batch["input_ids"][padding] == ids["pad"]).all()


# --- the held-out split kept by default --------------------------------------------------------


def test_heldout_documents_are_the_old_choice_plus_a_minimum_and_a_cap() -> None:
    """The running count floor((i + 1) * f + phase) > floor(i * f + phase) with a seeded phase
    chooses what earlier versions chose; a corpus of 20+ documents that it would leave without
    any gets one, a smaller corpus none; the cap stops the count."""
    for seed in range(40):
        phase = random.Random(seed).random()
        for fraction in (0.01, 0.003, 0.05, 0.3):
            assert heldout_selector(seed, fraction)(first_heldout(seed, fraction))
            for n in (MIN_HELDOUT_CORPUS - 1, MIN_HELDOUT_CORPUS, 57, 300):
                chosen = [i for i, (_, held) in enumerate(
                    split_documents(lambda n=n: range(n), seed, fraction)) if held]
                old = [i for i in range(n) if math.floor((i + 1) * fraction + phase)
                       > math.floor(i * fraction + phase)]
                if n < MIN_HELDOUT_CORPUS:
                    assert chosen == []
                    continue
                assert chosen == old if old else len(chosen) == 1
                assert abs(len(chosen) - n * fraction) <= 1
        capped = [i for i, (_, held) in enumerate(
            split_documents(lambda: range(1000), seed, 0.2, max_heldout=7)) if held]
        assert capped == [i for i in range(1000) if heldout_selector(seed, 0.2)(i)][:7]
    assert not any(held for _, held in split_documents(lambda: range(100), 1, 0.0))


def test_prepare_keeps_a_heldout_split_by_default(make_corpus, vocab_dir: Path,
                                                  tmp_path: Path) -> None:
    def heldout_documents(num_docs: int, *flags: str) -> int:
        out = tmp_path / f"data-{num_docs}-{len(flags)}"
        assert main(["prepare", "--corpus", str(make_corpus(num_docs)), "--tokenizer",
                     str(vocab_dir), "--seq-len", "32", "--out", str(out), "--workers", "1",
                     *flags]) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        splits = manifest["splits"]
        assert splits["train"]["num_documents"] + splits.get("heldout", {}).get(
            "num_documents", 0) == num_docs
        return splits["heldout"]["num_documents"] if "heldout" in splits else 0

    assert heldout_documents(300) == 3  # 1%
    assert heldout_documents(MIN_HELDOUT_CORPUS) == 1  # at least one from 20 documents
    assert heldout_documents(MIN_HELDOUT_CORPUS - 1) == 0  # none below that
    assert heldout_documents(300, "--heldout-fraction", "0") == 0
    assert heldout_documents(300, "--heldout-fraction", "0.5", "--max-heldout-documents",
                             "4") == 4
    assert len(PretrainingDataset(tmp_path / "data-300-0", "heldout")) > 0


# --- end to end ---------------------------------------------------------------------------------


def _user_task(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write("premise\thypothesis\tlabel\n")
        for _ in range(n):
            label = rng.choice(["yes", "no"])
            words = [rng.choice(["is", "was", "and", "to", "in"]) for _ in range(4)]
            f.write(" ".join(words) + f"\t{'the' if label == 'yes' else 'of'} café\t{label}\n")


@pytest.mark.parametrize("kind", ["unigram", "bpe", "roberta"])
def test_vocab_prepare_pretrain_finetune_score(kind: str, corpus_file: Path, tmp_path: Path,
                                               capsys) -> None:
    """`electra vocab --kind` (or a RoBERTa-style directory) -> prepare -> 3 pre-training
    steps -> fine-tuning 1 epoch on a sentence-pair user task -> PLL scores from the exported
    generator. config.json's pad_token_id is the tokenizer's."""
    tok = tmp_path / "tok"
    if kind == "roberta":
        roberta_style_dir(corpus_file, tok)
    else:
        assert main(["vocab", "--corpus", str(corpus_file), "--kind", kind, "--vocab-size",
                     "600", "--out", str(tok)]) == 0
    ids = special_token_ids(tok)
    data = tmp_path / "data"
    assert main(["prepare", "--corpus", str(corpus_file), "--tokenizer", str(tok), "--seq-len",
                 "32", "--out", str(data), "--workers", "1"]) == 0
    assert json.loads((data / "manifest.json").read_text())["splits"]["heldout"][
        "num_documents"] == 3  # the default: 1% of 300 documents
    config = tmp_path / "run.json"
    config.write_text(json.dumps(TINY_RUN))
    run = tmp_path / "run"
    assert main(["pretrain", "--config", str(config), "--data", str(data), "--out", str(run),
                 "--quiet"]) == 0
    final = run / "final"
    for network in ("discriminator", "generator"):
        exported = json.loads((final / network / "config.json").read_text())
        assert exported["pad_token_id"] == ids["pad"]
        assert exported["vocab_size"] == tokenizer_info(tok).vocab_size
        assert special_token_ids(final / network) == ids
    (tmp_path / "task").mkdir()
    _user_task(tmp_path / "task" / "train.tsv", 64, 0)
    _user_task(tmp_path / "task" / "dev.tsv", 20, 1)
    assert main(["finetune", "--model", str(final / "discriminator"), "--task", "user",
                 "--text-a", "premise", "--text-b", "hypothesis", "--label", "label", "--data",
                 str(tmp_path / "task"), "--out", str(tmp_path / "ft"), "--epochs", "1",
                 "--batch-size", "16", "--quiet"]) == 0
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert 0.0 <= results["median"]["accuracy"] <= 1.0
    assert special_token_ids(tmp_path / "ft" / "model") == ids
    capsys.readouterr()
    (tmp_path / "in.txt").write_text("The cat sat on the mat.\nWho should Derek hug?\n")
    scores = tmp_path / "scores.jsonl"
    assert main(["score", "--model", str(final / "generator"), "--input",
                 str(tmp_path / "in.txt"), "--out", str(scores)]) == 0
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert len(rows) == 2 and all(isinstance(r["pll"], float) and r["pll"] < 0 for r in rows)

"""Released models by their Hugging Face Hub id: a cache in huggingface_hub's layout
(models--ORG--NAME/refs/<ref>, snapshots/<commit>/) holding a BERT model transformers wrote,
read with HF_HUB_OFFLINE=1 (never a network call). An id works wherever a folder does and
gives the same results as the snapshot's folder; --revision picks another snapshot; an id
missing from the cache is one line, with nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.cli import main
from electra.errors import ElectraError
from electra.hub import resolve_model_path, snapshot_of, source_record

transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

REPO = "tiny-org/tiny-bert"
MAIN = "a" * 40  # the commit refs/main names
TAGGED = "b" * 40  # another commit, under the tag v2
SST2 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "glue" / "SST-2"
SRC = Path(__file__).resolve().parents[1] / "src"


def _bert(folder: Path, vocab_dir: Path, seed: int) -> Path:
    n = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    torch.manual_seed(seed)
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=n, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128))
    model.save_pretrained(folder, safe_serialization=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        if (vocab_dir / name).is_file():
            shutil.copy(vocab_dir / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory, vocab_dir) -> Path:
    """HF_HUB_CACHE with REPO at two commits: MAIN (refs/main) and TAGGED (refs/v2, a tag)."""
    cache = tmp_path_factory.mktemp("hf") / "hub"
    repo = cache / ("models--" + REPO.replace("/", "--"))
    for commit, ref, seed in ((MAIN, "main", 0), (TAGGED, "v2", 1)):
        _bert(repo / "snapshots" / commit, vocab_dir, seed)
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return cache


@pytest.fixture
def offline(hub_cache, monkeypatch) -> Path:
    """This process reads `hub_cache` offline: huggingface_hub reads its environment when it is
    imported, so its constants are set too."""
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return hub_cache


def _snapshot(cache: Path, commit: str) -> Path:
    return cache / ("models--" + REPO.replace("/", "--")) / "snapshots" / commit


def test_ids_resolve_from_the_cache_by_ref_tag_and_commit(offline):
    assert resolve_model_path(REPO).resolve() == _snapshot(offline, MAIN).resolve()
    assert resolve_model_path(REPO, "v2").resolve() == _snapshot(offline, TAGGED).resolve()
    assert resolve_model_path(REPO, TAGGED).resolve() == _snapshot(offline, TAGGED).resolve()
    assert snapshot_of(resolve_model_path(REPO, "v2")).commit == TAGGED
    assert source_record(_snapshot(offline, MAIN), "model") == {"model": REPO,
                                                                "model_revision": MAIN}
    assert source_record(_snapshot(offline, MAIN) / "sub", "model") == {
        "model": str(_snapshot(offline, MAIN) / "sub")}


def test_a_local_folder_wins_over_an_id_of_the_same_spelling(offline, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path(REPO).mkdir(parents=True)
    assert resolve_model_path(REPO) == Path(REPO)
    with pytest.raises(ElectraError, match=r"^--model tiny-org/tiny-bert: a local folder; "
                                           r"--revision v2 picks a version of a Hub id"):
        resolve_model_path(REPO, "v2")


def test_uncached_ids_unknown_revisions_and_non_ids_are_one_line(offline, tmp_path):
    with pytest.raises(ElectraError) as e:
        resolve_model_path("tiny-org/absent", what="--init-from")
    assert str(e.value) == (
        f"--init-from tiny-org/absent: no such folder, and not in the Hugging Face cache "
        f"{offline} (HF_HUB_OFFLINE is set; on a machine with network, `hf download "
        f"tiny-org/absent` fills the cache)")
    with pytest.raises(ElectraError, match=r"^--model tiny-org/tiny-bert at revision v9: no "
                                           r"such folder, and not in the Hugging Face cache"):
        resolve_model_path(REPO, "v9")
    for name in (str(tmp_path / "nope"), "a/b/c", "./x--y"):
        with pytest.raises(ElectraError) as e:
            resolve_model_path(name, what="--tokenizer")
        assert str(e.value) == (f"{name}: directory does not exist (--tokenizer takes a folder "
                                "or a Hugging Face Hub id, ORG/NAME)")
    with pytest.raises(ElectraError, match="does not exist"):  # a Path is never an id
        resolve_model_path(Path(REPO))


def _finetune(model: str | Path, out: Path, *extra: str) -> dict:
    assert main(["finetune", "--model", str(model), "--task", "SST-2", "--data", str(SST2),
                 "--out", str(out), "--max-train-examples", "64", "--max-eval-examples", "32",
                 "--epochs", "1", "--batch-size", "16", "--seed", "3", "--quiet",
                 *extra]) == 0
    return json.loads((out / "results.json").read_text())


@pytest.mark.skipif(not SST2.is_dir(), reason=f"SST-2 absent ({SST2})")
def test_finetune_by_id_scores_as_from_the_snapshot_folder(offline, tmp_path):
    by_id = _finetune(REPO, tmp_path / "id")
    by_path = _finetune(_snapshot(offline, MAIN), tmp_path / "path")
    assert by_id["seeds"][0]["scores"] == by_path["seeds"][0]["scores"]
    predictions = [(Path(r["seeds"][0]["predictions"]["dev"])).read_text()
                   for r in (by_id, by_path)]
    assert predictions[0] == predictions[1]
    for out in ("id", "path"):  # the id and its commit are recorded, not the cache path
        res = json.loads((tmp_path / out / "results.json").read_text())
        run = json.loads((tmp_path / out / "run.json").read_text())
        info = json.loads((tmp_path / out / "model" / "finetune.json").read_text())
        assert (res["model"], res["model_revision"]) == (REPO, MAIN)
        assert (run["model"], run["model_revision"]) == (REPO, MAIN)
        assert (info["source_model"], info["source_model_revision"]) == (REPO, MAIN)
        card = (tmp_path / out / "model" / "README.md").read_text()
        assert f"base_model: {REPO}\n" in card
    tagged = _finetune(REPO, tmp_path / "v2", "--revision", "v2")
    assert (tagged["model"], tagged["model_revision"]) == (REPO, TAGGED)


def _pretrain(init: str | Path, data_dir: Path, out: Path, *extra: str) -> Path:
    assert main(["pretrain", "--init-from", str(init), "--data", str(data_dir), "--out",
                 str(out), "--steps", "2", "--batch-size", "4", "--log-every", "1",
                 "--eval-every", "0", "--quiet", *extra]) == 0
    return out / "final" / "discriminator" / "model.safetensors"


def test_pretrain_init_from_id_trains_as_from_the_snapshot_folder(offline, data_dir, tmp_path):
    by_id = load_file(_pretrain(REPO, data_dir, tmp_path / "id"))
    by_path = load_file(_pretrain(_snapshot(offline, MAIN), data_dir, tmp_path / "path"))
    assert by_id.keys() == by_path.keys()
    assert all(torch.equal(by_id[k], by_path[k]) for k in by_id)
    init = json.loads((tmp_path / "id" / "run.json").read_text())["init"]
    assert (init["from"], init["from_revision"]) == (REPO, MAIN)
    card = (tmp_path / "id" / "final" / "discriminator" / "README.md").read_text()
    assert f"base_model: {REPO}\n" in card
    tagged = load_file(_pretrain(REPO, data_dir, tmp_path / "v2", "--revision", "v2"))
    from_tag = load_file(_pretrain(_snapshot(offline, TAGGED), data_dir, tmp_path / "v2path"))
    assert all(torch.equal(tagged[k], from_tag[k]) for k in tagged)
    assert not torch.equal(tagged["electra.embeddings.word_embeddings.weight"],
                           by_id["electra.embeddings.word_embeddings.weight"])


def _electra(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = "import sys; from electra.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_the_command_line_reads_the_cache_from_the_environment(hub_cache, corpus_file,
                                                               tmp_path):
    """End to end as a user runs it: HF_HUB_CACHE and HF_HUB_OFFLINE set before the command
    starts. A cached id prepares data; an uncached one is one line and OUT is never made."""
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = _electra("prepare", "--corpus", str(corpus_file), "--tokenizer", REPO, "--revision",
                    "v2", "--out", str(tmp_path / "data"), "--workers", "1", "--quiet", env=env)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert (manifest["tokenizer_hub_id"], manifest["tokenizer_revision"]) == (REPO, TAGGED)
    for args in (["finetune", "--model", "tiny-org/absent", "--task", "SST-2", "--data",
                  str(tmp_path)],
                 ["pretrain", "--init-from", "tiny-org/absent", "--data", str(tmp_path / "data")]):
        failed = _electra(*args, "--out", str(tmp_path / "out"), env=env)
        assert failed.returncode == 1
        assert failed.stderr.strip().splitlines() == [
            f"electra {args[0]}: error: {args[1]} tiny-org/absent: no such folder, and not in "
            f"the Hugging Face cache {hub_cache} (HF_HUB_OFFLINE is set; on a machine with "
            "network, `hf download tiny-org/absent` fills the cache)"]
        assert not (tmp_path / "out").exists()


def test_score_by_id_scores_as_from_the_snapshot_folder(offline, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat on the mat\na dog ran\n", encoding="utf-8")
    rows = []
    for model, out in ((REPO, "id.jsonl"), (str(_snapshot(offline, MAIN)), "path.jsonl")):
        assert main(["score", "--model", model, "--input", str(texts), "--out",
                     str(tmp_path / out), "--device", "cpu", "--quiet"]) == 0
        rows.append([json.loads(line) for line in (tmp_path / out).read_text().splitlines()])
    assert [r["pll"] for r in rows[0]] == [r["pll"] for r in rows[1]]
    assert len(rows[0]) == 2


def test_revision_without_an_id_is_refused(data_dir, tmp_path, capsys):
    assert main(["pretrain", "--revision", "v2", "--data", str(data_dir), "--out",
                 str(tmp_path / "out")]) == 1
    assert "--revision picks a version of --init-from's Hub id" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

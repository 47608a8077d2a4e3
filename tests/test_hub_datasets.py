"""Task data by its Hugging Face Hub dataset id: a cache in huggingface_hub's layout
(datasets--ORG--NAME/refs/main, snapshots/<commit>/sst2/*.parquet) written from the shipped
SST-2, read with HF_HUB_OFFLINE=1 (never a network call). `finetune --data nyu-mll/glue`
scores exactly as the same files in a local folder; --data-config picks a config folder;
results record the id and commit; an uncached id is one line with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="needs the corpora extra (pyarrow)")
huggingface_hub = pytest.importorskip("huggingface_hub")
hub_constants = pytest.importorskip("huggingface_hub.constants")

from conftest import SHARED_DATA  # noqa: E402
from hub_helpers import glue_columns, write_layout  # noqa: E402

from electra.cli import main  # noqa: E402
from electra.errors import ElectraError  # noqa: E402
from electra.hub import (  # noqa: E402
    DATASET_ROOT_FILES,
    HubSnapshot,
    resolve_data_path,
    snapshot_of,
    source_record,
)
from electra.tasks import get_task  # noqa: E402
from electra.tasks.glue import SPECS  # noqa: E402

SST2 = SHARED_DATA / "glue" / "SST-2"
REPO = "nyu-mll/glue"
MAIN = "c" * 40  # the commit refs/main names
TAGGED = "d" * 40  # another commit, under the tag v2: the same data as config "sst2-copy"

needs_sst2 = pytest.mark.skipif(not SST2.is_dir(), reason=f"SST-2 absent ({SST2})")


def _snapshot(cache: Path, commit: str) -> Path:
    return cache / ("datasets--" + REPO.replace("/", "--")) / "snapshots" / commit


@pytest.fixture(scope="module")
def local_glue(tmp_path_factory) -> Path:
    """A local folder in nyu-mll/glue's layout (sst2/train-*.parquet, validation-*) holding
    the first 96 training and 64 dev sentences of the shipped SST-2."""
    if not SST2.is_dir():
        pytest.skip(f"SST-2 absent ({SST2})")
    tsv = tmp_path_factory.mktemp("tsv") / "SST-2"
    tsv.mkdir()
    for split, rows in (("train", 96), ("dev", 64)):
        lines = (SST2 / f"{split}.tsv").read_text().splitlines()[:rows + 1]
        (tsv / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    examples = {split: get_task("SST-2").read(tsv.parent, split) for split in ("train", "dev")}
    splits = {hub: glue_columns(SPECS["SST-2"], examples[split], test=False)
              for split, hub in (("train", "train"), ("dev", "validation"))}
    return write_layout("config", tmp_path_factory.mktemp("local") / "glue", splits,
                        config="sst2")


@pytest.fixture(scope="module")
def dataset_cache(tmp_path_factory, local_glue) -> Path:
    """HF_HUB_CACHE with REPO at MAIN (refs/main: sst2/) and TAGGED (refs/v2: sst2-copy/)."""
    cache = tmp_path_factory.mktemp("hf") / "hub"
    repo = cache / ("datasets--" + REPO.replace("/", "--"))
    for commit, ref, config in ((MAIN, "main", "sst2"), (TAGGED, "v2", "sst2-copy")):
        shutil.copytree(local_glue / "sst2", _snapshot(cache, commit) / config)
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return cache


@pytest.fixture
def offline(dataset_cache, monkeypatch) -> Path:
    """This process reads `dataset_cache` offline (huggingface_hub's constants are read when
    it is imported, so they are set too)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(dataset_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(dataset_cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    return dataset_cache


def _finetune(model: Path, data: str | Path, out: Path, *extra: str) -> dict:
    assert main(["finetune", "--model", str(model), "--task", "SST-2", "--data", str(data),
                 "--out", str(out), "--max-train-examples", "96", "--max-eval-examples", "64",
                 "--epochs", "1", "--batch-size", "16", "--seed", "3", "--quiet",
                 *extra]) == 0
    return json.loads((out / "results.json").read_text())


def _predictions(res: dict) -> str:
    return Path(res["seeds"][0]["predictions"]["dev"]).read_text()


@needs_sst2
def test_finetune_by_dataset_id_scores_as_from_a_local_folder(offline, local_glue, tiny_model,
                                                              tmp_path):
    local = _finetune(tiny_model, local_glue, tmp_path / "local")
    by_id = _finetune(tiny_model, REPO, tmp_path / "id")
    assert by_id["seeds"][0]["scores"] == local["seeds"][0]["scores"]
    assert by_id["seeds"][0]["final_train_loss"] == local["seeds"][0]["final_train_loss"]
    assert _predictions(by_id) == _predictions(local)
    assert len(_predictions(local).splitlines()) == 64
    assert local["data"] == str(local_glue) and "data_revision" not in local
    # the id and its commit are recorded, not the cache path
    for record in (by_id, json.loads((tmp_path / "id" / "run.json").read_text())):
        assert (record["data"], record["data_revision"]) == (REPO, MAIN)
        assert "data_config" not in record
    # evaluate reads the id too, and scores the model as finetune did
    assert main(["evaluate", "--model", str(tmp_path / "id" / "model"), "--data", REPO,
                 "--out", str(tmp_path / "eval"), "--max-eval-examples", "64"]) == 0
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert evaluated["scores"] == by_id["median"]
    assert (evaluated["data"], evaluated["data_revision"]) == (REPO, MAIN)
    # --task glue finds the tasks whose configs the snapshot holds: here SST-2 alone
    assert main(["finetune", "--model", str(tiny_model), "--task", "glue", "--data", REPO,
                 "--out", str(tmp_path / "glue"), "--max-train-examples", "96",
                 "--max-eval-examples", "64", "--epochs", "1", "--batch-size", "16", "--seed",
                 "3", "--quiet"]) == 0
    suite = json.loads((tmp_path / "glue" / "results.json").read_text())
    assert list(suite["tasks"]) == ["SST-2"]
    assert suite["tasks"]["SST-2"]["medians"] == local["median"]
    task = json.loads((tmp_path / "glue" / "SST-2" / "results.json").read_text())
    assert (task["data"], task["data_revision"]) == (REPO, MAIN)


@needs_sst2
def test_data_config_and_data_revision_pick_a_config_and_a_commit(offline, local_glue,
                                                                  tiny_model, tmp_path):
    """--data-revision v2 reads the tagged commit, whose config sst2-copy no task knows:
    --data-config names it. The same rows score as the local folder's config does."""
    local = _finetune(tiny_model, local_glue, tmp_path / "local", "--data-config", "sst2")
    tagged = _finetune(tiny_model, REPO, tmp_path / "v2", "--data-revision", "v2",
                       "--data-config", "sst2-copy")
    assert tagged["seeds"][0]["scores"] == local["seeds"][0]["scores"]
    assert _predictions(tagged) == _predictions(local)
    assert local["data"] == str(local_glue / "sst2")
    assert (tagged["data"], tagged["data_revision"], tagged["data_config"]) == (
        REPO, TAGGED, "sst2-copy")


def test_uncached_dataset_ids_are_one_line_and_write_nothing(offline, tiny_model, tmp_path,
                                                             capsys):
    out = tmp_path / "out"
    args = ["--model", str(tiny_model), "--task", "SST-2", "--out", str(out), "--quiet"]
    assert main(["finetune", *args, "--data", "nyu-mll/absent"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"electra finetune: error: --data nyu-mll/absent: no such folder, and not in the "
        f"Hugging Face cache {offline} (HF_HUB_OFFLINE is set; on a machine with network, "
        "`hf download nyu-mll/absent --repo-type dataset` fills the cache)"]
    assert main(["finetune", *args, "--data", REPO, "--data-revision", "v9"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"electra finetune: error: --data {REPO} at revision v9: no such folder, and not in "
        f"the Hugging Face cache {offline} (HF_HUB_OFFLINE is set; on a machine with network, "
        f"`hf download {REPO} --repo-type dataset --revision v9` fills the cache)"]
    assert main(["finetune", *args, "--data", REPO, "--data-config", "cola"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"electra finetune: error: --data-config cola: no folder cola/ in {REPO} (folders "
        "there: sst2)"]
    assert not out.exists()


def test_a_local_folder_wins_over_an_id_of_the_same_spelling(offline, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (Path(REPO) / "sst2").mkdir(parents=True)
    assert resolve_data_path(REPO) == REPO
    assert resolve_data_path(REPO, "sst2") == Path(REPO) / "sst2"
    with pytest.raises(ElectraError) as e:
        resolve_data_path(REPO, revision="v2")
    assert str(e.value) == (f"--data {REPO}: a local folder; --data-revision v2 picks a version "
                            "of a Hub dataset id (ORG/NAME) only")


def test_paths_that_are_not_ids_go_to_the_task_and_bad_configs_are_refused(tmp_path):
    absent = str(tmp_path / "absent")
    assert resolve_data_path(absent) == absent  # the task's reader names what it looked for
    with pytest.raises(ElectraError) as e:
        resolve_data_path(absent, "sst2")
    assert str(e.value) == (f"{absent}: directory does not exist (--data takes a folder or a "
                            "Hugging Face Hub dataset id, ORG/NAME)")
    for config in ("", "..", "a/b"):
        with pytest.raises(ElectraError) as e:
            resolve_data_path(tmp_path, config)
        assert str(e.value) == (f"--data-config {config!r}: the name of a config's folder, as "
                                "the dataset's repository names it (nyu-mll/glue: sst2, mnli, "
                                "...)")


def test_dataset_snapshots_and_their_configs_are_recorded_by_id(offline):
    root = resolve_data_path(REPO)
    assert Path(root).resolve() == _snapshot(offline, MAIN).resolve()
    assert snapshot_of(root) == HubSnapshot(REPO, MAIN, "dataset", None)
    assert snapshot_of(Path(root) / "sst2") == HubSnapshot(REPO, MAIN, "dataset", "sst2")
    assert source_record(root, "data") == {"data": REPO, "data_revision": MAIN}
    assert source_record(resolve_data_path(REPO, "sst2-copy", "v2"), "data") == {
        "data": REPO, "data_revision": TAGGED, "data_config": "sst2-copy"}
    # a model snapshot's subfolder is still no snapshot
    model = offline / "models--org--m" / "snapshots" / MAIN / "sub"
    assert snapshot_of(model) is None


def test_only_the_folders_the_tasks_read_are_fetched(monkeypatch, tmp_path):
    """What a dataset id downloads: the task's config folders (SST-2's: SST-2/ and nyu-mll/glue's
    sst2/) and the root's layouts; with --data-config, that folder alone (and the card)."""
    asked = []

    def snapshot_download(repo_id, **kwargs):
        asked.append((repo_id, kwargs))
        (tmp_path / "sst2").mkdir(exist_ok=True)
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    from electra.finetuning.examples import data_folder

    assert data_folder(REPO, [get_task("SST-2")]) == tmp_path
    assert data_folder(REPO, [get_task("SST-2")], "sst2", "v2") == tmp_path / "sst2"
    (_, first), (_, second) = asked
    assert first["repo_type"] == "dataset" and first["revision"] is None
    assert first["allow_patterns"] == ["SST-2/*", "sst2/*", *DATASET_ROOT_FILES]
    assert first["local_files_only"] is False
    assert second["allow_patterns"] == ["sst2/*", "README.md"]
    assert second["revision"] == "v2"

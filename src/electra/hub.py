"""Released models, tokenizers and datasets by their Hugging Face Hub id (ORG/NAME), through
the Hub's local cache: the one place every option that reads a model or tokenizer folder
(`finetune --model`, `pretrain --init-from`, `prepare --tokenizer`, `score --model`, ...) or task
data (`finetune --data`, `evaluate --data`, `predict --data`) turns an id into a folder.

`huggingface_hub` does the work (`snapshot_download`), so its settings hold as they do for
transformers: HF_HOME and HF_HUB_CACHE (where the cache is), HF_HUB_OFFLINE (never ask the Hub:
an id resolves only from the cache), HF_TOKEN (private and gated repositories). A local folder
always wins over an id of the same spelling. A snapshot folder records its id and commit in
its path (models--ORG--NAME/snapshots/COMMIT, datasets--ORG--NAME/snapshots/COMMIT), which is
how runs record where a model or their data came from (`snapshot_of`, `source_name`,
`source_record`) without keeping anything else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.errors import ElectraError, install_hint

# A folder in the Hub's cache (huggingface_hub's download layout) names its id; the snapshot
# folder itself also names the commit.
HUB_CACHE_PATH = re.compile(r"models--([\w.-]+)--([\w.-]+)/snapshots/")
HUB_SNAPSHOT = re.compile(r"models--([\w.-]+)--([\w.-]+)/snapshots/([^/]+)/?$")
# A dataset's snapshot, or one config folder of it (nyu-mll/glue's sst2/), which task data is.
HUB_DATASET_SNAPSHOT = re.compile(
    r"datasets--([\w.-]+)--([\w.-]+)/snapshots/([^/]+)(?:/([^/]+))?/?$")
MODEL, DATASET = "model", "dataset"  # huggingface_hub's repo types
# What electra reads of a model folder: config, weights, tokenizer files, remote code, card.
# A snapshot is fetched with only these, not a repository's TensorFlow or Flax weights.
MODEL_FILES = ("*.json", "*.txt", "*.model", "*.safetensors", "pytorch_model.bin", "*.py",
               "README.md")
# What electra reads of a dataset repository (`electra.tasks.hub_layout`): a config's folder
# (nyu-mll/glue's sst2/), else what the layouts find at its root: data/, split files and
# folders (train*, validation*, dev*, test*: Parquet shards, SQuAD's JSON, save_to_disk splits),
# a save_to_disk Dataset (state.json, data-*.arrow) or DatasetDict (dataset_dict.json); never
# the other configs' data. README.md: the dataset card.
DATASET_ROOT_FILES = ("README.md", "state.json", "data*", "train*", "validation*", "dev*",
                      "test*")
DOWNLOAD = "hf download"  # huggingface_hub's command (`huggingface-cli download` before 1.0)


@dataclass(frozen=True)
class HubSnapshot:
    """Where a snapshot folder came from: its Hub id and the commit it holds; for a dataset,
    the config folder named (None: the snapshot itself)."""

    repo_id: str
    commit: str
    repo_type: str = MODEL
    config: str | None = None


def resolve_model_path(name_or_path: str | Path, revision: str | None = None,
                       what: str = "--model") -> Path:
    """The folder `name_or_path` names: an existing path as it is, else a Hub id's snapshot in
    the cache (downloaded first unless HF_HUB_OFFLINE is set). A `Path` is always a folder;
    only a string can be an id. `revision`: a branch, tag or commit of the id (an error with a
    local folder). `what`: the option, for messages. Nothing is written but the Hub's cache."""
    path = Path(name_or_path)
    if path.exists():
        if revision is not None:
            raise ElectraError(f"{what} {name_or_path}: a local folder; --revision {revision} "
                               "picks a version of a Hub id (ORG/NAME) only")
        return path
    if isinstance(name_or_path, Path) or not is_hub_id(name_or_path):
        raise ElectraError(f"{name_or_path}: directory does not exist ({what} takes a folder or "
                           "a Hugging Face Hub id, ORG/NAME)")
    return _snapshot(name_or_path, revision, what, MODEL, MODEL_FILES)


def resolve_data_path(name_or_path: str | Path, config: str | None = None,
                      revision: str | None = None, configs: Sequence[str] = (),
                      what: str = "--data") -> str | Path:
    """The task data folder `name_or_path` names: an existing path as it is, else a Hub dataset
    id's snapshot in the cache (downloaded first unless HF_HUB_OFFLINE is set); with `config`
    (--data-config), its folder of that name. Only a string that is not an existing path and is
    spelled as an id goes to the Hub; anything else is returned for the task's reader to judge.
    An id's snapshot holds `config`'s folder, else the `configs` folders the tasks look in
    (nyu-mll/glue's sst2/) and the root's layouts (DATASET_ROOT_FILES). `revision`
    (--data-revision): a branch, tag or commit of the id."""
    if config is not None and (not config or config in (".", "..")
                               or any(c in config for c in "/\\")):
        raise ElectraError(f"--data-config {config!r}: the name of a config's folder, as the "
                           "dataset's repository names it (nyu-mll/glue: sst2, mnli, ...)")
    path = Path(name_or_path)
    if path.exists():
        if revision is not None:
            raise ElectraError(f"{what} {name_or_path}: a local folder; --data-revision "
                               f"{revision} picks a version of a Hub dataset id (ORG/NAME) only")
        folder: str | Path = name_or_path
    elif isinstance(name_or_path, Path) or not is_hub_id(name_or_path):
        if config is None and revision is None:
            return name_or_path  # the task's reader says what it looked for
        raise ElectraError(f"{name_or_path}: directory does not exist ({what} takes a folder "
                           "or a Hugging Face Hub dataset id, ORG/NAME)")
    else:
        wanted = (f"{config}/*", "README.md") if config else \
            (*(f"{c}/*" for c in dict.fromkeys(configs) if c), *DATASET_ROOT_FILES)
        folder = _snapshot(name_or_path, revision, what, DATASET, wanted)
    if config is None:
        return folder
    chosen = Path(folder) / config
    if not chosen.is_dir():
        have = sorted(p.name for p in Path(folder).glob("*")
                      if p.is_dir() and not p.name.startswith("."))
        raise ElectraError(f"--data-config {config}: no folder {config}/ in {name_or_path} "
                           f"(folders there: {', '.join(have) or 'none'})")
    return chosen


def is_hub_id(name: str) -> bool:
    """Whether `name` is spelled as a Hub id (huggingface_hub's own rule)."""
    if "\\" in name or name.startswith(("~", "/")):
        return False
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def snapshot_of(path: str | Path) -> HubSnapshot | None:
    """The Hub id and commit of a snapshot folder in the Hub's cache, or of a dataset
    snapshot's config folder; None for any other folder (a subfolder of a model's snapshot
    included)."""
    where = Path(path).resolve().as_posix()
    found = HUB_SNAPSHOT.search(where)
    if found:
        return HubSnapshot(f"{found[1]}/{found[2]}", found[3])
    found = HUB_DATASET_SNAPSHOT.search(where)
    return HubSnapshot(f"{found[1]}/{found[2]}", found[3], DATASET, found[4]) if found else None


def source_name(path: str | Path) -> str:
    """How a run records the model or tokenizer it read: the Hub id for a snapshot of the
    cache, else the path."""
    snapshot = snapshot_of(path)
    return snapshot.repo_id if snapshot else str(path)


def source_record(path: str | Path, key: str) -> dict[str, str]:
    """{key: source_name(path)}, and for a snapshot {key}_revision: the commit it holds (and
    {key}_config: a dataset's config folder, where one was read)."""
    snapshot = snapshot_of(path)
    if snapshot is None:
        return {key: str(path)}
    record = {key: snapshot.repo_id, f"{key}_revision": snapshot.commit}
    if snapshot.config is not None:
        record[f"{key}_config"] = snapshot.config
    return record


def _snapshot(repo_id: str, revision: str | None, what: str, repo_type: str,
              allow_patterns: Sequence[str]) -> Path:
    """The snapshot of a model or dataset id (`repo_type`) with only `allow_patterns`' files:
    from the cache, or downloaded into it."""
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.utils import (
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise ElectraError(f"{what} {repo_id}: not a folder, and reading Hub ids needs "
                           f"huggingface_hub: {install_hint('hf')}") from None
    # Read at call time, not at the library's import: its own defaults, made explicit.
    cache, offline = constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE
    name = repo_id if revision is None else f"{repo_id} at revision {revision}"
    kind = "dataset" if repo_type == DATASET else "model"
    try:
        return Path(snapshot_download(repo_id, repo_type=repo_type, revision=revision,
                                      cache_dir=cache, local_files_only=offline,
                                      allow_patterns=list(allow_patterns)))
    except RevisionNotFoundError:
        raise ElectraError(f"{what} {repo_id}: the Hub has no revision {revision} of it "
                           "(a branch, tag or commit)") from None
    except GatedRepoError:
        raise ElectraError(f"{what} {repo_id}: a gated {kind}; accept its terms on the Hub and "
                           "log in (`hf auth login`, or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise ElectraError(f"{what} {repo_id}: no such folder, and no Hub {kind} of that id (or "
                           "a private one: log in with `hf auth login`, or set HF_TOKEN)") from None
    except LocalEntryNotFoundError as e:
        if type(e).__name__ == "IncompleteSnapshotError":
            raise ElectraError(f"{what} {name}: its snapshot in the Hugging Face cache {cache} "
                               f"is incomplete; {_first_line(e)}") from None
        why = ("HF_HUB_OFFLINE is set" if offline else "the Hub cannot be reached")
        command = " ".join([DOWNLOAD, repo_id, *(["--repo-type", DATASET] if repo_type == DATASET
                                                 else []),
                            *(["--revision", revision] if revision else [])])
        raise ElectraError(f"{what} {name}: no such folder, and not in the Hugging Face cache "
                           f"{cache} ({why}; on a machine with network, `{command}` fills "
                           "the cache)") from None
    except OSError as e:  # any other answer of the Hub (HTTP errors are OSErrors)
        raise ElectraError(f"{what} {name}: {_first_line(e)}") from None


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]

"""Released models and tokenizers by their Hugging Face Hub id (ORG/NAME), through the Hub's
local cache: the one place every option that reads a model or tokenizer folder (`finetune
--model`, `pretrain --init-from`, `prepare --tokenizer`, `score --model`, ...) turns an id into
a folder.

`huggingface_hub` does the work (`snapshot_download`), so its settings hold as they do for
transformers: HF_HOME and HF_HUB_CACHE (where the cache is), HF_HUB_OFFLINE (never ask the Hub:
an id resolves only from the cache), HF_TOKEN (private and gated models). A local folder
always wins over an id of the same spelling. A snapshot folder records its id and commit in
its path (models--ORG--NAME/snapshots/COMMIT), which is how runs record where a model came from
(`snapshot_of`, `source_name`) without keeping anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from electra.errors import ElectraError, install_hint

# A folder in the Hub's cache (huggingface_hub's download layout) names its id; the snapshot
# folder itself also names the commit.
HUB_CACHE_PATH = re.compile(r"models--([\w.-]+)--([\w.-]+)/snapshots/")
HUB_SNAPSHOT = re.compile(r"models--([\w.-]+)--([\w.-]+)/snapshots/([^/]+)/?$")
# What electra reads of a model folder: config, weights, tokenizer files, remote code, card.
# A snapshot is fetched with only these, not a repository's TensorFlow or Flax weights.
MODEL_FILES = ("*.json", "*.txt", "*.model", "*.safetensors", "pytorch_model.bin", "*.py",
               "README.md")
DOWNLOAD = "hf download"  # huggingface_hub's command (`huggingface-cli download` before 1.0)


@dataclass(frozen=True)
class HubSnapshot:
    """Where a snapshot folder came from: its Hub id and the commit it holds."""

    repo_id: str
    commit: str


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
    return _snapshot(name_or_path, revision, what)


def is_hub_id(name: str) -> bool:
    """Whether `name` is spelled as a Hub model id (huggingface_hub's own rule)."""
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
    """The Hub id and commit of a snapshot folder in the Hub's cache; None for any other
    folder (a subfolder of a snapshot included)."""
    found = HUB_SNAPSHOT.search(Path(path).resolve().as_posix())
    return HubSnapshot(f"{found[1]}/{found[2]}", found[3]) if found else None


def source_name(path: str | Path) -> str:
    """How a run records the model or tokenizer it read: the Hub id for a snapshot of the
    cache, else the path."""
    snapshot = snapshot_of(path)
    return snapshot.repo_id if snapshot else str(path)


def source_record(path: str | Path, key: str) -> dict[str, str]:
    """{key: source_name(path)}, and for a snapshot {key}_revision: the commit it holds."""
    snapshot = snapshot_of(path)
    if snapshot is None:
        return {key: str(path)}
    return {key: snapshot.repo_id, f"{key}_revision": snapshot.commit}


def _snapshot(repo_id: str, revision: str | None, what: str) -> Path:
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
    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache,
                                      local_files_only=offline, allow_patterns=list(MODEL_FILES)))
    except RevisionNotFoundError:
        raise ElectraError(f"{what} {repo_id}: the Hub has no revision {revision} of it "
                           "(a branch, tag or commit)") from None
    except GatedRepoError:
        raise ElectraError(f"{what} {repo_id}: a gated model; accept its terms on the Hub and "
                           "log in (`hf auth login`, or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise ElectraError(f"{what} {repo_id}: no such folder, and no Hub model of that id (or "
                           "a private one: log in with `hf auth login`, or set HF_TOKEN)") from None
    except LocalEntryNotFoundError as e:
        if type(e).__name__ == "IncompleteSnapshotError":
            raise ElectraError(f"{what} {name}: its snapshot in the Hugging Face cache {cache} "
                               f"is incomplete; {_first_line(e)}") from None
        why = ("HF_HUB_OFFLINE is set" if offline else "the Hub cannot be reached")
        command = " ".join([DOWNLOAD, repo_id, *(["--revision", revision] if revision else [])])
        raise ElectraError(f"{what} {name}: no such folder, and not in the Hugging Face cache "
                           f"{cache} ({why}; on a machine with network, `{command}` fills "
                           "the cache)") from None
    except OSError as e:  # any other answer of the Hub (HTTP errors are OSErrors)
        raise ElectraError(f"{what} {name}: {_first_line(e)}") from None


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]

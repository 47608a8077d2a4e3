"""An embedding model as a sentence-transformers folder: `SentenceTransformer(OUT)` loads it
and gives the vectors `electra.embeddings.encode.Embedder` gives.

The layout is sentence-transformers' own (its `SentenceTransformer.save`): the transformers
model and its tokenizer at the top (the source folder's files as they are), `modules.json`
listing a Transformer, a Pooling (`1_Pooling/config.json`) and, for normalised vectors, a
Normalize module (`2_Normalize/`), and `sentence_bert_config.json` with the sequence length.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from electra.embeddings.encode import DEFAULT_MAX_SEQ_LEN, DEFAULT_POOLING, Pooling
from electra.errors import ElectraError
from electra.fileutil import staged_dir
from electra.finetuning.model_io import source_dir
from electra.hub import resolve_model_path
from electra.model.hf import read_config_json

# What sentence-transformers' Pooling config calls each of electra's pooling modes
POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                "last": "pooling_mode_lasttoken"}
SKIPPED = {"README.md", "finetune.json", "export.json", "init.json"}  # not the ST model's


def _modules(normalize: bool) -> list[dict]:
    names = [("", "Transformer"), ("1_Pooling", "Pooling")]
    if normalize:
        names.append(("2_Normalize", "Normalize"))
    return [{"idx": i, "name": str(i), "path": path,
             "type": f"sentence_transformers.models.{kind}"}
            for i, (path, kind) in enumerate(names)]


def write_st_folder(model: str | Path, out: str | Path, pooling: Pooling = DEFAULT_POOLING,
                    max_seq_len: int = DEFAULT_MAX_SEQ_LEN, revision: str | None = None,
                    overwrite: bool = False) -> Path:
    """OUT as a sentence-transformers folder of `model` (a folder electra can load, a
    pre-training run or checkpoint, or a Hub id at `revision`)."""
    source = source_dir(resolve_model_path(model, revision))
    config = read_config_json(source)
    hidden = config.get("hidden_size")
    if hidden is None:
        raise ElectraError(f"{source}/config.json: no hidden_size (not an encoder's folder)")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ElectraError(f"{out} is not empty; pass --overwrite to replace it")
    with staged_dir(out) as tmp:
        for path in sorted(source.iterdir()):
            if path.is_file() and path.name not in SKIPPED:
                shutil.copy2(path, tmp / path.name)
        (tmp / "modules.json").write_text(json.dumps(_modules(pooling.normalize), indent=2))
        positions = config.get("max_position_embeddings", max_seq_len)
        (tmp / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": min(max_seq_len, positions), "do_lower_case": False}, indent=2))
        (tmp / "1_Pooling").mkdir()
        (tmp / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": hidden,
             **{key: mode == pooling.mode for mode, key in POOLING_KEYS.items()},
             "include_prompt": True}, indent=2))
        if pooling.normalize:
            (tmp / "2_Normalize").mkdir()
        (tmp / "config_sentence_transformers.json").write_text(json.dumps(
            {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"},
            indent=2))
    return out

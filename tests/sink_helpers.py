"""Reading back what the tracking sinks wrote, offline: a W&B offline run's .wandb file (the
LevelDB log format of protobuf records W&B writes) and an MLflow file store."""

from __future__ import annotations

import json
import struct
from pathlib import Path

W_AND_B_HEADER = 7  # ":W&B", a 2-byte magic number, a version byte
BLOCK = 32 * 1024  # LevelDB log blocks
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file (LevelDB's log format: 32 KiB blocks of chunks, each a
    7-byte header of checksum, length and type; a record is a FULL chunk or FIRST, MIDDLE...,
    LAST)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    records, pos, parts = [], W_AND_B_HEADER, []
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        parts.append(chunk)
        if kind in (FULL, LAST):
            records.append(b"".join(parts))
            parts = []
    return records


def wandb_run(out: Path) -> dict:
    """The offline W&B run under OUT/wandb: its config, history rows and summary."""
    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert files, f"no offline W&B run under {out}/wandb"
    config, history, summary = {}, [], {}
    for raw in (r for f in files for r in wandb_records(f)):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json)
                           for item in record.config.update})
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.summary.update})
        elif kind == "run":
            config.update({item.key: json.loads(item.value_json)
                           for item in record.run.config.update})
    return {"config": config, "history": history, "summary": summary, "files": files}


def mlflow_runs(store: Path) -> list[dict]:
    """Every run in an MLflow file store: its name, parameters and metric histories
    {key: {step: value}}."""
    import os

    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    runs = []
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            metrics = {key: {m.step: m.value for m in client.get_metric_history(
                run.info.run_id, key)} for key in run.data.metrics}
            runs.append({"name": run.info.run_name, "params": run.data.params,
                         "metrics": metrics, "status": run.info.status})
    return runs

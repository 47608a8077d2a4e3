"""`electra finetune` on SST-2 in the Hub's layouts scores exactly as on the TSVs: the same
seed, the same examples, the same dev predictions and accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="needs the corpora extra (pyarrow)")

from conftest import SHARED_DATA  # noqa: E402
from hub_helpers import glue_columns, write_layout  # noqa: E402

from electra.cli import main  # noqa: E402
from electra.tasks import get_task  # noqa: E402
from electra.tasks.glue import SPECS  # noqa: E402

SST2 = SHARED_DATA / "glue" / "SST-2"


def _finetune(model: Path, data: Path, out: Path, *extra: str) -> dict:
    assert main(["finetune", "--model", str(model), "--task", "SST-2", "--data", str(data),
                 "--out", str(out), "--max-train-examples", "96", "--max-eval-examples", "64",
                 "--epochs", "1", "--batch-size", "16", "--seed", "3", "--quiet",
                 *extra]) == 0
    return json.loads((out / "results.json").read_text())


def _predictions(res: dict) -> list[dict]:
    path = Path(res["seeds"][0]["predictions"]["dev"])
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.skipif(not SST2.is_dir(), reason=f"SST-2 absent ({SST2})")
def test_sst2_from_parquet_and_save_to_disk_scores_as_from_tsv(tiny_model, tmp_path):
    tsv = tmp_path / "tsv" / "SST-2"
    tsv.mkdir(parents=True)
    for split, rows in (("train", 96), ("dev", 64)):
        lines = (SST2 / f"{split}.tsv").read_text().splitlines()[:rows + 1]
        (tsv / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    spec = SPECS["SST-2"]
    examples = {split: get_task("SST-2").read(tsv.parent, split) for split in ("train", "dev")}
    splits = {hub: glue_columns(spec, examples[split], test=False)
              for split, hub in (("train", "train"), ("dev", "validation"))}
    parquet = write_layout("config", tmp_path / "parquet", splits, config="sst2")
    # a save_to_disk folder whose features do not name the classes, numbered the other way
    # round from the Hub's (0 is positive): --label-names says so
    flipped = {name: ({**columns, "label": [1 - i for i in columns["label"]]}, None)
               for name, (columns, _) in splits.items()}
    saved = write_layout("saved", tmp_path / "saved", flipped)

    reference = _finetune(tiny_model, tsv.parent, tmp_path / "out_tsv")
    from_parquet = _finetune(tiny_model, parquet, tmp_path / "out_parquet")
    from_saved = _finetune(tiny_model, saved, tmp_path / "out_saved",
                           "--label-names", "positive,negative")
    accuracy = reference["seeds"][0]["scores"]["accuracy"]
    assert isinstance(reference["seeds"][0]["final_train_loss"], float)
    for res in (from_parquet, from_saved):
        assert res["seeds"][0]["scores"]["accuracy"] == accuracy
        assert res["seeds"][0]["final_train_loss"] == reference["seeds"][0]["final_train_loss"]
        assert _predictions(res) == _predictions(reference)
    assert len(_predictions(reference)) == 64
    model = tmp_path / "out_saved" / "model"
    state = json.loads((model / "finetune.json").read_text())["task"]
    assert state["label_names"] == ["positive", "negative"] and state["labels"] == ["0", "1"]
    # the model keeps the class names: evaluate reads the unnamed classes alike
    assert main(["evaluate", "--model", str(model), "--data", str(saved), "--out",
                 str(tmp_path / "eval"), "--max-eval-examples", "64"]) == 0
    scores = json.loads((tmp_path / "eval" / "results.json").read_text())["scores"]
    assert scores["accuracy"] == accuracy

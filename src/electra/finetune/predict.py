"""Test-set predictions: GLUE server TSVs ("index<TAB>prediction", file names as the GLUE
submission expects: CoLA.tsv, MNLI-m.tsv, MNLI-mm.tsv, ...), the official SQuAD JSON
(test_predictions.json, + test_na_probs.json for v2.0) or JSON lines for other tasks."""

from __future__ import annotations

from pathlib import Path

from electra.finetune.loop import (
    FinetuneSettings,
    load_for_inference,
    predict_examples,
    write_predictions,
)
from electra.tasks.glue import GlueTask


def predict(model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
            task_name: str | None = None, settings: FinetuneSettings | None = None,
            max_seq_len: int | None = None) -> list[str]:
    """Write test-set predictions of a fine-tuned model; returns the files written."""
    model, tokenizer, task, settings, device, out = load_for_inference(
        model_dir, out_dir, task_name, settings, max_seq_len)
    written = []
    if isinstance(task, GlueTask):
        jobs = [(task.read(data_dir, split), filename)
                for split, filename in zip(task.test_splits, task.spec.submission, strict=True)]
        diagnostic = Path(data_dir) / "diagnostic" / "diagnostic.tsv"
        if task.name == "MNLI" and diagnostic.is_file():
            # The GLUE server also wants AX.tsv: the diagnostic set scored by the MNLI model.
            jobs.append((task.read_test_file(diagnostic), "AX.tsv"))
        for examples, filename in jobs:
            preds = predict_examples(model, task, examples, tokenizer, settings, device)
            path = out / filename
            with open(path, "w", encoding="utf-8") as f:
                f.write("index\tprediction\n")
                for ex, pred in zip(examples, preds, strict=True):
                    f.write(f"{ex.uid}\t{task.format_prediction(pred)}\n")
            written.append(str(path))
        return written
    examples = task.read(data_dir, "test")
    preds = predict_examples(model, task, examples, tokenizer, settings, device)
    if task.head_kind == "span":
        return list(task.write_official(out, "test", examples, preds).values())
    path = out / "test_predictions.jsonl"
    write_predictions(path, task, examples, preds)
    return [str(path)]

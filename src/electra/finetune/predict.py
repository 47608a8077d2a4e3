"""Test-set predictions: each task writes its own files (GLUE: the server's TSVs, CoLA.tsv,
MNLI-m.tsv, ...; SQuAD: the official JSON; others: JSON lines). A multi-task model predicts
every task it knows, each into OUT/<task>/."""

from __future__ import annotations

from pathlib import Path

from electra.finetune.loop import FinetuneSettings, load_for_inference, predict_examples


def predict(model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
            task_name: str | None = None, settings: FinetuneSettings | None = None,
            max_seq_len: int | None = None) -> list[str]:
    """Write test-set predictions of a fine-tuned model; returns the files written."""
    views, tokenizer, settings, device, out, multi = load_for_inference(
        model_dir, out_dir, task_name, settings, max_seq_len)
    written = []
    for task, model in views:
        written += task.write_test(out / task.name if multi else out, data_dir,
                                   lambda examples, m=model, t=task: predict_examples(
                                       m, t, examples, tokenizer, settings, device))
    return written

"""Test-set predictions: each task writes its own files (GLUE: the server's TSVs, CoLA.tsv,
MNLI-m.tsv, ...; SQuAD: the official JSON; others: JSON lines)."""

from __future__ import annotations

from pathlib import Path

from electra.finetune.loop import FinetuneSettings, load_for_inference, predict_examples


def predict(model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
            task_name: str | None = None, settings: FinetuneSettings | None = None,
            max_seq_len: int | None = None) -> list[str]:
    """Write test-set predictions of a fine-tuned model; returns the files written."""
    model, tokenizer, task, settings, device, out = load_for_inference(
        model_dir, out_dir, task_name, settings, max_seq_len)
    return task.write_test(out, data_dir, lambda examples: predict_examples(
        model, task, examples, tokenizer, settings, device))

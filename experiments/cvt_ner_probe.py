"""What does a CVT model's teacher teach on named entities? (docs/experiments/cvt.md, NER)

For each trained CVT model directory given (OUT/model of `electra cvt` or of
`experiments.cvt`), on the task's dev set and on unlabeled sentences:

- dev: the primary module's span F1, and each auxiliary view's own span F1 (the same decoding
  on its logits), so a view that learns nothing shows;
- the primary module's soft targets (the teacher of L_CVT), on dev and on the unlabeled text:
  their mean entropy, the share of words whose most likely label is O, the share of words the
  teacher is at least 0.9 sure of, and, on dev, the share of words gold labels as entities;
  a teacher that says O almost everywhere on the unlabeled text teaches the auxiliary modules,
  and through them the shared encoder, to say O.

Prints one JSON object per model.

    python -m experiments.cvt_ner_probe runs/cvt_ner/runs/ner-1000-cvt-s0/model \\
        --data runs/cvt_ner/wikigold --unlabeled ~/.cache/electra/wiki_en.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from electra.cvt.batch import encode_words
from electra.cvt.model import load_model_dir
from electra.cvt.unlabeled import load_sentences
from experiments.common import run_main

SURE = 0.9  # a teacher "sure" of a word: its most likely label at least this probable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="+", type=Path, help="CVT model directories")
    p.add_argument("--data", type=Path, required=True, help="the task's data directory")
    p.add_argument("--task", default="ner")
    p.add_argument("--unlabeled", action="append", required=True, help="unlabeled corpus")
    p.add_argument("--sentences", type=int, default=2000,
                   help="unlabeled sentences probed (default %(default)s)")
    return p.parse_args(argv)


@torch.no_grad()
def outputs(model, vocab, sentences: list[list[str]], batch_size: int = 64):
    """Per sentence: the primary module's probabilities [words, labels] and each auxiliary
    view's argmax [words]."""
    model.eval()
    found = []
    for start in range(0, len(sentences), batch_size):
        words = sentences[start:start + batch_size]
        batch = encode_words(words, vocab, model.cfg.max_word_len)
        enc = model.encode(batch, keep=1.0)
        head = next(iter(model.heads.values()))
        probs = head(enc).softmax(-1)
        views = {name: logits.argmax(-1) for name, logits in head.auxiliary(enc).items()}
        for i, n in enumerate(batch["lengths"].tolist()):
            found.append((probs[i, :n], {v: a[i, :n] for v, a in views.items()}))
    return found


def teacher_stats(found, outside: int) -> dict[str, float]:
    probs = torch.cat([p for p, _ in found])
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
    top, label = probs.max(-1)
    return {"words": len(probs), "entropy": round(entropy.mean().item(), 4),
            "argmax_o": round((label == outside).float().mean().item(), 4),
            "sure": round((top >= SURE).float().mean().item(), 4)}


def probe(model_dir: Path, args: argparse.Namespace, unlabeled: list[list[str]]) -> dict:
    model, vocab, tasks = load_model_dir(model_dir)
    task = next(t for t in tasks if t.name == args.task)
    dev = task.read_file(task.find(args.data, "dev"))
    outside = task.labels.index("O")
    found = outputs(model, vocab, [s.words for s in dev])
    lengths = [len(s.words) for s in dev]
    scores = {"primary": task.score(dev, task.to_strings(
        torch.nn.utils.rnn.pad_sequence([p.argmax(-1) for p, _ in found], batch_first=True),
        lengths))["f1"]}
    for view in found[0][1]:
        decoded = torch.nn.utils.rnn.pad_sequence([v[view] for _, v in found], batch_first=True)
        scores[view] = task.score(dev, task.to_strings(decoded, lengths))["f1"]
    gold_entities = sum(t != "O" for s in dev for t in task.train_tags(s)) / sum(lengths)
    return {"model": str(model_dir), "dev_f1": {k: round(v, 4) for k, v in scores.items()},
            "teacher_dev": {**teacher_stats(found, outside),
                            "gold_entity_words": round(gold_entities, 4)},
            "teacher_unlabeled": teacher_stats(outputs(model, vocab, unlabeled), outside)}


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    unlabeled = load_sentences(args.unlabeled, args.sentences)
    results = [probe(m, args, unlabeled) for m in args.models]
    for result in results:
        print(json.dumps(result))
    return results


if __name__ == "__main__":
    run_main(main)

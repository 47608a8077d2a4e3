"""Train, dev and test files from one CoNLL column file whose documents are separated by
-DOCSTART- lines, split by document (never a document's sentences on two sides), as a named
record so that every run reads the same split.

WikiGold (Balasuriya et al. 2009; `../shared/data/wikigold`) is released as one file of 145
Wikipedia articles with no official split. `WIKIGOLD` holds its split: documents numbered in
file order from 0, document i goes to dev when i % 5 == 3, to test when i % 5 == 4, and to
train otherwise: 87 / 29 / 29 articles, 1,023 / 376 / 297 sentences (train holds the 1,000
labeled sentences CVT's studies take, dev and test enough entities to score on). Lines are
copied as they are (the tags stay IOB1), so the `ner` task reads the folder as it reads
CoNLL-2003:

    python -m electra.tasks.document_split wikigold ../shared/data/wikigold \
        --out data/wikigold
    electra finetune --task ner --data data/wikigold --model MODEL --out OUT
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from electra.conll import DOCSTART
from electra.data.corpus import iter_lines
from electra.errors import ElectraError
from electra.fileutil import write_atomic

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class DocumentSplit:
    """A dataset released as one file, split by document: document i (file order, from 0) goes
    to dev when i % `every` == `dev`, to test when it equals `test`, else to train."""

    file: str  # the released file's name in its folder
    every: int = 5
    dev: int = 3
    test: int = 4
    documents: int | None = None  # how many the released file holds (a check)

    def split_of(self, index: int) -> str:
        residue = index % self.every
        return "dev" if residue == self.dev else "test" if residue == self.test else "train"


WIKIGOLD = DocumentSplit("wikigold.conll.txt", documents=145)
DOCUMENT_SPLITS: dict[str, DocumentSplit] = {"wikigold": WIKIGOLD}


def read_documents(path: Path) -> list[list[str]]:
    """The file's documents, each its lines (sentences separated by blank lines, no
    -DOCSTART- line); text before the first -DOCSTART- is a document too, empty ones are
    dropped."""
    documents: list[list[str]] = [[]]
    for _, line in iter_lines(path):
        if line.split(maxsplit=1)[:1] == [DOCSTART]:
            documents.append([])
        else:
            documents[-1].append(line.rstrip("\n"))
    return [doc for doc in documents if any(line.strip() for line in doc)]


def _document_text(lines: list[str]) -> str:
    """A document as CoNLL-2003 writes one: its -DOCSTART- line, a blank line, its sentences."""
    body = "\n".join(lines).strip("\n")
    return f"{DOCSTART} O\n\n{body}\n\n"


def split_documents(name: str, source: str | Path, out: str | Path) -> dict:
    """Write OUT/train.txt, dev.txt and test.txt from the released file of split `name`
    (`source`: the file or its folder) and OUT/split.json, what went where; returns that."""
    if name not in DOCUMENT_SPLITS:
        raise ElectraError(f"unknown document split {name!r}; choose one of "
                           f"{', '.join(DOCUMENT_SPLITS)}")
    spec = DOCUMENT_SPLITS[name]
    source = Path(source)
    path = source / spec.file if source.is_dir() else source
    if not path.is_file():
        raise ElectraError(f"{path}: file not found (the {name} release's {spec.file})")
    documents = read_documents(path)
    if spec.documents is not None and len(documents) != spec.documents:
        raise ElectraError(f"{path}: {len(documents)} documents, expected {spec.documents} "
                           f"(the {name} release)")
    parts: dict[str, list[int]] = {split: [] for split in SPLITS}
    for i in range(len(documents)):
        parts[spec.split_of(i)].append(i)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"split": name, "source": str(path),
              "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "documents": {}}
    for split, indices in parts.items():
        write_atomic(out / f"{split}.txt",
                     "".join(_document_text(documents[i]) for i in indices))
        record["documents"][split] = indices
    write_atomic(out / "split.json", json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=sorted(DOCUMENT_SPLITS), help="which release's split")
    p.add_argument("source", type=Path, help="the released file, or the folder holding it")
    p.add_argument("--out", type=Path, required=True, help="folder for train/dev/test.txt")
    args = p.parse_args(argv)
    try:
        record = split_documents(args.name, args.source, args.out)
    except ElectraError as e:
        sys.exit(f"error: {e}")
    counts = {split: len(docs) for split, docs in record["documents"].items()}
    print(f"{args.out}: documents {counts}")


if __name__ == "__main__":
    main()

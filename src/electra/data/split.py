"""Which documents `electra prepare` holds out. Plain Python (no numpy, no tokenizers), so that
the command line reads its defaults without loading the data code.

By default 1% of the documents, at most 2,000 of them (the probes read 256 examples; more
only costs training text), at least one when the corpus has MIN_HELDOUT_CORPUS documents or
more and none in a smaller one. The choice is deterministic and evenly spread: document i is
held out when the running count min(cap, floor(i * fraction + phase)) steps up, with a phase
drawn from the seed. This is "every k-th document" generalised to any fraction, exact to within
one document at any corpus size, and decided as the corpus streams by. It is the choice
earlier versions made (they had no cap and no minimum); the one case it misses, a corpus of at
least MIN_HELDOUT_CORPUS documents that ends before the count first steps up, is found by
counting the documents up to that point in a first, cheap pass (at most 1 / fraction
documents, only read), and then one document is held out, drawn from the seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TypeVar

DEFAULT_HELDOUT_FRACTION = 0.01
MAX_HELDOUT_DOCUMENTS = 2000
MIN_HELDOUT_CORPUS = 20

T = TypeVar("T")


def heldout_selector(seed: int, fraction: float,
                     max_heldout: int = MAX_HELDOUT_DOCUMENTS) -> Callable[[int], bool]:
    """Whether document `index` is held out by the running count (see the module docstring)."""
    phase = random.Random(seed).random()

    def count(n: int) -> int:
        return min(max_heldout, math.floor(n * fraction + phase))

    def is_heldout(index: int) -> bool:
        return fraction > 0 and count(index + 1) > count(index)

    return is_heldout


def first_heldout(seed: int, fraction: float) -> int:
    """The index of the first document the running count holds out (fraction > 0)."""
    phase = random.Random(seed).random()
    index = max(0, math.ceil((1.0 - phase) / fraction) - 1)
    while math.floor((index + 1) * fraction + phase) < 1:  # guard against rounding
        index += 1
    while index > 0 and math.floor(index * fraction + phase) >= 1:
        index -= 1
    return index


def split_documents(open_docs: Callable[[], Iterable[T]], seed: int, fraction: float,
                    max_heldout: int = MAX_HELDOUT_DOCUMENTS) -> Iterator[tuple[T, bool]]:
    """Each document of `open_docs()` (called twice when fraction > 0: a first pass counts at
    most max(MIN_HELDOUT_CORPUS, first_heldout + 1) documents) and whether it is held out."""
    is_heldout = heldout_selector(seed, fraction, max_heldout)
    if fraction > 0:
        first = first_heldout(seed, fraction)
        seen = sum(1 for _ in islice(open_docs(), max(MIN_HELDOUT_CORPUS, first + 1)))
        if seen < MIN_HELDOUT_CORPUS:  # a small corpus keeps everything for training
            is_heldout = heldout_selector(seed, 0.0)
        elif seen <= first:  # the whole corpus, and the running count never steps up
            extra = min(seen - 1, int(random.Random(seed).random() * seen))

            def is_heldout(index: int) -> bool:
                return index == extra
    for index, doc in enumerate(open_docs()):
        yield doc, is_heldout(index)

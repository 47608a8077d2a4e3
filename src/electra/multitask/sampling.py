"""Which examples a multi-task epoch holds (dissertation section 3.3): rather than shuffling the
concatenated training sets, each example slot draws its task with probability proportional to
|D_task|^0.75 (Bowman et al., 2018), so large data sets do not dominate; the example is the next
one of that task's own shuffled stream (reshuffled when used up). Without sampling, one epoch
is every example once, shuffled together. Either way tasks are mixed within minibatches."""

from __future__ import annotations

import torch

DEFAULT_EXPONENT = 0.75


def task_probabilities(sizes: list[int], exponent: float = DEFAULT_EXPONENT) -> list[float]:
    """p_task = |D_task|^exponent / sum over tasks."""
    weights = [float(n) ** exponent for n in sizes]
    total = sum(weights)
    return [w / total for w in weights]


class MixtureSampler:
    """Epochs of global example indices (task t's examples are offsets[t] .. offsets[t] +
    sizes[t] - 1); an epoch has sum(sizes) slots. Deterministic for a generator state."""

    def __init__(self, sizes: list[int], exponent: float | None = DEFAULT_EXPONENT):
        self.sizes = list(sizes)
        self.exponent = exponent
        self.offsets = [sum(self.sizes[:t]) for t in range(len(self.sizes))]
        self._streams: list[list[int]] = [[] for _ in self.sizes]

    def _next(self, task: int, generator: torch.Generator) -> int:
        if not self._streams[task]:
            perm = torch.randperm(self.sizes[task], generator=generator).tolist()
            self._streams[task] = perm[::-1]  # pop() from the end walks the permutation
        return self.offsets[task] + self._streams[task].pop()

    def epoch(self, generator: torch.Generator) -> list[int]:
        total = sum(self.sizes)
        if self.exponent is None:
            return torch.randperm(total, generator=generator).tolist()
        probs = torch.tensor(task_probabilities(self.sizes, self.exponent), dtype=torch.float64)
        tasks = torch.multinomial(probs, total, replacement=True, generator=generator).tolist()
        return [self._next(t, generator) for t in tasks]

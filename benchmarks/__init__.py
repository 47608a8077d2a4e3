"""Timing scripts that print JSON (docs/speed.md). Run from the repository root as modules,
e.g. `python -m benchmarks.pretrain_throughput --quick`."""

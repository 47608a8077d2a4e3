"""Research drivers: resumable studies whose tables and plots are in docs/experiments/.

Run from the repository root as modules, e.g. `python -m experiments.ladder_on_mix --table`."""

# Set-up is automatic: every target creates .venv and installs the package if needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch that lies on these machines' disk; a bare `torch` may pull CUDA.
TORCH ?= torch==2.13.0
# Test processes: each uses one thread (tests/conftest.py), so 2 fill a 2-core machine.
JOBS ?= 2

.PHONY: demo test test-fast lint bench clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/electra demo $(ARGS)

test: $(BIN)/.installed
	$(BIN)/ruff check src tests benchmarks experiments tools
	$(BIN)/pytest -q -n $(JOBS)

test-fast: $(BIN)/.installed
	$(BIN)/pytest -q -n $(JOBS) -m "not slow"

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks.pretrain_throughput

clean:
	rm -rf $(VENV) runs .pytest_cache

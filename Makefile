# `make train` / `make test` / `make bench`: each sets up .venv first if it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: the CPU build lies on local disk; a bare `torch` requirement
# resolved from scratch would pull a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: setup train test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q $(TORCH)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	touch $@

train: setup
	$(BIN)/rlcollect train $(ARGS)

test: setup
	$(BIN)/python -m pytest -q $(ARGS)

bench: setup
	$(BIN)/python scripts/bench_collectors.py $(ARGS)

clean:
	rm -rf $(VENV) outputs multirun

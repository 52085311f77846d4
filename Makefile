# `make train` / `make test` / `make reproduce` / `make bench`: each sets up .venv first if it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: the CPU build lies on local disk; a bare `torch` requirement
# resolved from scratch would pull a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: setup train test reproduce bench bench-venv clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q $(TORCH)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev,ray,envs,envpool,vmas,sweep,slurm,tune,export]'
	touch $@

train: setup
	$(BIN)/rlcollect train $(ARGS)

# the test files spread over the cores (4 workers at most), each file's tests in one worker (its
# module fixtures, a Ray head among them, start once); PARALLEL= runs them all in one process
PARALLEL ?= -n auto --maxprocesses=4 --dist loadfile
test: setup
	$(BIN)/ruff check rlcollect tests scripts hydra_plugins
	$(BIN)/python -m pytest -q --durations=25 $(PARALLEL) $(ARGS)

# the figures README.md and docs/ state, measured again beside their stated values (scripts/reproduce.py);
# the quick tier by default, about 2 minutes: make reproduce ARGS="--tier medium" / ARGS="--list"
reproduce: setup
	$(BIN)/python scripts/reproduce.py $(ARGS)

# torchrl 0.14.1 pins tensordict<0.15 (rlcollect needs 0.15), so the torchrl rows of the
# benchmark run in their own venv; torch is pinned there too (same CUDA-build reason).
BENCH_VENV := .venv-bench
BENCH_BIN := $(BENCH_VENV)/bin
TORCHRL := torchrl==0.14.1

bench-venv: $(BENCH_VENV)/.installed

$(BENCH_VENV)/.installed:
	test -x $(BENCH_BIN)/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_BIN)/pip install --disable-pip-version-check -q $(TORCH)
	$(BENCH_BIN)/pip install --disable-pip-version-check -q $(TORCH) $(TORCHRL) gymnasium
	touch $@

# rlcollect vs a hand-written gymnasium loop vs torchrl; flags: make bench ARGS="--quick"
bench: setup bench-venv
	$(BIN)/python scripts/bench_collectors.py $(ARGS)

clean:
	rm -rf $(VENV) outputs multirun

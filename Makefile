# Hadar developer tasks. `make setup` is idempotent; `make test` sets up when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TORCH_VERSION := 2.13.0
# Test files run on two processes (pytest-xdist), each file's tests on one of them so that a
# file's shared cluster stays shared: the e2e tests spend much of their time waiting on real
# processes (heartbeat timeouts, leases, paced fake GPUs), which the other process overlaps,
# and the CPU-bound unit tests use both cores. `make test PARALLEL=` runs everything in
# one process.
PARALLEL ?= -n 2 --dist loadfile

.PHONY: setup test lint typecheck unit protos demo clean bench gpu-check gpu-kit browser shells

# $(call system_tools,COMMANDS,DEBIAN PACKAGES,WHO NEEDS THEM): as root with apt-get, install
# the packages when a command is missing; otherwise say which command installs them.
define system_tools
	@missing=; for c in $(1); do command -v $$c >/dev/null || missing=1; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $(2) for $(3)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; \
	else \
		echo "$(3) need $(1): run 'sudo apt-get install $(2)' (Debian/Ubuntu) and try again" >&2; \
		exit 1; \
	fi
endef

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: this exact version installs a CPU build from local wheels
	$(BIN)/python -m pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest tests/unit

# The dashboard's browser tests drive Debian's chromium through chromedriver (selenium).
browser:
	$(call system_tools,chromium chromedriver,chromium chromium-driver,the dashboard's browser tests)

# The completion tests run hctl's scripts in zsh and fish themselves (bash is there already).
shells:
	$(call system_tools,zsh fish,zsh fish,the shell completion tests)

test: setup browser shells
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest $(PARALLEL)

protos: setup
	$(BIN)/python -m protos.generate

# A real local cluster (master + fake-GPU workers, SQLite) running a mix of built-in workloads.
demo: setup
	$(BIN)/hctl local demo --state-dir .hadar-local/demo

# Every benchmark, one after the other (several minutes); figures go to docs/benchmarks.md.
bench: setup
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The GPU path on this machine's NVIDIA GPU (discovery, resume, sharing, profiling, a local
# cluster); PASS/FAIL per step. Without a GPU it says so in one line and exits 0.
gpu-check: setup
	@$(BIN)/python bench/gpu_check.py

# The GPU check's wheels for a machine with no package registry (bench/gpu_kit.py says how)
gpu-kit: setup
	$(BIN)/python bench/gpu_kit.py download

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache

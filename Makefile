# cube-jupyter: `make lab` to use it, `make test` to check it. Everything is installed from here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
# Jupyter refuses to run as root unless told; a container image running as jovyan needs no flag.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
LAB_PORT ?= 8888
FRONTEND_SOURCES := $(shell find labextension -type f 2>/dev/null) package.json tsconfig.json

.PHONY: setup setup-test lab test lint typecheck jstest pytest bench gpu-check system-test-deps frontend clean \
	cluster cluster-down cluster-binaries

setup: $(VENV)/.installed

setup-test: $(VENV)/.installed-test system-test-deps

# Installs run without build isolation, so what builds an sdist dependency comes first: a setuptools
# with bdist_wheel built in (kfp-server-api ships only an sdist; the venv's own setuptools can't).
$(VENV)/.python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip "setuptools>=75"
	$(BIN)/pip install -q "jupyterlab>=4.6,<4.7" "hatchling>=1.21" "hatch-jupyter-builder>=0.9" editables
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# The labextension is built here; `pip install -e` then copies it into the venv as shared data
# (its own build hook is switched off: it would build the same thing again).
cube_jupyter/labextension/package.json: $(VENV)/.python node_modules/.installed $(FRONTEND_SOURCES)
	npm run build

frontend: cube_jupyter/labextension/package.json

# With the `examples` extra: what examples/ imports (pandas, scikit-learn, the CPU build of torch);
# with `kfp`: KFP's compiler, for `--target kfp`.
$(VENV)/.installed: $(VENV)/.python cube_jupyter/labextension/package.json pyproject.toml
	rm -rf $(VENV)/share/jupyter/labextensions/cube-jupyter
	HATCH_BUILD_NO_HOOKS=true $(BIN)/pip install -q --no-build-isolation -e ".[examples,kfp]"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	HATCH_BUILD_NO_HOOKS=true $(BIN)/pip install -q --no-build-isolation -e ".[test]"
	touch $@

# Debian packages the tests drive for real, as package:command pairs: Chromium for the browser
# tests, Prometheus for the DCGM metrics path, Open MPI's mpirun for MPI jobs.
SYSTEM_TEST_PACKAGES := chromium:chromium prometheus:prometheus openmpi-bin:mpirun
system-test-deps:
	@missing=""; for pair in $(SYSTEM_TEST_PACKAGES); do \
	  command -v $${pair#*:} >/dev/null || missing="$$missing $${pair%%:*}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for the tests:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Lab runs in examples/ and serves it: its file browser, terminals and kernels start there, and the
# paths in the examples' specs (jobs/train_ddp.py) mean the same in the panels as in a shell there.
lab: setup
	cd examples && $(BIN)/jupyter lab $(ALLOW_ROOT) --no-browser --ServerApp.port=$(LAB_PORT)

# ruff (style, and complexity: C901 over 15), the import contract ([tool.importlinter] in
# pyproject.toml: layers, features independent, no cycles), then eslint and prettier.
lint: setup-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	npm run lint:check

typecheck: setup-test
	$(BIN)/mypy

# Unit tests of the labextension's pure TypeScript (DAG layout, tag editing, error placement,
# formatting), type-checked, then run by vitest.
jstest: setup-test
	npm run test:unit

pytest: setup-test
	$(BIN)/python -m pytest tests --ignore=tests/benchmarks -q --durations=15 -n 2

# The control plane's Go build (minutes when cold) runs beside the static checks, which use about
# one core; then the suite.
test: setup-test
	$(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck jstest cluster-binaries
	$(MAKE) --no-print-directory pytest

# On a machine with NVIDIA GPUs: the GPU features checked there, a table of pass/fail with figures
# (README "On a GPU machine"); without a GPU it says so and exits 2.
gpu-check: setup
	$(BIN)/python -m tests.gpu.gpu_check

bench: setup-test
	$(BIN)/python -m tests.benchmarks

# A Kubernetes control plane on loopback (etcd, kube-apiserver, controller-manager, scheduler, kwok
# fake nodes, one with 2 GPUs), built from the Go module proxy once (.cluster/bin/, keyed by the
# versions in tools/*/go.sum); the cluster tests start their own in a temporary folder.
cluster-binaries:
	tools/build.sh .cluster/bin >/dev/null

cluster: setup-test
	$(BIN)/python -m tests.cluster.controlplane up

cluster-down: setup-test
	$(BIN)/python -m tests.cluster.controlplane down

clean:
	rm -rf $(VENV) node_modules lib cube_jupyter/labextension

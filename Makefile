# moectl: `make run` brings the whole system up on this machine; `make test` runs every test.
# Both set themselves up from nothing: a .venv with the project and its extras.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,runtime,kernels
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
PYTEST_ARGS ?=

.PHONY: run test lint sysdeps kube engines clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python >= 3.11 or run 'make PYTHON=python3 ...'"; exit 1; }
	@echo "==> creating $(VENV) and installing moectl[$(EXTRAS)] (first run takes a few minutes)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar off -q --upgrade pip
	$(BIN)/python -m pip install --progress-bar off -e '.[$(EXTRAS)]'
	touch $@

$(VENV): $(STAMP)

run: $(STAMP)
	$(BIN)/moectl up

# Debian packages for the real-server tests; installed only where we are root with apt.
sysdeps:
	@bash .ci/sysdeps

# The Kubernetes test cluster (etcd, kube-apiserver, kube-controller-manager, helm) built with Go from the
# module proxy, once per machine, into ~/.cache/moectl/kube (MOECTL_KUBE_CACHE); cached builds are skipped.
kube: $(STAMP)
	$(BIN)/python tests/support/kube/build.py

# The engines' own code for tests/adapters: SGLang's and vLLM's released wheels (pip download --no-deps) and a venv
# where SGLang's expert-location and recorder modules run on our torch, into ~/.cache/moectl/engines
# (MOECTL_ENGINE_CACHE); cached builds are skipped.
engines: $(STAMP)
	$(BIN)/python tests/support/engines/build.py

lint: $(STAMP)
	$(BIN)/ruff check controlplane agents tests migrations benchmarks helm
	$(BIN)/lint-imports

test: $(STAMP) sysdeps lint kube engines
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

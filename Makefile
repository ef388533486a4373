# moectl: `make run` brings the whole system up on this machine; `make test` runs every test.
# Both set themselves up from nothing: a .venv with the project and its extras.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,runtime,kernels
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
PYTEST_ARGS ?=
# pytest workers (pytest-xdist): much of the suite waits on real servers and processes; more than two workers
# run three multi-process tests at once on two cores, which then miss their timings. `loadgroup` hands each
# worker one test at a time, in the order collected (tests/conftest.py puts the long ones first)
PYTEST_WORKERS ?= 2

.PHONY: run test lint sysdeps kube engines chart-files clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python >= 3.11 or run 'make PYTHON=python3 ...'"; exit 1; }
	@.ci/timed "python: .venv with moectl[$(EXTRAS)] (the first run downloads ~3 GB of torch)" \
	  sh -c 'test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --progress-bar off -e ".[$(EXTRAS)]"'
	@touch $@

$(VENV): $(STAMP)

run: $(STAMP)
	$(BIN)/moectl up

# Debian packages for the real-server tests; installed only where we are root with apt.
sysdeps:
	@.ci/timed "debian packages" bash .ci/sysdeps

# The Kubernetes test cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, helm, kwok and the
# LeaderWorkerSet controller) built with Go from the module proxy, once per machine, into ~/.cache/moectl/kube
# (MOECTL_KUBE_CACHE); cached builds are skipped.
# Standard library only, so it needs no .venv: `make test` runs it beside the venv's download.
kube:
	@.ci/timed "kube: test cluster binaries" $(PYTHON) tests/support/kube/build.py

# The engines' own code for tests/adapters: SGLang's and vLLM's released wheels (pip download --no-deps) and a venv
# where SGLang's expert-location and recorder modules run on our torch, into ~/.cache/moectl/engines
# (MOECTL_ENGINE_CACHE); cached builds are skipped.
engines: $(STAMP)
	@.ci/timed "engines: SGLang and vLLM wheels, the vLLM CPU venv and tiny model" $(BIN)/python tests/support/engines/build.py

lint: $(STAMP)
	@.ci/timed lint sh -c '$(BIN)/ruff check controlplane agents tests migrations benchmarks helm && $(BIN)/lint-imports'

# the chart carries copies of dashboards/' rules and Grafana dashboards (helm warns on symbolic links)
chart-files:
	rm -rf helm/moectl/files/prometheus helm/moectl/files/grafana
	mkdir -p helm/moectl/files/prometheus helm/moectl/files/grafana
	cp dashboards/prometheus/moectl-rules.yml helm/moectl/files/prometheus/
	cp dashboards/grafana/*.json helm/moectl/files/grafana/

# the set-up phases wait on different things (apt and pip on the network, Go on the cores): run side by side, each
# line whole; lint and engines wait for the .venv
test:
	@$(MAKE) --no-print-directory -j5 --output-sync=line $(STAMP) sysdeps kube lint engines
	@.ci/timed pytest env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
	  $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

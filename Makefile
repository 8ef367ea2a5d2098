# minibroker developer targets. `make help` lists them.
#
#   make venv      create .venv and install the package with its test extra
#   make sysdeps   install kcat and a Java runtime from Debian if missing
#   make lint      ruff and mypy, with the settings in pyproject.toml
#   make test      lint, then run the test suite (PYTEST_ARGS="-k foo -x" passes arguments through)
#   make run       run a broker in the foreground on 127.0.0.1:9092, data in ./data
#   make bench     side-by-side throughput benchmark against the peer (scripts/bench.sh; RECORDS=...)
#   make bench-cluster  three nodes: controller and leader failover, propagation (BENCH_CLUSTER_ARGS=...)
#   make bench-replication  three nodes: acks=all throughput, latency, catch-up, CPU (BENCH_REPLICATION_ARGS=...)
#   make soak      run the tests marked `soak`
#   make clean     remove caches and benchmark output (keeps .venv, .peer-venv and ./data)
#   make distclean clean, plus .venv, .peer-venv and ./data

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON3 ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed

LISTEN      ?= 127.0.0.1:9092
DATA_DIR    ?= ./data
BROKER_ID   ?= 0
PYTEST_ARGS ?=

.PHONY: help venv sysdeps run lint test bench bench-cluster bench-replication soak clean distclean

help:
	@sed -n 's/^#   make /  make /p' $(firstword $(MAKEFILE_LIST))

$(PY):
	$(PYTHON3) -m venv $(VENV)

# Re-install whenever pyproject.toml is newer than the stamp.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[test]'
	touch $@

venv: $(STAMP)

# kcat for the interop tests, a Java runtime for the Spark analysis: apt-get when missing.
sysdeps:
	@missing=; \
	command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1 || missing="$$missing kcat"; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	if [ -z "$$missing" ]; then \
		echo "sysdeps: kcat and java present"; \
	else \
		echo "sysdeps: installing$$missing with apt-get"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

run: venv
	$(VENV)/bin/minibroker serve --broker-id $(BROKER_ID) --listen $(LISTEN) --data-dir $(DATA_DIR)

# Both tools are pinned in the test extra, so a fresh checkout lints the same way.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: venv lint sysdeps
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: venv
	scripts/bench.sh

# bench/cluster.py: kill -9 / SIGTERM timings of a three-node cluster (docs/BENCHMARKS.md)
BENCH_CLUSTER_ARGS ?=
bench-cluster: venv
	$(VENV)/bin/minibroker bench cluster $(BENCH_CLUSTER_ARGS)

# bench/replication.py: issue 11's replicated throughput, latency, catch-up and broker CPU,
# beside a single broker and the peer (docs/BENCHMARKS.md)
BENCH_REPLICATION_ARGS ?=
bench-replication: venv
	$(VENV)/bin/minibroker bench replication $(BENCH_REPLICATION_ARGS)

# pytest exits 5 when the marker selects no test: say so and succeed.
soak: venv
	@rc=0; $(PY) -m pytest -q -m soak $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then \
		echo "soak: no tests are marked 'soak' (pytest -m soak selected none); nothing to run"; \
		exit 0; \
	fi; \
	exit $$rc

clean:
	rm -rf bench-out .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
	find . -path ./$(VENV) -prune -o -path ./.peer-venv -prune -o -path ./.git -prune -o \
		-type d -name __pycache__ -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) .peer-venv $(DATA_DIR) *.egg-info

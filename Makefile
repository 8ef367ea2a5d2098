# minibroker developer targets. `make help` lists them.
#
#   make venv      create .venv and install the package with its test extra (make test, make lint)
#   make sysdeps   install kcat, a Java runtime, openssl (and mmdebstrap with docker) from Debian if missing
#   make lint      ruff and mypy, with the settings in pyproject.toml
#   make test      lint, then run the test suite (PYTEST_ARGS="-k foo -x" passes arguments through)
#   make run       install only what the broker needs, then run one in the foreground on 127.0.0.1:9092, data in ./data
#   make certs     a test CA, broker and client certificates (PEM) in ./certs (CERTS_DIR=...)
#   make bench     side-by-side throughput benchmark against the peer (scripts/bench.sh; RECORDS=...)
#   make bench-cluster  three nodes: controller and leader failover, propagation (BENCH_CLUSTER_ARGS=...)
#   make bench-replication  three nodes: acks=all throughput, latency, catch-up, CPU (BENCH_REPLICATION_ARGS=...)
#   make bench-authorizer  ns per ACL check, indexed against a scan (10 to 10,000 ACLs)
#   make bench-security  produce/consume over SSL and SASL_SSL against PLAINTEXT, and with 10,000 ACLs
#   make bench-scale  3,000 partitions: idle cost, latency beside them, creating them, a restart (BENCH_SCALE_ARGS=--quick)
#   make bench-transactions  transactional produce, commit latency, read_committed (BENCH_TRANSACTIONS_ARGS=...)
#   make bench-share-groups  share consumers on one partition: 1, 2, 4 slow members; fast beside classic
#   make bench-reassignment  300 partitions (1 GB) moved onto a new broker under a 20 MB/s throttle
#   make bench-quotas  a quota-throttled producer and consumer against their quota (BENCH_QUOTAS_ARGS=...)
#   make coverage  the test suite under coverage.py: branch coverage of broker/, client/, protocol/
#   make soak      run the tests marked `soak`
#   make chaos     20 seeded 60 s fault runs on three local processes, checked (CHAOS_SEEDS=, CHAOS_ARGS=)
#   make sim       the whole-cluster simulation over many seeds, summary in sim-out/ (SIM_SEEDS=, SIM_JOBS=, SIM_ARGS=)
#   make chaos-docker  the same against the compose cluster, network partitions included
#   make image     the Docker image minibroker:latest (and its base, once) without a registry
#   make cluster   three brokers in Docker (docker-compose.yml), waiting until all are healthy
#   make cluster-down  remove the cluster's containers and network (VOLUMES=1: its data too)
#   make compose-v2  fetch Compose v2 from Debian into docker/build/docker-config (DOCKER_CONFIG=...)
#   make cluster-data  copy the three brokers' data out of the cluster into ./cluster-data
#   make cluster-analyze  cluster-data, then one `minibroker analyze` report in ./cluster-analysis
#   make bench-compose  produce/consume against the compose cluster beside local processes
#   make clean     remove caches and benchmark output (keeps .venv, .peer-venv and ./data)
#   make distclean clean, plus .venv, .peer-venv and ./data

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON3 ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# the package alone: what `make run` needs; the test extra (STAMP) brings it too
RUN_STAMP := $(VENV)/.installed-run

LISTEN      ?= 127.0.0.1:9092
DATA_DIR    ?= ./data
BROKER_ID   ?= 0
PYTEST_ARGS ?=

.PHONY: help venv sysdeps run certs lint test prepare-test test-image coverage bench bench-cluster bench-replication bench-authorizer bench-security bench-scale bench-transactions bench-share-groups bench-reassignment bench-quotas soak clean chaos sim \
	chaos-docker \
	distclean image cluster cluster-down compose-v2 cluster-data cluster-analyze \
	bench-compose

help:
	@sed -n 's/^#   make /  make /p' $(firstword $(MAKEFILE_LIST))

$(PY):
	$(PYTHON3) -m venv $(VENV)

# Re-install whenever pyproject.toml is newer than the stamp. The test extra (the clients,
# Spark, the linters) takes a minute even from a warm cache, so `make run` installs only the
# package's own dependencies; installing the extra marks that done too.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[test]'
	touch $@ $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -e .
	touch $@

venv: $(STAMP)

# kcat for the interop tests, a Java runtime for the Spark analysis, openssl for the test
# certificates (scripts/make_certs.sh), mmdebstrap for the
# Docker base image (only where docker is): apt-get when missing.
sysdeps:
	@missing=; \
	command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1 || missing="$$missing kcat"; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	if command -v docker >/dev/null 2>&1; then \
		command -v mmdebstrap >/dev/null 2>&1 || missing="$$missing mmdebstrap"; \
	fi; \
	if [ -z "$$missing" ]; then \
		echo "sysdeps: kcat, java, openssl (and mmdebstrap where docker is) present"; \
	else \
		echo "sysdeps: installing$$missing with apt-get"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

run: $(RUN_STAMP)
	@echo "minibroker's tools are in $(VENV)/bin: in another terminal, \`. $(VENV)/bin/activate\` puts them on PATH (or call $(VENV)/bin/minibroker ...)"
	@echo "e.g. minibroker topics list --bootstrap-server $(LISTEN); Ctrl-C stops the broker"
	$(VENV)/bin/minibroker serve --broker-id $(BROKER_ID) --listen $(LISTEN) --data-dir $(DATA_DIR)

CERTS_DIR ?= ./certs
certs:
	scripts/make_certs.sh $(CERTS_DIR)

# Both tools are pinned in the test extra, so a fresh checkout lints the same way.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Four pytest-xdist workers on two cores: the suite waits on brokers, clients, Docker and
# elections, and keeps 1.1 cores busy with three workers, 1.4 with four (docs/TESTING.md).
# tests/conftest.py keeps each module on one worker, and docker, cluster and spark each on
# one; PYTEST_WORKERS=0 runs everything in this process.
PYTEST_WORKERS ?= 4
# The venv and the linters on one side, the system packages and then the Docker image on
# the other, at once: on a fresh machine each side is a minute or two of downloads, and the
# image would otherwise be built inside the docker tests, on their worker's time.
test: prepare-test
	$(PY) -m pytest -q $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS)) $(PYTEST_ARGS)

prepare-test:
	$(MAKE) --no-print-directory --output-sync=target -j2 lint test-image

# the image the docker tests run, where a Docker engine answers (they build it otherwise)
test-image: sysdeps
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory image; \
	else echo "test-image: no Docker engine here, no image built"; fi

# The same run as `make test` (less the linters) under coverage.py, configured in
# pyproject.toml: subprocess brokers and the CLI are measured too, Docker's containers not.
# The report comes even when a test fails; the target then fails with pytest's status.
coverage: venv sysdeps
	rm -f .coverage .coverage.* coverage.json
	@rc=0; $(VENV)/bin/coverage run -m pytest -q -p no:cacheprovider \
		$(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS)) $(PYTEST_ARGS) || rc=$$?; \
	$(VENV)/bin/coverage combine -q && $(VENV)/bin/coverage json -q -o coverage.json && \
	$(PY) scripts/coverage_summary.py coverage.json; \
	exit $$rc

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

# bench/authorizer.py: ns per ACL check with 10, 1,000 and 10,000 ACLs, index against scan
bench-authorizer: venv
	$(VENV)/bin/minibroker bench authorizer

# bench/security.py: one broker's PLAINTEXT, SSL and SASL_SSL listeners side by side
BENCH_SECURITY_ARGS ?=
bench-security: venv
	$(VENV)/bin/minibroker bench security $(BENCH_SECURITY_ARGS)

# bench/scale.py: issue 23's figures at 3,000 partitions on three nodes, one broker and the
# peer (docs/BENCHMARKS.md "Partition scale"); BENCH_SCALE_ARGS=--quick for a small version
BENCH_SCALE_ARGS ?=
bench-scale: venv
	$(VENV)/bin/minibroker bench scale $(BENCH_SCALE_ARGS)

# bench/transactions.py: issue 25's figures, one broker and three nodes (docs/BENCHMARKS.md
# "Transactions"); BENCH_TRANSACTIONS_ARGS=--runs 1 for a quick one
BENCH_TRANSACTIONS_ARGS ?=
bench-transactions: venv
	$(VENV)/bin/minibroker bench transactions $(BENCH_TRANSACTIONS_ARGS)

# bench/share_groups.py: issue 26's figures, share consumers on one partition (docs/BENCHMARKS.md
# "Share groups"); BENCH_SHARE_GROUPS_ARGS=--runs 1 for a quick one
BENCH_SHARE_GROUPS_ARGS ?= --client both
bench-share-groups: venv
	$(VENV)/bin/minibroker bench share-groups $(BENCH_SHARE_GROUPS_ARGS)

# bench/reassignment.py: issue 27's figures, 300 partitions (1 GB) moved onto a fourth broker
# under a 20 MB/s throttle (docs/BENCHMARKS.md "Reassignment"); BENCH_REASSIGNMENT_ARGS=--quick
BENCH_REASSIGNMENT_ARGS ?=
bench-reassignment: venv
	$(VENV)/bin/minibroker bench reassignment $(BENCH_REASSIGNMENT_ARGS)

# bench/quotas.py: issue 27's figure, a throttled client's rate against its quota over 30 s
# (docs/BENCHMARKS.md "Client quotas"); BENCH_QUOTAS_ARGS=--seconds 10 for a quick one
BENCH_QUOTAS_ARGS ?=
bench-quotas: venv
	$(VENV)/bin/minibroker bench quotas $(BENCH_QUOTAS_ARGS)

# pytest exits 5 when the marker selects no test: say so and succeed.
soak: venv
	@rc=0; $(PY) -m pytest -q -m soak $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then \
		echo "soak: no tests are marked 'soak' (pytest -m soak selected none); nothing to run"; \
		exit 0; \
	fi; \
	exit $$rc

# bench/chaos: Jepsen-style runs (docs/RELIABILITY.md); each seed's history, summary and log
# go to $(CHAOS_OUT)/seed-N, and `minibroker analyze --chaos $(CHAOS_OUT)/seed-N` charts one
CHAOS_SEEDS ?= 1-20
CHAOS_OUT   ?= chaos-out
CHAOS_ARGS  ?=
chaos: venv
	$(VENV)/bin/minibroker chaos --target processes --seeds $(CHAOS_SEEDS) --duration-s 60 \
		--out $(CHAOS_OUT) --json $(CHAOS_OUT)/results.json $(CHAOS_ARGS)

# sim/: the whole cluster in one deterministic process per seed (docs/RELIABILITY.md);
# a failing seed prints the command that replays it. By default 10,000 short seeds (one
# fault from the topic's creation on, as make test's sweep), one process per core: about
# 35 minutes on two cores. SIM_ARGS="--duration-s 30 --quiet-s 5" runs the long seeds,
# several faults each, about five times as long.
SIM_SEEDS ?= 1-10000
SIM_OUT   ?= sim-out
SIM_JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
SIM_ARGS  ?= --duration-s 3 --quiet-s 0
sim: venv
	@mkdir -p $(SIM_OUT)
	$(VENV)/bin/minibroker sim --seeds $(SIM_SEEDS) --nodes 3 --jobs $(SIM_JOBS) \
		--json $(SIM_OUT)/summary.json $(SIM_ARGS) | tee $(SIM_OUT)/summary.txt

chaos-docker: venv image
	$(VENV)/bin/minibroker chaos --target docker --seeds $(CHAOS_SEEDS) --duration-s 60 \
		--out $(CHAOS_OUT)-docker --json $(CHAOS_OUT)-docker/results.json $(CHAOS_ARGS)

# --- Docker (docker/, docker-compose.yml) ----------------------------------------------
# No registry is needed: the base image is built here once (docker/base.sh: mmdebstrap and
# docker import) and the project goes in as wheels built on the host, so nothing is
# downloaded inside a build. DOCKER_BASE=python:3.11-slim uses a registry's base instead.
BASE_IMAGE  ?= minibroker-base:bookworm
DOCKER_BASE ?= $(BASE_IMAGE)
IMAGE       ?= minibroker:latest
COMPOSE     ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
CLUSTER_SERVICES := broker-0 broker-1 broker-2
CLUSTER_TIMEOUT  ?= 120
WHEELS      := docker/build/wheels
WHEEL_VENV  := docker/build/venv
PACKAGE_SOURCES := $(shell find protocol broker client tools bench spark_jobs cli harness sim -name '*.py' -o -name '*.properties' 2>/dev/null)

# The wheels are built by the host's Python for the image's (3.11 in both bases).
$(WHEEL_VENV)/.ready:
	@$(PYTHON3) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { \
		echo "image: the wheels must be built by Python 3.11 (the image's); set PYTHON3=python3.11" >&2; exit 1; }
	$(PYTHON3) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install -q 'setuptools>=68' wheel
	touch $@

# dependencies: again only when pyproject.toml changes
$(WHEELS)/.deps: pyproject.toml $(WHEEL_VENV)/.ready
	rm -rf $(WHEELS) && mkdir -p $(WHEELS)
	$(WHEEL_VENV)/bin/pip wheel -q --no-build-isolation --wheel-dir $(WHEELS) .
	touch $@

# the project itself: whenever a source file changes
$(WHEELS)/.project: $(PACKAGE_SOURCES) $(WHEELS)/.deps
	rm -f $(WHEELS)/minibroker-*.whl
	$(WHEEL_VENV)/bin/pip wheel -q --no-deps --no-build-isolation --wheel-dir $(WHEELS) .
	touch $@

image: $(WHEELS)/.project
	@if [ "$(DOCKER_BASE)" = "$(BASE_IMAGE)" ] && ! docker image inspect $(BASE_IMAGE) >/dev/null 2>&1; then \
		echo "image: building the base image $(BASE_IMAGE) (once)"; \
		docker/base.sh $(BASE_IMAGE); \
	fi
	docker build -q --build-arg BASE=$(DOCKER_BASE) -t $(IMAGE) docker

cluster: image
	MINIBROKER_IMAGE=$(IMAGE) $(COMPOSE) up -d $(CLUSTER_SERVICES)
	COMPOSE="$(COMPOSE)" docker/wait-healthy.sh $(CLUSTER_TIMEOUT) $(CLUSTER_SERVICES)

# VOLUMES=1 also removes the brokers' data volumes
cluster-down:
	$(COMPOSE) down --remove-orphans $(if $(filter 1 yes true,$(VOLUMES)),--volumes)

# Compose v2 for this one directory (bookworm has only 1.29): run it as
# DOCKER_CONFIG=docker/build/docker-config docker compose ... (the tests check both tools)
compose-v2:
	$(PYTHON3) docker/compose-v2.py docker/build/docker-config

# from the containers, or from the volumes once `make cluster-down` has removed them
CLUSTER_DATA     ?= cluster-data
CLUSTER_ANALYSIS ?= cluster-analysis
cluster-data:
	MINIBROKER_IMAGE=$(IMAGE) docker/copy-data.sh $(CLUSTER_DATA) $(CLUSTER_SERVICES)

cluster-analyze: venv cluster-data
	$(VENV)/bin/minibroker analyze --data-dir $(addprefix $(CLUSTER_DATA)/,$(CLUSTER_SERVICES)) \
		--out $(CLUSTER_ANALYSIS)

# bench/compose.py: throughput through the published ports (docs/BENCHMARKS.md)
BENCH_COMPOSE_ARGS ?=
bench-compose: venv
	$(VENV)/bin/minibroker bench compose $(BENCH_COMPOSE_ARGS)

clean:
	rm -rf bench-out chaos-out chaos-out-docker sim-out cluster-data cluster-analysis .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
	find . -path ./$(VENV) -prune -o -path ./.peer-venv -prune -o -path ./.git -prune -o \
		-type d -name __pycache__ -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) .peer-venv $(DATA_DIR) *.egg-info docker/build certs

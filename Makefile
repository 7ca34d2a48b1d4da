# One entry point for people and CI. `make test` works on a fresh machine with Python, pip and
# Debian's packages: it creates .venv, installs pyrmq with its test extras, and runs every tier.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# Workers for pytest-xdist: the suite mostly waits on processes, sockets and containers, so a second worker uses
# the idle time (with another process holding one of two cores: 13:24 against 16:19 median, about 0.82);
# tests/conftest.py keeps the sets that share host ports or a JVM on one worker each.
# WORKERS=0 runs everything in this one process, in collection order.
WORKERS ?= 2
XDIST := -n $(WORKERS)

.PHONY: test unit integration compat system images proto bench clean native

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# The message index's per-key work in C (broker/store/index_native.c -> broker/store/index_native*.so), built in
# place with this Python's compiler flags. Without a C compiler the build says so and the index keeps its
# pure-Python path (tests/unit/store/test_index_native.py compares the two and skips without the module).
NATIVE := broker/store/.native-stamp
$(NATIVE): broker/store/index_native.c broker/store/build_native.py $(STAMP)
	@$(BIN)/python -m broker.store.build_native && touch $@ || true

native: $(NATIVE)

# With a Docker engine the images are built first (a failed build fails the run); without one the
# system tier skips and says why.
test: $(STAMP) $(NATIVE)
	@if docker info >/dev/null 2>&1; then deploy/images/build.sh; \
	else echo "no Docker engine reachable: the system tests will be skipped"; fi
	PYRMQ_SKIP_IMAGE_BUILD=1 $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

unit: $(STAMP) $(NATIVE)
	$(BIN)/python -m pytest $(XDIST) tests/unit $(PYTEST_ARGS)

integration: $(STAMP) $(NATIVE)
	$(BIN)/python -m pytest $(XDIST) tests/integration $(PYTEST_ARGS)

# Apache's C++ client (PyPI rocketmq 0.4.4) against real processes; part of `make test` too.
compat: $(STAMP) $(NATIVE)
	$(BIN)/python -m pytest $(XDIST) tests/compat $(PYTEST_ARGS)

# Container images (pyrmq-namesrv, pyrmq-broker): the base image is pulled, or built with debootstrap
# from the host's apt mirror where no registry answers; then the compose build.
images:
	deploy/images/build.sh

system: $(STAMP) $(NATIVE)
	deploy/images/build.sh
	PYRMQ_SKIP_IMAGE_BUILD=1 $(BIN)/python -m pytest tests/system $(PYTEST_ARGS)

# Regenerates broker/grpc_v2/pb from the vendored apache/rocketmq-apis protos in broker/grpc_v2/proto; a unit
# test fails when the committed stubs are stale.
proto: $(STAMP)
	$(BIN)/python -m broker.grpc_v2.build_proto

bench: $(STAMP) $(NATIVE)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis bench/results $(NATIVE) broker/store/index_native*.so

# One entry point for people and CI. `make test` works on a fresh machine with Python, pip and
# Debian's packages: it creates .venv, installs pyrmq with its test extras, and runs every tier.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: test unit integration proto bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

# Regenerates remoting/pb from remoting/proto; tests fail when the committed stubs are stale.
proto: $(STAMP)
	$(BIN)/python -m remoting.build_proto

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis bench/results

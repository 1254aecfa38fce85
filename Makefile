PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
RUN_STAMP := $(VENV)/.installed

.PHONY: run test lint types unit schemas docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# compileall: byte-compile once, so memoryctl starts fast even where PYTHONDONTWRITEBYTECODE is set.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[semantic,mcp,ui]'
	$(BIN)/python -m compileall -q memoryd client >/dev/null
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,semantic,mcp,ui]'
	$(BIN)/python -m compileall -q memoryd client >/dev/null
	touch $@ $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/memoryd serve

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint types unit

schemas: $(STAMP)
	$(BIN)/python -m memoryd.docgen --write

docs: schemas

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info

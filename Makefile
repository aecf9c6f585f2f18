# Two commands a new user needs (see README.md):
#   make demo   -> creates .venv, installs bo-ncgp with all extras, runs the demo
#   make test   -> creates .venv, installs bo-ncgp with all extras, runs the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.bo_ncgp-installed
PYTEST_ARGS ?=

.PHONY: setup demo test test-all lint clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev,keops,envs,distributed]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/bo-ncgp demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check bo_ncgp tests

clean:
	rm -rf $(VENV) .pytest_cache

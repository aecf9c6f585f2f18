# Two commands a new user needs (see README.md):
#   make demo   -> creates .venv, installs bo-ncgp with all extras, runs the demo
#   make test   -> creates .venv, installs bo-ncgp with all extras, runs the test suite
# make check-install: `pip install .` (not editable) into a fresh venv in a temporary folder,
# then the installed `bo-ncgp` from an empty folder (CI runs it after the tests, via .ci/run).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.bo_ncgp-installed
PYTEST_ARGS ?=

.PHONY: setup demo test test-all test-gpu bench lint docs check-install clean

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

# The device lane: the model, linear-algebra, likelihood and BoTorch-layer tests on a GPU
# (tests marked cpu_only are skipped there; all of them skip if the device is unavailable).
TEST_DEVICE ?= cuda
test-gpu: $(STAMP)
	BO_NCGP_TEST_DEVICE=$(TEST_DEVICE) $(BIN)/python -m pytest -m "not slow and not cpu_only" \
	  tests/models tests/linalg tests/likelihoods tests/bo tests/test_devices.py $(PYTEST_ARGS)

# every speed ratio against its peer (benchmarks/speed.py; BENCH_ARGS=--quick for small presets)
bench: $(STAMP)
	$(BIN)/python -m benchmarks.speed $(BENCH_ARGS)

# The documentation site (Sphinx, docs/conf.py) into docs/_build/html; every warning is an
# error. The tutorials are executed as notebooks (cached in docs/_build/.jupyter_cache: only a
# changed tutorial runs again); BO_NCGP_DOCS_EXECUTE=off builds without running them.
DOCS_STAMP := $(VENV)/.bo_ncgp-docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: open docs/_build/html/index.html"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check bo_ncgp tests

# The package is built from a copy of the checkout's files (tracked and untracked, without what
# .gitignore excludes), so a stale build/ folder cannot leak into the wheel and nothing is written
# into the checkout; the commands run from an empty folder, so nothing is imported from it.
check-install:
	@set -e; unset PYTHONPATH; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	mkdir -p "$$tmp/src" "$$tmp/run" "$$tmp/out"; start=$$(date +%s); \
	git ls-files -z -co --exclude-standard \
	  | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C "$$tmp/src"; \
	echo "check-install: pip install . into $$tmp/venv"; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install --quiet -c constraints.txt torch==2.13.0; \
	"$$tmp/venv/bin/pip" install --quiet -c constraints.txt "$$tmp/src[envs]"; \
	cd "$$tmp/run"; \
	"$$tmp/venv/bin/python" -c "import bo_ncgp, experiments, sys; \
	  paths = [bo_ncgp.__file__, experiments.__file__]; \
	  sys.exit(0 if all(p.startswith('$$tmp/venv/') for p in paths) else 'not installed: %s' % paths)"; \
	"$$tmp/venv/bin/python" -c "import sys; from importlib.metadata import files; \
	  top = {f.parts[0] for f in files('bo-ncgp') if f.suffix == '.py'}; \
	  data = [str(f) for f in files('bo-ncgp') if '/results/' in f.as_posix()]; \
	  sys.exit(0 if top == {'bo_ncgp', 'experiments'} and not data else 'wheel: %s %s' % (top, data[:3]))"; \
	echo "check-install: bo-ncgp --help"; \
	"$$tmp/venv/bin/bo-ncgp" --help > "$$tmp/help.txt"; \
	for cmd in demo hotspots lunar-lander banana hipgp-pcg iterncgp-gmm gam-friedman; do \
	  grep -q "^    $$cmd " "$$tmp/help.txt" || { echo "bo-ncgp --help lacks $$cmd" >&2; exit 1; }; \
	done; \
	echo "check-install: bo-ncgp demo"; \
	"$$tmp/venv/bin/bo-ncgp" demo --out "$$tmp/out/demo" > "$$tmp/demo.log" 2>&1 \
	  || { tail -40 "$$tmp/demo.log" >&2; exit 1; }; \
	test -f "$$tmp/out/demo/best.png"; \
	echo "check-install: bo-ncgp hipgp-pcg --quick"; \
	"$$tmp/venv/bin/bo-ncgp" hipgp-pcg --quick --out "$$tmp/out/pcg" > "$$tmp/pcg.log" 2>&1 \
	  || { tail -40 "$$tmp/pcg.log" >&2; exit 1; }; \
	test -f "$$tmp/out/pcg/pcg_quick.json"; \
	test -z "$$(ls -A "$$tmp/run")" || { echo "files written into the working folder:" >&2; \
	  ls -A "$$tmp/run" >&2; exit 1; }; \
	echo "check-install: passed in $$(( $$(date +%s) - start )) s"

clean:
	rm -rf $(VENV) .pytest_cache

# Two commands a new user needs (see README.md):
#   make demo   -> creates .venv, installs bo-ncgp with all extras, runs the demo
#   make test   -> creates .venv, installs bo-ncgp with all extras, runs the test suite
# make check-install: a wheel built from the checkout, installed (not editable) into a fresh venv
# in a temporary folder, then the installed `bo-ncgp` from an empty folder (CI runs it after the
# tests, via .ci/run).
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
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev,keops,envs,distributed,ax]"
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
	$(BIN)/ruff format --check bo_ncgp tests experiments

# The wheel is built from a copy of the checkout's files (tracked and untracked, without what
# .gitignore excludes), so a stale build/ folder cannot leak into it and nothing is written into
# the checkout; it must hold py.typed and the LICENSE and no results data. The wheel (not the
# source folder) is installed into a fresh venv, and the README's commands run from an empty
# folder, so nothing is imported from the checkout; last, without the `envs` extra the lander
# must name the extra to install.
check-install:
	@set -e; unset PYTHONPATH; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	mkdir -p "$$tmp/src" "$$tmp/run" "$$tmp/out" "$$tmp/dist"; start=$$(date +%s); \
	version=$$(sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml); \
	git ls-files -z -co --exclude-standard \
	  | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C "$$tmp/src"; \
	echo "check-install: pip wheel, then pip install the wheel into $$tmp/venv"; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install --quiet -c constraints.txt torch==2.13.0; \
	"$$tmp/venv/bin/pip" wheel -v --no-deps -w "$$tmp/dist" "$$tmp/src" > "$$tmp/wheel.log" 2>&1 \
	  || { tail -40 "$$tmp/wheel.log" >&2; exit 1; }; \
	! grep "Warning" "$$tmp/wheel.log" >&2 || { echo "the wheel build warns" >&2; exit 1; }; \
	whl=$$(ls "$$tmp"/dist/bo_ncgp-$$version-*.whl); \
	"$$tmp/venv/bin/python" -c "import sys, zipfile; \
	  names = zipfile.ZipFile(sys.argv[1]).namelist(); \
	  top = {n.split('/')[0] for n in names if n.endswith('.py')}; \
	  lic = [n for n in names if n.endswith('.dist-info/licenses/LICENSE')]; \
	  data = [n for n in names if '/results/' in n]; \
	  ok = 'bo_ncgp/py.typed' in names and lic and top == {'bo_ncgp', 'experiments'} and not data; \
	  sys.exit(0 if ok else 'wheel: py.typed %s, LICENSE %s, packages %s, results data %s' \
	    % ('bo_ncgp/py.typed' in names, lic, top, data[:3]))" "$$whl"; \
	"$$tmp/venv/bin/pip" install --quiet -c constraints.txt "$$whl[envs]"; \
	cd "$$tmp/run"; \
	"$$tmp/venv/bin/python" -c "import bo_ncgp, experiments, sys; \
	  paths = [bo_ncgp.__file__, experiments.__file__]; \
	  sys.exit(0 if all(p.startswith('$$tmp/venv/') for p in paths) else 'not installed: %s' % paths)"; \
	echo "check-install: bo-ncgp --version, --help"; \
	test "$$("$$tmp/venv/bin/bo-ncgp" --version)" = "bo-ncgp $$version"; \
	"$$tmp/venv/bin/bo-ncgp" --help > "$$tmp/help.txt" 2> "$$tmp/help.err"; \
	for cmd in demo hotspots lunar-lander banana hipgp-pcg iterncgp-gmm gam-friedman; do \
	  grep -q "^    $$cmd " "$$tmp/help.txt" || { echo "bo-ncgp --help lacks $$cmd" >&2; exit 1; }; \
	done; \
	"$$tmp/venv/bin/bo-ncgp" lunar-lander --help > /dev/null 2>> "$$tmp/help.err"; \
	test ! -s "$$tmp/help.err" || { echo "--help printed on stderr:" >&2; cat "$$tmp/help.err" >&2; exit 1; }; \
	echo "check-install: bo-ncgp demo, compare, plot, core-demo"; \
	"$$tmp/venv/bin/bo-ncgp" demo --seeds 2 --evaluations 20 --out "$$tmp/out/demo" \
	  > "$$tmp/demo.log" 2>&1 || { tail -40 "$$tmp/demo.log" >&2; exit 1; }; \
	test -f "$$tmp/out/demo/best.png" && test -f "$$tmp/out/demo/summary.json"; \
	"$$tmp/venv/bin/bo-ncgp" compare "$$tmp/out/demo/hartmann6/dual" "$$tmp/out/demo/hartmann6/random" \
	  > "$$tmp/compare.log" 2>&1 || { cat "$$tmp/compare.log" >&2; exit 1; }; \
	grep -q "^best@20: A - B = " "$$tmp/compare.log" || { cat "$$tmp/compare.log" >&2; exit 1; }; \
	"$$tmp/venv/bin/bo-ncgp" plot "$$tmp/out/demo/hartmann6" -o "$$tmp/out/plot.png" > /dev/null; \
	test -f "$$tmp/out/plot.png"; \
	"$$tmp/venv/bin/bo-ncgp" core-demo --n 500 --rank 20 > "$$tmp/core.log" 2>&1 \
	  || { cat "$$tmp/core.log" >&2; exit 1; }; \
	echo "check-install: bo-ncgp hipgp-pcg --quick"; \
	"$$tmp/venv/bin/bo-ncgp" hipgp-pcg --quick --out "$$tmp/out/pcg" > "$$tmp/pcg.log" 2>&1 \
	  || { tail -40 "$$tmp/pcg.log" >&2; exit 1; }; \
	test -f "$$tmp/out/pcg/pcg_quick.json"; \
	test -z "$$(ls -A "$$tmp/run")" || { echo "files written into the working folder:" >&2; \
	  ls -A "$$tmp/run" >&2; exit 1; }; \
	echo "check-install: without the envs extra, bo-ncgp lunar-lander names it"; \
	"$$tmp/venv/bin/pip" uninstall --quiet -y gymnasium; \
	rc=0; "$$tmp/venv/bin/bo-ncgp" lunar-lander --quick --out "$$tmp/out/noenvs" \
	  > "$$tmp/noenvs.log" 2>&1 || rc=$$?; \
	test "$$rc" -eq 2 && grep -q "pip install 'bo-ncgp\[envs\]'" "$$tmp/noenvs.log" \
	  || { echo "lunar-lander without gymnasium: exit $$rc" >&2; tail -20 "$$tmp/noenvs.log" >&2; exit 1; }; \
	echo "check-install: passed in $$(( $$(date +%s) - start )) s"

clean:
	rm -rf $(VENV) .pytest_cache

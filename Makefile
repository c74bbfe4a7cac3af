# Each target creates .venv if missing and installs what it needs; `make test` is what CI runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist: a worker per core (at most 4), a test module per unit of work so its module fixtures
# are built once, in collection order (tests/conftest.py sends the slowest modules first, then the
# others that start kernels, browsers, clusters or installs). Session fixtures are built once per
# run (helpers/once.py).
XDIST := -n auto --maxprocesses 4 --dist loadscope --no-loadscope-reorder

.PHONY: demo test test-fast lab lint format docs browser-deps clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# constraints.txt pins every version, torch's CPU wheel among them (the package itself takes a range).
	$(BIN)/pip install --quiet -c constraints.txt -e '.[notebooks,dev,ray,export,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rbplab demo

# The docs are built first (strict: a broken reference fails); the site test then checks that build.
# Every test phase of a second or more is listed at the end: benchmarks/suite_figures.py reads them
# (the 25 slowest, each module's sum) to keep tests/conftest.py's SLOWEST in order.
test: $(STAMP) browser-deps docs
	$(BIN)/ruff check rbplab tests benchmarks scripts notebooks
	$(BIN)/lint-imports
	RBPLAB_DOCS_SITE=site $(BIN)/pytest -q $(XDIST) --durations=0 --durations-min=1

# The unmarked tests only: no wheel, no Jupyter kernel, no browser, no Ray (markers: pyproject.toml).
test-fast: $(STAMP)
	$(BIN)/pytest -q $(XDIST) -m "not slow and not notebook and not browser and not ray and not install and not statistical"

# The docs site into site/, strict (any warning fails: a broken link, a missing docstring target) and
# offline (no CDN fonts or scripts; tests/e2e/test_docs_site.py checks the HTML). Open site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# JupyterLab refuses to run as root without --allow-root (containers, CI machines).
lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root,)

lint: $(STAMP)
	$(BIN)/ruff check rbplab tests benchmarks scripts notebooks
	$(BIN)/lint-imports
	$(BIN)/ruff format --check rbplab tests benchmarks scripts notebooks

format: $(STAMP)
	$(BIN)/ruff format rbplab tests benchmarks scripts notebooks

# The browser and figure tests drive Debian's chromium and read exported PDFs back with poppler
# (pdftotext, pdftoppm); install them when missing and we are allowed to.
browser-deps:
	@{ command -v chromium && command -v pdftoppm && command -v pdftotext; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium poppler-utils >/dev/null; \
	  else echo "chromium or poppler-utils not found: the browser and figure tests will be skipped" \
	    "(apt-get install chromium poppler-utils)"; fi; }

clean:
	rm -rf $(VENV) reports site .pytest_cache .ruff_cache

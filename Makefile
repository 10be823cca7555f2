# hf_lmobj: the README's commands. Each target sets up everything it needs in .venv.
#   make demo   train a tiny causal LM on the embedded corpus and report perplexity / bits per byte
#               (a fixed budget of steps; a shorter demo on a slow machine: make demo DEMO_ARGS="--max_steps 1500")
#   make test   run the test suite (slow and tests/integration/ included) and print its 25 slowest tests
#   make lint   ruff check + ruff format --check (config in pyproject.toml)
#   make docs   build the documentation site (docs/, mkdocs.yml) into build/docs-site, warnings as errors
#   make bench  run every benchmark in benchmarks/ side by side with the stock libraries
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
# A CPU build of torch that is fast to install; set TORCH_SPEC="torch" (or any spec) to choose yours.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
# Extra flags for the demo's recipe, e.g. DEMO_ARGS="--max_steps 1500" (the report then says its figure is not the
# reference one).
DEMO_ARGS ?=

.PHONY: install demo test test-fast lint docs bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if [ -n "$$CI" ] || ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		$(BIN)/python -m pip install -q "$(TORCH_SPEC)"; fi
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python recipes/pretrain.py --config recipes/configs/causal/demo.yaml $(DEMO_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest --durations=25 $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

# NO_MKDOCS_2_WARNING silences mkdocs-material's banner about mkdocs 2 (not a warning of this site)
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/docs-site

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	set -e; for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis out runs

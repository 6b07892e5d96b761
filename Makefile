# Two commands do all the set-up on a fresh clone:
#   make serve   - serving venv (no torch) + the service on 127.0.0.1:8000 with the shipped de-en model
#   make test    - dev venv (torch CPU, onnx, test tools) + system test tools + ruff + pytest
PYTHON ?= python3
DEV_VENV ?= .venv
SERVE_VENV ?= .venv-serve
# make serve listens on HOST:PORT; MT_HOST / MT_PORT (the service's own settings) work too, HOST / PORT win
HOST ?= $(or $(MT_HOST),127.0.0.1)
PORT ?= $(or $(MT_PORT),8000)

LOCK ?= deploy/docker/requirements.lock

.PHONY: serve test lint dev-env serve-env lock native

$(DEV_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DEV_VENV)
	$(DEV_VENV)/bin/python -m pip install -q --upgrade pip
	$(DEV_VENV)/bin/python -m pip install -q -e ".[train,dev]"
	touch $@

# the serving venv installs exactly the lock file (versions and hashes), then the project itself without deps
$(SERVE_VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install -q --require-hashes --no-deps -r $(LOCK)
	$(SERVE_VENV)/bin/python -m pip install -q --no-deps -e . || \
		$(SERVE_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# Refresh the lock file after changing pyproject.toml's [project] dependencies (uv from PyPI: in the dev venv);
# tests/deploy/test_deploy_lock.py fails while the two disagree
lock: $(DEV_VENV)/.installed
	$(DEV_VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes \
		--custom-compile-command "make lock" -o $(LOCK)

dev-env: $(DEV_VENV)/.installed
serve-env: $(SERVE_VENV)/.installed

# with a C compiler, serve builds the fused step's library first (once; again when its source changes), which
# MT_FUSED_STEP=auto uses on CPUs with AVX-512 VNNI; without one it serves the graphs, as MT_FUSED_STEP=false does
serve: $(SERVE_VENV)/.installed
	@if command -v cc >/dev/null || command -v gcc >/dev/null; then \
		$(MAKE) -s $(NATIVE_LIB) || echo "the fused step did not build: the graphs serve"; \
		else echo "no C compiler: the fused step is not built (the graphs serve; docs/deployment.md MT_FUSED_STEP)"; fi
	MT_HOST=$(HOST) MT_PORT=$(PORT) $(SERVE_VENV)/bin/python -m service

# the fused decoder step's onnxruntime operator (MT_FUSED_STEP; engine/fused_step.py): a C compiler only.
# `make native` always rebuilds; the file target rebuilds when the source changes
NATIVE_LIB := build/native/libmtserve_fused_step.so
native:
	bash native/build.sh

$(NATIVE_LIB): native/build.sh $(wildcard native/fused_step/*) $(wildcard native/third_party/onnxruntime/*)
	bash native/build.sh

lint: $(DEV_VENV)/.installed
	$(DEV_VENV)/bin/python -m ruff check .
	$(DEV_VENV)/bin/python -m ruff format --check .

test: $(DEV_VENV)/.installed
	bash scripts/install-test-tools.sh
	$(DEV_VENV)/bin/python -m ruff check .
	$(DEV_VENV)/bin/python -m ruff format --check .
	$(DEV_VENV)/bin/python -m pytest

# One entry point for people and CI. Every target builds its own virtual environment.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint unit e2e-vllm vllm-env bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## The main job: a local sandbox showing alphagate at work (see README).
demo: $(STAMP)
	tools/ensure-prometheus.sh || true
	$(BIN)/alphagate demo $(ARGS)

## Lint, types, architecture contracts, then the test suite (real Prometheus included).
test: $(STAMP)
	tools/ensure-prometheus.sh
	$(BIN)/lint-imports
	$(BIN)/ruff check controller tests tools dashboards deploy
	$(BIN)/ruff format --check controller tests tools
	$(BIN)/mypy
	$(BIN)/pytest -m "not vllm" $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/pytest -m "not vllm and not prometheus and not slow" $(PYTEST_ARGS)

## The real-vLLM end-to-end proof (a few minutes; the vLLM env is cached outside the repo).
vllm-env:
	tools/vllm/setup.sh

e2e-vllm: $(STAMP) vllm-env
	tools/ensure-prometheus.sh
	ALPHAGATE_REQUIRE_VLLM=1 $(BIN)/pytest -m vllm $(PYTEST_ARGS) || { \
	  echo "== real vLLM on 2 shared cores: retrying the failed tests once"; \
	  ALPHAGATE_REQUIRE_VLLM=1 $(BIN)/pytest -m vllm --last-failed $(PYTEST_ARGS); }

bench: $(STAMP)
	$(BIN)/python -m alphagate.bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

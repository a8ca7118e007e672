# One entry point for people and CI. Every target builds its own virtual environment.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Bytecode, and pytest's rewritten test modules, cached under the venv (not beside the sources)
# even where the environment says PYTHONDONTWRITEBYTECODE: without the cache every test worker
# and every `alphagate` a test starts compiles the sources again (pytest's assertion rewriting
# alone is ~17 s of CPU per worker).
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache

.PHONY: setup demo test lint unit e2e-vllm vllm-env bench clean sbom image release-manifest

$(STAMP): pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./lab  # the controller and the lab, editable
	# rfc3987-syntax (jsonschema's IRI format, pulled in only by cyclonedx-bom's validation
	# extra) compiles a Lark grammar on import: 1.7 s of CPU in every Python process that
	# imports kubernetes (kubernetes.dynamic -> kubernetes_validate -> jsonschema), i.e. every
	# test worker and every `alphagate` the tests start. Nothing here checks IRIs; jsonschema
	# skips that format without it. The image never has it (requirements.lock).
	$(BIN)/pip uninstall --quiet --yes rfc3987-syntax
	touch $(STAMP)

setup: $(STAMP)

## The main job: a local sandbox showing alphagate at work (see README).
demo: $(STAMP)
	tools/ensure-prometheus.sh || true
	$(BIN)/alphagate demo $(ARGS)

## Architecture contracts, lint, format and types (what .pre-commit-config.yaml runs too).
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check controller lab tests tools deploy
	$(BIN)/ruff format --check controller lab tests tools deploy
	$(BIN)/mypy

## Lint beside the test suite (real Prometheus included) on pytest-xdist workers: most of the
## suite waits (servers, subprocesses, wall-clock replicas), so more workers than cores overlap
## the waits, and lint (mostly mypy, ~20 s cold) fills them too; its output is printed after
## the tests', and either failing fails the target. One collection beside lint first fills the
## bytecode cache (above), which the workers then read instead of each compiling the same
## sources. tests/conftest.py says which tests share a worker and which start first. The
## demo's story runs in real time (compressed 4x; the `realtime` marker): it runs in its own
## process beside the workers, at normal priority while they and lint run at nice $(NICE), so
## its windows come on time (beside four workers at its own priority they came late and the
## story changed) and the rest of the suite fills the cores it leaves. It collects tests/demo
## alone (where every `realtime` test lives: test_ship_habits checks), not the whole suite.
WORKERS ?= 4
NICE ?= 10
test: $(STAMP)
	tools/ensure-prometheus.sh
	nice -n $(NICE) $(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	$(BIN)/pytest --collect-only -q -m "not vllm" -p no:xdist > $(VENV)/collect.log 2>&1; \
	$(BIN)/pytest tests/demo -m "realtime and not vllm" $(PYTEST_ARGS) > $(VENV)/realtime.log 2>&1 & \
	realtime=$$!; \
	nice -n $(NICE) $(BIN)/pytest -m "not vllm and not realtime" -n $(WORKERS) --dist loadgroup \
		$(PYTEST_ARGS); tests=$$?; \
	wait $$realtime; story=$$?; echo "== the real-time story (the demo)"; cat $(VENV)/realtime.log; \
	wait $$lint; linted=$$?; echo "== make lint"; cat $(VENV)/lint.log; \
	if [ $$story -ne 0 ]; then echo "== the real-time story failed (above)"; fi; \
	if [ $$linted -ne 0 ]; then echo "== make lint failed (above)"; fi; \
	[ $$tests -eq 0 ] && [ $$story -eq 0 ] && [ $$linted -eq 0 ]

## The fast loop: everything but the real-Prometheus, slow and real-vLLM tests.
unit: $(STAMP)
	$(BIN)/pytest -m "not vllm and not prometheus and not slow" -n 2 --dist loadgroup $(PYTEST_ARGS)

## The real-vLLM end-to-end proof (a few minutes; the vLLM env is cached outside the repo).
vllm-env:
	tools/vllm/setup.sh

e2e-vllm: $(STAMP) vllm-env
	tools/ensure-prometheus.sh
	ALPHAGATE_REQUIRE_VLLM=1 $(BIN)/pytest -m vllm $(PYTEST_ARGS) || { \
	  echo "== real vLLM on 2 shared cores: retrying the failed tests once"; \
	  ALPHAGATE_REQUIRE_VLLM=1 $(BIN)/pytest -m vllm --last-failed $(PYTEST_ARGS); }

## CycloneDX SBOM of the controller image's Python dependencies, made from the hash-pinned lock.
sbom: $(STAMP)
	$(BIN)/cyclonedx-py requirements --pyproject pyproject.toml --output-reproducible \
	  --of JSON -o sbom.cdx.json requirements.lock
	@echo "wrote sbom.cdx.json"

## The controller image, with whatever OCI engine is installed (docker, podman, nerdctl, buildah).
## IMAGE=registry.example.com/alphagate:0.1.0 make image
IMAGE ?= alphagate:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
ENGINE ?= $(shell for e in docker podman nerdctl buildah; do command -v $$e >/dev/null && { echo $$e; break; }; done)
image:
	@test -n "$(ENGINE)" || { echo "no docker, podman, nerdctl or buildah on PATH"; exit 1; }
	$(if $(filter buildah,$(ENGINE)),buildah bud,$(ENGINE) build) \
	  --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) -t $(IMAGE) .

## deploy/release/: the single-file install manifest, rendered by the real `kubectl kustomize`.
release-manifest: $(STAMP)
	$(BIN)/python tools/render_install.py

bench: $(STAMP)
	$(BIN)/python -m alphagate_lab.bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

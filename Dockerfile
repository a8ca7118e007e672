# syntax=docker/dockerfile:1
#
# alphagate controller image.
#
# Two stages. The builder installs the pinned, hash-checked dependencies (requirements.lock,
# wheels only: nothing is compiled) and the alphagate wheel into a virtualenv. The final stage
# is the same slim Python base plus that virtualenv: no compilers, no pip cache, no sources,
# a non-root numeric user, `alphagate run` as the entry point. Policies are not baked in: they
# come from SpeculativeCanary resources. The lock holds only the controller's dependencies:
# numpy and matplotlib (simulator, planners, demo charts) are extras the image does not carry.
#
# Regenerate the locks after changing dependencies in pyproject.toml (uv from PyPI):
#   uv pip compile pyproject.toml --python-version 3.11 --universal --generate-hashes \
#     --no-header -o requirements.lock
#   printf 'setuptools>=68\nwheel\n' | uv pip compile - --python-version 3.11 --universal \
#     --generate-hashes --no-header -o requirements-build.lock
#
# Build (any OCI engine: docker, podman, buildah, nerdctl; see deploy/README.md):
#   docker build --build-arg REVISION="$(git rev-parse HEAD)" -t alphagate:0.1.0 .
# Docker does not run where this project is developed: tests/ship/test_ship_docker.py checks
# this file statically (hadolint, structure, locks), see deploy/README.md.
#
# The base is pinned by digest (the multi-arch index of python:3.11-slim-bookworm). To move to
# a newer patch release: `docker buildx imagetools inspect python:3.11-slim-bookworm` and
# replace the digest; or override for one build with --build-arg PYTHON_IMAGE=...

ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: \
      -r requirements-build.lock \
 && python -m venv /opt/alphagate \
 && /opt/alphagate/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: \
      -r requirements.lock
COPY pyproject.toml README.md ./
COPY controller ./controller
RUN /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/alphagate/bin/pip install --no-cache-dir --no-deps --no-index /wheels/alphagate-*.whl \
 && /opt/alphagate/bin/pip check \
 && /opt/alphagate/bin/alphagate --version

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
# SOURCE: the repository URL this image is built from (set it in your CI).
ARG SOURCE=""
LABEL org.opencontainers.image.title="alphagate" \
      org.opencontainers.image.description="Gates vLLM speculative decoding on measured acceptance (alpha) and P99 latency" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
# MALLOC_ARENA_MAX=2: glibc's per-thread arenas kept freed page memory (fetch, parse pool,
# server threads): 20 canaries on 4 heavy pods peaked at 517 MiB with 42 MiB live, past the
# 512 Mi limit; with two arenas ~360 MiB (`python -m alphagate_lab.bench.memory --shared`).
ENV PATH=/opt/alphagate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MALLOC_ARENA_MAX=2
COPY --from=builder /opt/alphagate /opt/alphagate
# 65532: the conventional "nonroot" uid/gid; no passwd entry is needed.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["alphagate"]
CMD ["run", "--in-cluster", "--metrics-host=0.0.0.0", "--metrics-port=8080"]

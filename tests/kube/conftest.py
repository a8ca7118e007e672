"""Fixtures for the Kubernetes tests: an API server double on 127.0.0.1 and a real client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from alphagate.kube.client import Kube
from alphagate.sandbox.apiserver import ApiServer

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import kube_support`


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    with ApiServer() as server:
        yield server


@pytest.fixture
def kube(apiserver: ApiServer) -> Iterator[Kube]:
    k = Kube.from_configuration(apiserver.configuration())
    yield k
    k.close()

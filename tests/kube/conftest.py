"""Fixtures for the Kubernetes tests: an API server double on 127.0.0.1 and a real client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alphagate.kube.client import Kube
from alphagate.sandbox.apiserver import ApiServer


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    with ApiServer() as server:
        yield server


@pytest.fixture
def kube(apiserver: ApiServer) -> Iterator[Kube]:
    k = Kube.from_configuration(apiserver.configuration())
    yield k
    k.close()

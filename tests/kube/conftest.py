"""Fixtures for the Kubernetes tests: an API server double on 127.0.0.1 and a real client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alphagate.kube.client import Kube
from alphagate_lab.sandbox.apiserver import ApiServer, Rbac


@pytest.fixture
def apiserver(shipped_rbac: Rbac) -> Iterator[ApiServer]:
    """The double, holding the controller to what deploy/ grants it (403 for the rest)."""
    with ApiServer(rbac=shipped_rbac) as server:
        yield server


@pytest.fixture
def kube(apiserver: ApiServer) -> Iterator[Kube]:
    k = Kube.from_configuration(apiserver.configuration())
    yield k
    k.close()


@pytest.fixture
def person(apiserver: ApiServer) -> Iterator[Kube]:
    """A person's client (kubectl, the CLI): held to the double's `people_rbac`, not to the
    controller's Roles."""
    k = Kube.from_configuration(apiserver.configuration(as_controller=False))
    yield k
    k.close()

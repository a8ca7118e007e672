"""Reads SpeculativeCanary objects and writes their status, through the status subresource only."""

from __future__ import annotations

from typing import Any, Final, cast

from alphagate.config import GROUP, PLURAL, VERSION
from alphagate.kube.status.resource import CanaryStatus

FIELD_MANAGER: Final = "alphagate"
"""The name every write of the controller is recorded under in managedFields."""


class StatusWriter:
    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._custom = client.CustomObjectsApi(api_client)

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        from alphagate.kube.client import call

        result = call(
            f"read {PLURAL}.{GROUP} {namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            ),
        )
        return cast(dict[str, Any], result)

    def write(self, namespace: str, name: str, status: CanaryStatus) -> dict[str, Any]:
        """Replace the whole status (JSON patch `add /status`: no stale leftovers, no
        resourceVersion race with spec edits, which the status subresource ignores)."""
        from alphagate.kube.client import call

        body = [{"op": "add", "path": "/status", "value": status.dump()}]
        result = call(
            f"write status of {PLURAL}.{GROUP} {namespace}/{name}",
            lambda: self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body,
                field_manager=FIELD_MANAGER,
                _content_type="application/json-patch+json",
            ),
        )
        return cast(dict[str, Any], result)

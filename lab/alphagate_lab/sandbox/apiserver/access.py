"""Who may do what, and what goes wrong on purpose: the RBAC allow-list, scripted faults, and
the request log's record of every request.

Two callers: the controller, which authenticates with its ServiceAccount's token
(`CONTROLLER_TOKEN`, what `ApiServer.configuration()` sends) and is held to `ApiServer.rbac`
(tests load the shipped Roles into it, so a permission the code needs and deploy/ lacks is a
403), and people (no token, `configuration(as_controller=False)`, the CLI's kubeconfigs), held
to `ApiServer.people_rbac` (everything, unless a test says otherwise)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

CONTROLLER_USER: Final = "system:serviceaccount:alphagate:alphagate"
CONTROLLER_TOKEN: Final = "alphagate-controller-token"  # the double's stand-in for the SA token


class Rbac:
    """An allow-list of (verb, apiGroup, resource) with `*` wildcards; denials win.

    `resource` may carry a subresource (`speculativecanaries/status`). A double-level
    shorthand: `Rbac.allow_all().deny("patch", "apps", "deployments")` removes one permission.
    """

    def __init__(self, rules: Iterable[tuple[str, str, str]] = ()) -> None:
        self._allow: set[tuple[str, str, str]] = set(rules)
        self._deny: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    @classmethod
    def allow_all(cls) -> Rbac:
        return cls([("*", "*", "*")])

    def allow(self, verbs: str | Iterable[str], group: str, resources: str | Iterable[str]) -> Rbac:
        with self._lock:
            for v in [verbs] if isinstance(verbs, str) else verbs:
                for r in [resources] if isinstance(resources, str) else resources:
                    self._allow.add((v, group, r))
                    self._deny.discard((v, group, r))
        return self

    def deny(self, verbs: str | Iterable[str], group: str, resources: str | Iterable[str]) -> Rbac:
        with self._lock:
            for v in [verbs] if isinstance(verbs, str) else verbs:
                for r in [resources] if isinstance(resources, str) else resources:
                    self._deny.add((v, group, r))
        return self

    @staticmethod
    def _match(rules: set[tuple[str, str, str]], verb: str, group: str, resource: str) -> bool:
        return any(
            rv in ("*", verb) and rg in ("*", group) and rr in ("*", resource)
            for rv, rg, rr in rules
        )

    def allows(self, verb: str, group: str, resource: str) -> bool:
        with self._lock:
            if self._match(self._deny, verb, group, resource):
                return False
            return self._match(self._allow, verb, group, resource)


@dataclass(slots=True)
class Fault:
    """A scripted failure: requests matching `method` and `path` get `status`, `times` times
    (None: until removed). `hits` counts how often it fired.

    `after`: the request is served first (a write lands) and only its reply is replaced: by
    `status`, or with 0 by a connection closed without an answer. A lost reply."""

    method: str
    path: re.Pattern[str]
    status: int
    times: int | None
    reason: str | None = None
    message: str = "injected fault"
    hits: int = 0
    after: bool = False

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


class Faults:
    """Fault injection table, checked before RBAC and before any state change."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int | None = 1,
        reason: str | None = None,
        message: str = "injected fault",
        after: bool = False,
    ) -> Fault:
        """`method` is an HTTP method or `*`; `path_regex` is searched in the URL path; `after`
        serves the request and then loses its reply (see Fault)."""
        fault = Fault(
            method.upper(), re.compile(path_regex), status, times, reason, message, after=after
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def fire(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.exhausted:
                    continue
                if fault.method in ("*", method) and fault.path.search(path):
                    fault.hits += 1
                    return fault
        return None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the double saw it; `body` is parsed JSON (None if absent)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    status: int
    verb: str = ""
    resource: str = ""  # plural[/subresource]
    group: str = ""
    namespace: str = ""
    name: str = ""

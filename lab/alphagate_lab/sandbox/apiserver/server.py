"""The API server double served over HTTP on 127.0.0.1: the store, with RBAC, scripted
faults, a request log, a "kubelet" hook that moves Deployment rollouts along, an Argo hook
that promotes Argo Rollouts, and a KServe hook that renders InferenceServices (raw mode)."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Any

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.apiserver.access import CONTROLLER_TOKEN, Faults, Rbac, RecordedRequest
from alphagate_lab.sandbox.apiserver.argo_rollouts import ArgoRolloutCompleter
from alphagate_lab.sandbox.apiserver.deployments import Kubelet, RolloutCompleter
from alphagate_lab.sandbox.apiserver.handler import make_handler
from alphagate_lab.sandbox.apiserver.kserve import KServeReconciler
from alphagate_lab.sandbox.apiserver.resources import (
    DEFAULT_TYPES,
    HOST,
    ApiError,
    ResourceType,
    json_copy,
)
from alphagate_lab.sandbox.apiserver.reviews import ACCESS_REVIEWS, TOKEN_REVIEWS, Users
from alphagate_lab.sandbox.apiserver.store import Store


class _Httpd(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-answer (a controller stopped, a watch cut) is no error of the
        double's: only other failures are printed."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ApiServer(Store):
    """The API server double. Use as a context manager or call start()/stop().

    Test helpers that bypass HTTP (and RBAC/faults) but keep resourceVersion and watch
    semantics: `put`, `get`, `delete`, `objects`, `set_deployment_status`, `complete_rollout`.
    """

    def __init__(
        self,
        *,
        types: Iterable[ResourceType] = DEFAULT_TYPES,
        rbac: Rbac | None = None,
        kubelet: Kubelet | str | None = "default",
        argo: Kubelet | str | None = "default",
        kserve: KServeReconciler | str | None = "default",
        watch_history: int = 10_000,
        default_watch_timeout: float = 300.0,
        port: int = 0,
    ) -> None:
        super().__init__(
            types=(*types, TOKEN_REVIEWS, ACCESS_REVIEWS),
            watch_history=watch_history,
            default_watch_timeout=default_watch_timeout,
        )
        self.rbac = rbac if rbac is not None else Rbac.allow_all()  # the controller's
        self.people_rbac = Rbac.allow_all()  # requests without the controller's token
        self.faults = Faults()
        self.users = Users()  # people by bearer token, for TokenReview and SubjectAccessReview
        self.kubelet: Kubelet | None = (
            RolloutCompleter() if kubelet == "default" else kubelet  # type: ignore[assignment]
        )
        # plays the Argo Rollouts controller for Rollouts whose template changed
        self.argo: Kubelet | None = (
            ArgoRolloutCompleter() if argo == "default" else argo  # type: ignore[assignment]
        )
        # plays KServe's InferenceService controller (raw deployment mode)
        self.kserve: KServeReconciler | None = (
            KServeReconciler() if kserve == "default" else kserve  # type: ignore[assignment]
        )
        self._port = port
        self._requests: list[RecordedRequest] = []
        self._req_lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> ApiServer:
        if self._httpd is not None:
            return self
        try:
            httpd = _Httpd((HOST, self._port), make_handler(self))
        except OSError as exc:
            raise SandboxError(
                f"API server double: cannot bind {HOST}:{self._port}: {exc}"
            ) from exc
        httpd.daemon_threads = True
        self._httpd = httpd
        self._stopping.clear()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            daemon=True,
            name=f"apiserver:{httpd.server_port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        for timer in list(self._timers):
            timer.cancel()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise SandboxError("API server double is not running")
        return int(self._httpd.server_port)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def configuration(self, *, as_controller: bool = True) -> Any:
        """A `kubernetes.client.Configuration` pointing at this double (no TLS). As the
        controller it carries the ServiceAccount's token and is held to `rbac`; otherwise it
        is a person's, held to `people_rbac`."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = 1
        if as_controller:
            cfg.api_key = {"authorization": CONTROLLER_TOKEN}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        return cfg

    def call_later(self, delay: float, fn: Callable[[], object]) -> None:
        """Run `fn` after `delay` seconds unless the server stops first."""

        def run() -> None:
            if not self._stopping.is_set():
                with contextlib.suppress(ApiError):  # the object went away meanwhile
                    fn()

        timer = threading.Timer(delay, run)
        timer.daemon = True
        self._timers = [t for t in self._timers if t.is_alive()]
        self._timers.append(timer)
        timer.start()

    # ------------------------------------------------------------ request log

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._req_lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._req_lock:
            self._requests.clear()

    def requests_matching(
        self,
        *,
        method: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
        name: str | None = None,
    ) -> list[RecordedRequest]:
        """Requests filtered by exact method/verb/resource/name and a regex on the path."""
        rx = re.compile(path) if path else None
        return [
            r
            for r in self.requests
            if (method is None or r.method == method.upper())
            and (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (name is None or r.name == name)
            and (rx is None or rx.search(r.path))
        ]

    def _record(self, req: RecordedRequest) -> None:
        with self._req_lock:
            self._requests.append(req)

    def _after_write(
        self, rtype: ResourceType, old: dict[str, Any] | None, new: dict[str, Any]
    ) -> None:
        """Call the kubelet hook when a Deployment's pod template (or the whole object) is new,
        the Argo hook when a Rollout's is, and KServe's on any change of an InferenceService or
        a Deployment (it renders back the ones it owns)."""
        hook = {"deployments.apps": self.kubelet, "rollouts.argoproj.io": self.argo}.get(rtype.key)
        old_gen = None if old is None else old["metadata"].get("generation")
        if hook is not None and (old is None or old_gen != new["metadata"].get("generation")):
            hook(self, json_copy(new))
        if self.kserve is not None and rtype.key in KSERVE_WATCHES and _changed(old, new):
            self.kserve(self, json_copy(new))

    def _after_status(self, rtype: ResourceType, new: dict[str, Any]) -> None:
        """KServe copies its predictor Deployment's status into the InferenceService's."""
        if self.kserve is not None and rtype.key == "deployments.apps":
            self.kserve.status_changed(self, json_copy(new))


KSERVE_WATCHES = frozenset(("deployments.apps", "inferenceservices.serving.kserve.io"))


def _changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Anything but the status and the resourceVersion differs."""
    if old is None:
        return True

    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}

    return strip(old) != strip(new)

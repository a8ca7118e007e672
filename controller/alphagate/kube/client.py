"""Connecting to the Kubernetes API, and turning its failures into our error tree.

One place decides where the API is (an explicit URL, a kubeconfig, or the in-cluster service
account) and builds a private `ApiClient` — never the library's global default, so tests can run
several controllers against several API servers in one process. Every request it sends has a
deadline (`REQUEST_TIMEOUT_SECONDS` unless the caller gives one, as the watch does): an API
server that accepts a connection and never answers costs one failed request, never a stuck
control loop. Every request is also paid from the controller's API budget (`kube.apibudget`)
when the client was given one. `call()` wraps every request, its failures as our KubeErrors
naming what was being done and the server's message.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import urllib3.exceptions
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.config.config_exception import ConfigException

from alphagate.errors import ConflictError, ForbiddenError, KubeError, NotFoundError
from alphagate.kube.apibudget import ApiBudget, Charged

T = TypeVar("T")

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
REQUEST_TIMEOUT_SECONDS = 10.0
"""The deadline of one API request (connect, send, answer) when its caller sets none."""


class _TimedRest(rest.RESTClientObject):  # type: ignore[misc]  # Any: kubernetes is not followed
    """The client's REST layer with a default deadline on every request, each paid from the
    API budget when there is one (`ApiBudgetError` before anything is sent when it is spent)."""

    def __init__(
        self, configuration: client.Configuration, timeout: float, budget: ApiBudget | None
    ) -> None:
        super().__init__(configuration)
        self.timeout = timeout
        self.budget = budget

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        if self.budget is not None:
            self.budget.spend(f"{method} {url.split('?', 1)[0]}")
        return super().request(
            method,
            url,
            headers=headers,
            body=body,
            post_params=post_params,
            _request_timeout=self.timeout if _request_timeout is None else _request_timeout,
        )


def api_client(
    cfg: client.Configuration,
    *,
    timeout: float = REQUEST_TIMEOUT_SECONDS,
    budget: ApiBudget | None = None,
) -> client.ApiClient:
    api = client.ApiClient(cfg)
    api.rest_client.close()
    api.rest_client = _TimedRest(cfg, timeout, budget)
    return api


def load_configuration(
    *,
    server: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    in_cluster: bool | None = None,
    retries: int = 1,
) -> client.Configuration:
    """Where the API is, in order: `server` (a URL; no auth, for the sandbox), an explicit or
    `$KUBECONFIG`/`~/.kube/config` kubeconfig, then the in-cluster service account.

    `in_cluster=True` forces the service account; False forbids it.
    """
    cfg = client.Configuration()
    if server:
        cfg.host = server.rstrip("/")
    elif in_cluster:
        _in_cluster(cfg)
    else:
        path = kubeconfig or _default_kubeconfig()
        if path:
            try:
                config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
            except (ConfigException, OSError, ValueError) as exc:
                raise KubeError(f"kubeconfig {path}: {exc}") from exc
        elif in_cluster is None and os.environ.get(IN_CLUSTER_ENV):
            _in_cluster(cfg)
        else:
            raise KubeError(
                "no Kubernetes API configured: pass --server URL or --kubeconfig FILE, set "
                "KUBECONFIG, or run in a cluster"
            )
    cfg.retries = retries
    return cfg


def _in_cluster(cfg: client.Configuration) -> None:
    try:
        loader = config.incluster_config.InClusterConfigLoader(
            token_filename=config.incluster_config.SERVICE_TOKEN_FILENAME,
            cert_filename=config.incluster_config.SERVICE_CERT_FILENAME,
        )
        loader.load_and_set(cfg)
    except ConfigException as exc:
        raise KubeError(f"in-cluster configuration: {exc}") from exc


def _default_kubeconfig() -> str | None:
    """`$KUBECONFIG` as kubectl reads it: every existing file of the list, merged (the
    client merges a path list; the first file that sets a value wins), else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    parts = [str(Path(p).expanduser()) for p in env.split(os.pathsep) if p]
    existing = [p for p in parts if Path(p).is_file()]
    if existing:
        return os.pathsep.join(existing)
    home = Path("~/.kube/config").expanduser()
    return str(home) if home.is_file() else None


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_namespace(
    *, server: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> str:
    """The namespace kubectl would use: the kubeconfig context's `namespace` (the named
    context, else the current one), in a pod its own namespace, else "default"."""
    if not server:
        path = kubeconfig or _default_kubeconfig()
        if path:
            try:
                contexts, active = config.list_kube_config_contexts(config_file=path)
            except (ConfigException, OSError, ValueError) as exc:
                raise KubeError(f"kubeconfig {path}: {exc}") from exc
            chosen = next((c for c in contexts or [] if c.get("name") == context), None)
            chosen = chosen if context else active
            namespace = ((chosen or {}).get("context") or {}).get("namespace")
            if namespace:
                return str(namespace)
        elif os.environ.get(IN_CLUSTER_ENV) and Path(SERVICE_ACCOUNT_NAMESPACE).is_file():
            return Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or "default"
    return "default"


@dataclass(frozen=True, slots=True)
class Kube:
    api_client: client.ApiClient
    apps: client.AppsV1Api
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    coordination: client.CoordinationV1Api
    budget: ApiBudget | None = None

    @classmethod
    def from_configuration(
        cls,
        cfg: client.Configuration,
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        budget: ApiBudget | None = None,
    ) -> Kube:
        api = api_client(cfg, timeout=timeout, budget=budget)
        return cls(
            api_client=api,
            apps=client.AppsV1Api(api),
            core=client.CoreV1Api(api),
            custom=client.CustomObjectsApi(api),
            coordination=client.CoordinationV1Api(api),
            budget=budget,
        )

    def charged_core(self, namespace: str, name: str) -> Any:
        """The core API with every call charged to one canary's budget (its pod discovery)."""
        if self.budget is None:
            return self.core
        return Charged(self.core, self.budget, namespace, name)

    @classmethod
    def connect(
        cls,
        *,
        server: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool | None = None,
    ) -> Kube:
        return cls.from_configuration(
            load_configuration(
                server=server, kubeconfig=kubeconfig, context=context, in_cluster=in_cluster
            )
        )

    def close(self) -> None:
        self.api_client.close()


def status_message(exc: client.ApiException) -> tuple[str, str]:
    reason, message = str(exc.reason or ""), ""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError:
            message = body[:300]
        else:
            if isinstance(parsed, dict):
                reason = str(parsed.get("reason") or reason)
                message = str(parsed.get("message") or "")
    return reason, message


def translate(exc: BaseException, what: str) -> KubeError:
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, client.ApiException):
        status = int(exc.status or 0)
        reason, message = status_message(exc)
        text = f"{what}: HTTP {status} {reason}" + (f": {message}" if message else "")
        if status == 403:
            return ForbiddenError(text, status=status, reason=reason)
        if status == 404:
            return NotFoundError(text, status=status, reason=reason)
        if status == 409:
            return ConflictError(text, status=status, reason=reason)
        return KubeError(text, status=status, reason=reason)
    return KubeError(f"{what}: {type(exc).__name__}: {exc}", status=0, reason="Unreachable")


# What one request through the kubernetes client can raise besides a bug: the API's answer
# (ApiException), the transport (urllib3's errors, sockets, a cut-off HTTP response), and a
# body the client cannot decode or a model it refuses (ValueError).
API_ERRORS: Final = (
    client.ApiException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
    ValueError,
)


def call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except KubeError:
        raise
    except API_ERRORS as exc:
        raise translate(exc, what) from exc


def discard(resp: Any) -> None:
    """Read and drop an answer the caller has no use for (a write whose result it ignores,
    asked for with ``_preload_content=False``): its connection goes back to the pool clean,
    and the client never decodes the body into its model (a few hundred microseconds a
    Lease or an Event). A non-2xx answer was raised as `ApiException` before this."""
    try:
        resp.data  # noqa: B018 - reading the body drains the connection
    finally:
        resp.release_conn()


def to_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    sanitized = client.ApiClient().sanitize_for_serialization(obj)
    return sanitized if isinstance(sanitized, dict) else {}

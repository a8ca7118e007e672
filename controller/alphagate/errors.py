"""alphagate's own exceptions: one small tree, so callers catch what they can handle.

    AlphagateError                  anything alphagate raises on purpose
    ├── PolicyError                 a SpeculativeCanary (file or object) is invalid
    ├── ConfigError                 the controller's own configuration (admin-owned) is invalid
    ├── ScenarioError               a simulator scenario file is invalid
    ├── SourceError                 a metrics source failed; `kind` classifies it
    │   ├── ExpositionError         a /metrics page is malformed (names the line)
    │   ├── EndpointError           a policy names a Prometheus endpoint nobody configured
    │   ├── NamespaceError          a policy selects series of another namespace
    │   └── BudgetError             a read spent one of its canary's budgets; `budget` says which
    ├── KubeError                   the Kubernetes API refused or failed; `status` is the HTTP code
    │   ├── ConflictError           409 after bounded retries
    │   ├── ForbiddenError          403: RBAC is missing a permission
    │   ├── NotFoundError           404: the object is gone
    │   ├── RecordChangedError      the Deployment's record moved since the decision was made
    │   ├── NotLeaderError          this replica lost leadership (or the shard) mid-evaluation
    │   ├── ClaimedError            the Deployment belongs to another SpeculativeCanary
    │   ├── OwnerConflictError      a declared owner (Argo CD, Flux ...) changed the flag back
    │   └── ApiBudgetError          a canary's (or namespace's) API request budget is spent
    └── SandboxError                the local demo sandbox could not start a part (port in use ...)

Causes are chained (`raise ... from exc`). Messages name what is wrong and where.
Bad *data* is not an exception in the core: it becomes an Inconclusive or Error verdict.
"""

from __future__ import annotations

import re
from enum import StrEnum

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")
_AUTH_HEADER = re.compile(r"(?i)\b(authorization\W{0,3}\s*[:=]\s*)[^\n,;'\"}]*")
_KEYED = re.compile(r"(?i)\b(password|passwd|secret|token)(\W{0,3}\s*[:=]\s*)(\"?)[^\s,;'\"}]+")
_SCHEME = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str) -> str:
    """`text` without credentials: URL userinfo (``user:pass@``) and the value after words
    such as ``Authorization``, ``Bearer`` or ``password``. Applied to every alphagate error
    message, so status, Events and logs built from errors never carry a secret."""
    if "@" in text:
        text = _USERINFO.sub(r"\1***@", text)
    text = _AUTH_HEADER.sub(r"\1***", text)
    text = _KEYED.sub(r"\1\2\3***", text)
    return _SCHEME.sub(r"\1\2***", text)


class AlphagateError(Exception):
    """Base of every error alphagate raises on purpose. Its message is redacted."""

    def __init__(self, message: str = "", *args: object) -> None:
        super().__init__(redact(str(message)), *args)


class PolicyError(AlphagateError):
    """A policy is invalid. `where` is the file (or object); `path` the first bad field.

    The message itself names every offending field path, so it stands alone."""

    def __init__(self, message: str, *, where: str = "", path: str = "") -> None:
        self.where = where
        self.path = path
        self.reason = message
        super().__init__(f"{where}: {message}" if where else message)


class ConfigError(AlphagateError):
    """The controller's own configuration (flags, `--config` file) is invalid; names where."""

    def __init__(self, message: str, *, where: str = "") -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class ScenarioError(AlphagateError):
    """A simulator scenario is invalid; the message names file, field and reason."""


class SourceErrorKind(StrEnum):
    """Why a read of metrics failed; exported as a metric label, so keep values stable."""

    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    HTTP_STATUS = "http_status"
    BAD_JSON = "bad_json"
    QUERY_ERROR = "query_error"
    EMPTY = "empty"
    NAN = "nan"
    PARTIAL = "partial"
    PARSE = "parse"
    TOO_LARGE = "too_large"
    POD_GONE = "pod_gone"
    # recorded rates (recording rules) that do not reach the window's end: rules behind,
    # stopped or not installed; the raw counters may be fine
    STALE = "stale"
    # the read spent one of its canary's own budgets (time, memory, buckets...): BudgetKind
    BUDGET = "budget"


class BudgetKind(StrEnum):
    """Which of a canary's own budgets a read spent. Many tenants share one controller
    (docs/security.md): what one canary can make it spend is bounded per canary, and spending it
    makes only that canary's read an Error. A metric label, so keep values stable."""

    # the canary's read deadline in a cycle (its pods' GETs, its Prometheus queries)
    READ_TIME = "read_time"
    # the read deadline passed while the canary's own pages waited for or were in parsing
    PARSE_TIME = "parse_time"
    # the read deadline passed while the canary's GETs waited for its namespace's share of the
    # pages the fetch loop receives at once (sources/getshare.py)
    RECEIVE = "receive"
    # the canary's share of the scrape memory budget (pages in flight, pages and increments kept)
    MEMORY = "memory"
    # a histogram with more `le` buckets than the controller keeps
    BUCKETS = "buckets"
    # a page or an answer with more series than the controller keeps
    SERIES = "series"
    # a Prometheus answer with more points or labels than the controller decodes
    ANSWER = "answer"
    # Prometheus refused (or twice gave up on) the pool's own query for its cost: held back
    # before it is asked again (sources/promhold.py)
    SERVER_COST = "server_cost"
    # the canary's or its namespace's Prometheus query budget, a whole burst past its rate
    # (sources/querybudget.py)
    QUERIES = "queries"


class SourceError(AlphagateError):
    """A metrics source failed. `kind` says how; `target` says which URL, pod or query."""

    def __init__(self, kind: SourceErrorKind, message: str, *, target: str = "") -> None:
        self.kind = kind
        self.target = target = redact(target)
        super().__init__(f"{kind}: {target}: {message}" if target else f"{kind}: {message}")


class ExpositionError(SourceError):
    """A /metrics page is malformed; `line` is 1-based, 0 when unknown."""

    def __init__(self, message: str, *, line: int = 0, target: str = "") -> None:
        self.line = line
        where = f"line {line}: {message}" if line else message
        super().__init__(SourceErrorKind.PARSE, where, target=target)


class EndpointError(SourceError):
    """A policy names a Prometheus endpoint the admin did not configure: the spec is wrong
    (SpecValid=False), not the source; no request is sent."""

    def __init__(self, message: str, *, target: str = "") -> None:
        super().__init__(SourceErrorKind.UNREACHABLE, message, target=target)


class NamespaceError(SourceError):
    """A policy selects series of another namespace than its own (a label matcher on the
    namespace label): the spec is wrong (SpecValid=False), no query is sent."""

    def __init__(self, message: str, *, target: str = "") -> None:
        super().__init__(SourceErrorKind.QUERY_ERROR, message, target=target)


class BudgetError(SourceError):
    """A read spent one of its canary's own budgets (`budget`): that canary's pod, pool or read
    fails, typed, and no other canary's."""

    def __init__(self, budget: BudgetKind, message: str, *, target: str = "") -> None:
        self.budget = budget
        super().__init__(SourceErrorKind.BUDGET, f"{budget} budget: {message}", target=target)


class KubeError(AlphagateError):
    """The Kubernetes API failed or refused; `status` is the HTTP status (0 if none)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)


class ConflictError(KubeError):
    """409 Conflict persisted through the bounded retries."""


class ForbiddenError(KubeError):
    """403 Forbidden: the controller's RBAC lacks a permission."""


class NotFoundError(KubeError):
    """404 Not Found: the object does not exist (any more)."""


class RecordChangedError(KubeError):
    """The Deployment's record (its `alphagate.io/record` generation) is newer than the one a
    decision was made from: someone (a lost reply of ours, another replica) wrote it since.
    Nothing is patched; the next evaluation resumes from the record."""


class NotLeaderError(KubeError):
    """This replica stopped being the leader (or the owner of the canary's shard) between its
    decision and the patch: nothing is patched and no status written; the new owner decides."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="NotLeader")


class ClaimedError(KubeError):
    """The Deployment is claimed by another SpeculativeCanary (`alphagate.io/owner`): one canary
    per Deployment, or two would flip it back and forth."""


class ApiBudgetError(KubeError):
    """A request refused before it was sent: the canary (or its namespace) it was charged to
    spent its Kubernetes API budget (`kube.apibudget`); `scope` names which budget."""

    def __init__(self, message: str, *, scope: str) -> None:
        self.scope = scope
        super().__init__(message, status=429, reason=f"{scope.capitalize()}ApiBudgetExceeded")


class SandboxError(AlphagateError):
    """A part of the local sandbox (demo, simulator, kubelet runner) could not start."""


class OwnerConflictError(KubeError):
    """A declared owner (Argo CD, Flux, Helm, an operator) changed the flag alphagate set; the
    actuator yields instead of patching it back (`kube.ownership`)."""

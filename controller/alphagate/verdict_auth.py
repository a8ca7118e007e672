"""Who may read the verdict API: callers authenticated by the API server, per namespace.

`TokenReviewAuth` (the default of `alphagate run`): the caller's bearer token is reviewed by a
TokenReview, and what it may read by a SubjectAccessReview (`get` or `list` on
speculativecanaries.alphagate.io in that namespace), as the API server's own RBAC says; answers
are cached (60 s, a refused token 10 s, keyed by the token's SHA-256: the token itself is never
kept) and reviews are rate-limited (10 a second, burst 50: past that a caller is answered 429),
so neither a flood of requests nor of made-up tokens turns into one API call each.
`OpenAuth` is the admin's switch (`--verdict-api-auth none`): anyone who reaches the port reads
every watched namespace's verdicts and evidence (Flagger's webhooks send no credentials; the
NetworkPolicy is then the only gate).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from kubernetes import client

from alphagate.config import GROUP, PLURAL
from alphagate.kube.apibudget import Rate, TokenBucket
from alphagate.kube.client import Kube, call

TOKEN_SECONDS: Final = 60.0
REFUSED_SECONDS: Final = 10.0
ACCESS_SECONDS: Final = 60.0
MAX_CACHED: Final = 4096
REVIEWS: Final = Rate(10.0, 50)


@dataclass(frozen=True, slots=True)
class Caller:
    user: str
    groups: tuple[str, ...] = ()


class TooManyReviews(Exception):
    """The review budget is spent: the caller is answered 429, the API server is spared."""


class Auth(Protocol):
    """Authentication and per-namespace authorization of the verdict API's callers."""

    def who(self, token: str | None) -> Caller | None:
        """The caller a bearer token belongs to (None: no token, or not a valid one)."""
        ...

    def may(self, caller: Caller, verb: str, namespace: str) -> bool:
        """Whether the caller may `verb` (get, list) SpeculativeCanaries in `namespace`."""
        ...


class OpenAuth:
    """No authentication: every caller reads every watched namespace (the admin's switch)."""

    def who(self, token: str | None) -> Caller | None:
        return Caller("system:anonymous")

    def may(self, caller: Caller, verb: str, namespace: str) -> bool:
        return True


class _Ttl:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._items: OrderedDict[object, tuple[float, object]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: object) -> tuple[bool, object]:
        with self._lock:
            hit = self._items.get(key)
            if hit is None or hit[0] < self._clock():
                return False, None
            return True, hit[1]

    def put(self, key: object, value: object, seconds: float) -> None:
        with self._lock:
            self._items[key] = (self._clock() + seconds, value)
            self._items.move_to_end(key)
            while len(self._items) > MAX_CACHED:
                self._items.popitem(last=False)


class TokenReviewAuth:
    def __init__(self, kube: Kube, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._authn = client.AuthenticationV1Api(kube.api_client)
        self._authz = client.AuthorizationV1Api(kube.api_client)
        self._tokens = _Ttl(clock)
        self._access = _Ttl(clock)
        self._clock = clock
        self._reviews = TokenBucket(REVIEWS, clock())
        self._lock = threading.Lock()

    def _spend(self) -> None:
        with self._lock:
            if not self._reviews.take(self._clock(), floor=0.0):
                raise TooManyReviews(f"more than {REVIEWS} token and access reviews")

    def who(self, token: str | None) -> Caller | None:
        if not token:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        hit, cached = self._tokens.get(key)
        if hit:
            return cached if isinstance(cached, Caller) else None
        self._spend()
        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        got = call("create tokenreviews", lambda: self._authn.create_token_review(review))
        status = got.status
        caller = None
        if status is not None and status.authenticated and status.user is not None:
            caller = Caller(str(status.user.username), tuple(status.user.groups or ()))
        self._tokens.put(key, caller, TOKEN_SECONDS if caller else REFUSED_SECONDS)
        return caller

    def may(self, caller: Caller, verb: str, namespace: str) -> bool:
        key = (caller, verb, namespace)
        hit, cached = self._access.get(key)
        if hit:
            return bool(cached)
        self._spend()
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=caller.user,
                groups=list(caller.groups),
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, group=GROUP, resource=PLURAL, namespace=namespace
                ),
            )
        )
        got = call(
            "create subjectaccessreviews",
            lambda: self._authz.create_subject_access_review(review),
        )
        allowed = bool(got.status is not None and got.status.allowed)
        self._access.put(key, allowed, ACCESS_SECONDS)
        return allowed


__all__ = ["Auth", "Caller", "OpenAuth", "TokenReviewAuth", "TooManyReviews"]

"""The watch loop: a list+watch cache of SpeculativeCanaries and the schedule that evaluates
each on its own interval.

A list+watch thread keeps the cache and wakes the schedule on changes (a new generation or a
manual command is evaluated at once); the schedule evaluates every cached resource when its
interval has passed, only while this replica leads: the canaries due together are evaluated
in one `reconcile_many` (Prometheus queries batched, every canary's pod scrapes in one wave of
GETs), any other one at a time.
What one evaluation does is its `evaluator`'s: the `Reconciler` (`shell.reconciler`), which
holds this loop as `loop` and is handed each canary due.

The API budget (`kube.apibudget`, when the client has one): a canary whose budget is in debt
is not due until it is paid back; the others are evaluated on time.

Sharding: a canary first seen here waits until one interval after its last evaluation by any
replica (`resume_schedule`), and `take_over` resumes it from the cluster.

The schedule reads the time (`clock`) and waits (`wait`) through the clock seam
(`alphagate.clock`), so tests run it on virtual time; the watch's error backoff stays on the
real clock (the watch itself blocks on the API server's stream, which no virtual clock drives).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import watch

from alphagate import clock as clockmod
from alphagate.config import GROUP, PLURAL, VERSION, SourceKind
from alphagate.errors import KubeError
from alphagate.kube.apibudget import ApiBudget
from alphagate.kube.client import Kube, call
from alphagate.kube.coordination import guarded
from alphagate.kube.status.commands import ANN_COMMAND_ID
from alphagate.kube.status.fields import parse_time
from alphagate.logs import get as get_logger
from alphagate.shell.turns import in_turn
from alphagate.sources import querybudget


class Beat(Protocol):
    """The control loop's liveness signal (`shell.server.Health` is the real one)."""

    def beat(self) -> None: ...


class Evaluated(Protocol):
    """What the schedule needs to know of one evaluation."""

    spec_invalid: bool
    now: float  # when it started: the next is due one interval after


class Evaluator(Protocol):
    """What one evaluation is, for the schedule (the `Reconciler`), and what to drop when a
    resource leaves."""

    def reconcile(self, namespace: str, name: str, *, now: float | None = None) -> Evaluated:
        """Evaluate one resource once and act."""
        ...

    def start_batch(self, keys: Sequence[tuple[str, str]]) -> None:
        """Start evaluating resources together; `collect` hands each out once evaluated."""
        ...

    def collect(self) -> Sequence[tuple[tuple[str, str], Evaluated]]:
        """The resources evaluated since the last call (never waits)."""
        ...

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone."""
        ...

    def hand_over(self, keys: Collection[tuple[str, str]]) -> None:
        """Other replicas own these canaries now."""
        ...

    def close(self) -> None:
        """The loops stopped: release what evaluations hold."""
        ...


@dataclass(slots=True)
class _Entry:
    obj: dict[str, Any]
    next_due: float = 0.0
    generation: int = 0
    command_id: str = ""


class WatchLoop:
    """The cache of resources in scope and the loops that keep it and evaluate from it, with
    `evaluator` (the `Reconciler`); without one, a cache that evaluates nothing."""

    def __init__(
        self,
        kube: Kube,
        *,
        evaluator: Evaluator | None = None,
        namespace: str | None,
        label_selector: str | None,
        clock: Callable[[], float],
        watch_timeout_seconds: float,
        health: Beat | None,
        owns: Callable[[str, str], bool] | None,
        wait: clockmod.Wait = clockmod.wait,
    ) -> None:
        self.kube = kube
        self.evaluator = evaluator
        self.namespace = namespace
        self.label_selector = label_selector
        self.clock = clock
        self.wait = wait
        self.watch_timeout_seconds = watch_timeout_seconds
        self.health = health
        # Sharding: is this canary (namespace, name) this replica's to evaluate and act on now?
        # Checked when picking what is due and again right before every Deployment write.
        self.owns = owns or (lambda namespace, name: True)
        # Sharding: a canary first seen here waits until one interval after its last
        # evaluation (another replica may have made it moments ago).
        self.resume_schedule = owns is not None
        self._cache: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()
        self._kick = threading.Event()
        self._watch: Any = None
        self._in_flight: set[tuple[str, str]] = set()  # started, not evaluated yet
        # work other threads hand to this one, run before its next round: a shard change
        # reads and forgets hundreds of canaries, and the lease thread must not wait on that
        self._deferred: list[Callable[[], None]] = []
        # the first Prometheus query budget deferral of each canary since its last evaluation
        self.query_deferrals: dict[tuple[str, str], querybudget.QueryDeferral] = {}
        self.synced = threading.Event()
        self.leading = threading.Event()
        self.leading.set()  # `alphagate run` clears it until the Lease is won
        self._log = get_logger("reconciler")

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop it from the cache, and tell the evaluator."""
        with self._lock:
            self._cache.pop((namespace, name), None)
        self.query_deferrals.pop((namespace, name), None)
        querybudget.current().forget(namespace, name)
        if self.evaluator is not None:
            self.evaluator.forget(namespace, name)

    # ------------------------------------------------------------ watching and scheduling

    def _list_fn(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if self.namespace:
            return self.kube.custom.list_namespaced_custom_object, (
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
            )
        return self.kube.custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL)

    def relist(self) -> int:
        """List every resource in scope into the cache; returns the list's resourceVersion."""
        fn, args = self._list_fn()
        kwargs: dict[str, Any] = {}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        listing = call(f"list {PLURAL}.{GROUP}", lambda: fn(*args, **kwargs))
        items = listing.get("items", []) if isinstance(listing, dict) else []
        seen = set()
        for item in items:
            self._observe_object("ADDED", item)
            meta = item.get("metadata") or {}
            seen.add((meta.get("namespace", ""), meta.get("name", "")))
        with self._lock:
            gone = [k for k in self._cache if k not in seen]
        for ns, name in gone:
            self.forget(ns, name)
        rv = (
            (listing.get("metadata") or {}).get("resourceVersion", "0")
            if isinstance(listing, dict)
            else "0"
        )
        self.synced.set()
        return int(rv or 0)

    def _observe_object(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if kind == "DELETED":
            self.forget(*key)
            self._kick.set()
            return
        generation = int(meta.get("generation") or 0)
        annotations = meta.get("annotations") or {}
        command_id = str(annotations.get(ANN_COMMAND_ID, ""))
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                last = _last_evaluated(obj) if self.resume_schedule else None
                due = 0.0 if last is None else last + _interval(obj)
                self._cache[key] = _Entry(obj, due, generation, command_id)
                urgent = True
            else:
                urgent = generation != entry.generation or command_id != entry.command_id
                entry.obj, entry.generation, entry.command_id = obj, generation, command_id
                if urgent:
                    entry.next_due = 0.0
                elif self.resume_schedule:  # another replica may have evaluated it just now
                    last = _last_evaluated(obj)
                    if last is not None:
                        entry.next_due = max(entry.next_due, last + _interval(obj))
        if urgent:
            self._kick.set()

    def watch_loop(self, stop: threading.Event) -> None:
        """List, then watch from the list's resourceVersion; when the server ends a watch at
        its timeout, watch again from the last version seen, as an informer does. Relist only
        on 410 or errors: a relist re-reads every canary, and with hundreds that is most of a
        replica's API traffic."""
        backoff = 0.5
        rv: str | None = None
        while not stop.is_set():
            try:
                if rv is None:
                    rv = str(self.relist())
                    backoff = 0.5
                fn, args = self._list_fn()
                kwargs: dict[str, Any] = {
                    "resource_version": rv,
                    "timeout_seconds": max(1, int(self.watch_timeout_seconds)),
                    "_request_timeout": self.watch_timeout_seconds + 10,
                    # a quiet resource's version still moves on: resuming from it stays valid
                    "allow_watch_bookmarks": True,
                }
                if self.label_selector:
                    kwargs["label_selector"] = self.label_selector
                w = watch.Watch()
                self._watch = w
                if stop.is_set():
                    break
                for ev in w.stream(fn, *args, **kwargs):
                    if stop.is_set():
                        w.stop()
                        break
                    obj = ev.get("raw_object") or ev.get("object")
                    if isinstance(obj, dict) and ev.get("type") != "BOOKMARK":
                        self._observe_object(str(ev.get("type")), obj)
                # the client tracks the newest version among the events (bookmarks included)
                rv = str(w.resource_version or rv)
            except Exception as exc:  # noqa: BLE001 - last resort: the watch loop must survive anything
                # (KubeError from the list, ApiException or urllib3's errors from the stream,
                # a 410 for a version too old, a body it cannot decode): relist after a pause
                rv = None
                if stop.is_set():
                    break
                self._log.warning(
                    "watch_failed", error=str(exc)[:300], error_type=type(exc).__name__
                )
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def due(self, now: float) -> list[tuple[str, str]]:
        """The canaries to evaluate now, namespaces in turn and longest due first inside one:
        owned, due, and admitted by the API budget (one in debt is deferred, alone, until its
        budget is paid back)."""
        with self._lock:
            due = sorted((e.next_due, k) for k, e in self._cache.items() if e.next_due <= now)
        keys = in_turn(k for _, k in due if self.owns(*k))  # namespaces in turn (shell.turns)
        keys = self._within_query_budget(keys, now)
        budget: ApiBudget | None = getattr(self.kube, "budget", None)  # a stand-in may have none
        if budget is None or not keys:
            return keys
        admitted, deferred = budget.admit(keys)
        with self._lock:
            for key, deferral in deferred.items():
                entry = self._cache.get(key)
                if entry is not None:
                    entry.next_due = now + max(deferral.retry_in, 0.01)
        return admitted

    def _within_query_budget(
        self, keys: list[tuple[str, str]], now: float
    ) -> list[tuple[str, str]]:
        """`keys` but those whose Prometheus query budget (or their namespace's) is in debt:
        each waits, alone, until it refills (sources/querybudget.py)."""
        admitted = []
        for key in keys:
            deferral = querybudget.current().deferral(*key)
            if deferral is None:
                admitted.append(key)
                continue
            self.query_deferrals.setdefault(key, deferral)  # told by its next evaluation
            self._log.info(
                "prometheus_budget_deferred",
                namespace=key[0],
                name=key[1],
                message=deferral.message(),
            )
            with self._lock:
                entry = self._cache.get(key)
                if entry is not None:
                    entry.next_due = now + max(deferral.retry_in, 0.01)
        return admitted

    def cached_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The resource as the watch last saw it (status included), or None."""
        with self._lock:
            entry = self._cache.get((namespace, name))
        return None if entry is None else entry.obj

    def cached_objects(self) -> list[dict[str, Any]]:
        """Every resource in the cache as the watch last saw it."""
        with self._lock:
            return [e.obj for e in self._cache.values()]

    def cached(self) -> list[tuple[str, str]]:
        """Every resource in the cache, owned by this replica or not."""
        with self._lock:
            return list(self._cache)

    def take_over(self, keys: Sequence[tuple[str, str]]) -> None:
        """This replica owns these canaries now: resume each from the cluster (what this
        process remembers of an earlier ownership is stale), and evaluate it one interval
        after its last evaluation (by whichever replica), as the status records it. The
        evaluator forgets them all at once: forgetting scans every metric series, and a
        shard brings hundreds of canaries."""
        if self.evaluator is not None:
            self.evaluator.hand_over(keys)
        for namespace, name in keys:
            self._resume(namespace, name)
        self._kick.set()

    def _resume(self, namespace: str, name: str) -> None:
        """Schedule a taken-over canary from its status as written now (the watch may not
        have brought the last one yet)."""
        try:
            fresh = call(
                f"read {PLURAL}.{GROUP} {namespace}/{name}",
                lambda: self.kube.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                ),
            )
        except KubeError:
            fresh = None
        with self._lock:
            entry = self._cache.get((namespace, name))
            if entry is None:
                return
            obj = fresh if isinstance(fresh, dict) else entry.obj
            last = _last_evaluated(obj)
            entry.next_due = last + _interval(obj) if last is not None else 0.0

    def defer(self, work: Callable[[], None]) -> None:
        """Run `work` on the scheduling thread before its next round (in the order given)."""
        with self._lock:
            self._deferred.append(work)
        self._kick.set()

    def _run_deferred(self) -> None:
        with self._lock:
            work, self._deferred = self._deferred, []
        for fn in work:
            guarded(self._log, "deferred_work_failed", fn)

    def schedule_loop(self, stop: threading.Event, *, tick: float = 0.5) -> None:
        """Evaluate each cached resource when due (its interval after the last evaluation)."""
        evaluator = self.evaluator
        assert evaluator is not None, "a cache without an evaluator has nothing to schedule"
        while not stop.is_set():
            self._run_deferred()
            if self.health is not None:
                self.health.beat()
            if not self.leading.is_set() or not self.synced.is_set():
                self.wait(self._kick, tick)
                self._kick.clear()
                continue
            due = [k for k in self.due(self.clock()) if k not in self._in_flight]
            # Canaries read through Prometheus or pod scrapes are evaluated together, at one
            # `now`: queries batched, pods scraped side by side, each decided as its read
            # ends while the loop goes on (a canary's slow read holds no other). Others one
            # at a time.
            batched = [k for k in due if self._batchable(k)]
            done: list[tuple[tuple[str, str], Evaluated]] = []
            for ns, name in (k for k in due if k not in batched):
                if stop.is_set() or not self.leading.is_set():
                    break
                done.append(((ns, name), evaluator.reconcile(ns, name)))
            if batched and not stop.is_set() and self.leading.is_set():
                self._in_flight.update(batched)
                evaluator.start_batch(batched)
            collected = evaluator.collect()
            self._in_flight.difference_update(k for k, _ in collected)
            done += collected
            for (ns, name), out in done:
                interval = self._interval_of(ns, name)
                with self._lock:
                    entry = self._cache.get((ns, name))
                    if entry is not None:
                        # one interval after this evaluation started, not after the round
                        # that held it ended: 100 canaries evaluated one after another would
                        # otherwise each wait the round's length on top of their interval
                        entry.next_due = out.now + (
                            # an invalid spec waits for an edit; API trouble retries on time
                            interval if not out.spec_invalid else max(interval, 30.0)
                        )
            with self._lock:
                upcoming = [e.next_due for e in self._cache.values()]
            wait = (
                min([tick, *[max(0.0, d - self.clock()) for d in upcoming]]) if upcoming else tick
            )
            self.wait(self._kick, max(wait, 0.01))
            self._kick.clear()

    def _batchable(self, key: tuple[str, str]) -> bool:
        """Read through Prometheus or pod scrapes (as cached): worth observing with the others
        due (`sources.cycle.observe_each`)."""
        with self._lock:
            entry = self._cache.get(key)
        spec = (entry.obj.get("spec") if entry is not None else None) or {}
        source = spec.get("source") if isinstance(spec, dict) else None
        kinds = (SourceKind.PROMETHEUS.value, SourceKind.POD_SCRAPE.value)
        return isinstance(source, dict) and source.get("kind") in kinds

    def _interval_of(self, namespace: str, name: str) -> float:
        with self._lock:
            entry = self._cache.get((namespace, name))
        return 30.0 if entry is None else _interval(entry.obj)

    def run(self, stop: threading.Event) -> None:
        """Watch in a thread and evaluate in this one until `stop` is set."""
        watcher = threading.Thread(
            target=self.watch_loop, args=(stop,), daemon=True, name="alphagate-watch"
        )
        watcher.start()
        try:
            self.schedule_loop(stop)
        finally:
            stop.set()
            self._kick.set()
            current = self._watch
            if current is not None:
                with contextlib.suppress(OSError):
                    current.stop()  # shuts the streaming socket down: no wait for the timeout
            watcher.join(timeout=self.watch_timeout_seconds + 15)
            if self.evaluator is not None:
                self.evaluator.close()

    def wake(self) -> None:
        self._kick.set()


def _interval(obj: dict[str, Any]) -> float:
    """spec.timing.intervalSeconds of a raw resource (30 s when absent or bad)."""
    try:
        timing = ((obj.get("spec") or {}).get("timing")) or {}
        value = float(timing.get("intervalSeconds", 30.0))
        return value if value > 0 else 30.0
    except (TypeError, ValueError, AttributeError):
        return 30.0


def _last_evaluated(obj: dict[str, Any]) -> float | None:
    """When the canary was last evaluated, by any replica: status.lastEvaluated rounded up
    (it is kept to the second), None when absent or unreadable."""
    raw = (obj.get("status") or {}).get("lastEvaluated")
    at = parse_time(raw) if isinstance(raw, str) else None
    return None if at is None else math.floor(at) + 1.0

"""Real-time face of the simulator: every pod serves ``/metrics`` on its own 127.0.0.1 port.

Simulated time follows the wall clock times ``speed``; the fleet is advanced lazily, under
one lock, whenever a page is served or the owner calls :meth:`SimServer.sync`. Each pod's
HTTP server answers:

* ``GET /metrics``: vLLM's page in text format 0.0.4 (503 while the model loads);
* ``GET /health``: 200 when ready, 503 while loading (vLLM's health route);
* ``GET /sim/state``: the pod's labels, args, phase and true alpha, as JSON;
* ``POST /sim/args``: ``{"args": [...]}`` (new container args) or
  ``{"speculative_config": {...} | null}``; applied like a restart (counters reset, the model
  reloads for the pod's load time). Answers ``{"restarted": bool, "k": int}``.

Pods added later (a timeline scaling up, or a local kubelet calling :meth:`add_pod`) get
their own server; removed pods lose theirs. With ``file_sd`` set, a Prometheus file-SD
target list (labels ``pod``, ``namespace``, ``deployment``, ``role``, ``slice``) is rewritten
atomically whenever the set of pods changes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from alphagate.errors import AlphagateError, SandboxError
from alphagate_lab.sim.exposition import CONTENT_TYPE, render
from alphagate_lab.sim.fleet import Fleet, FleetEvent
from alphagate_lab.sim.pod import PodSnapshot, PodSpec

HOST = "127.0.0.1"
MAX_BODY = 1 << 20


class _PodHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, addr: tuple[str, int], sim: SimServer, pod: str) -> None:
        self.sim = sim
        self.pod_name = pod
        super().__init__(addr, _PodHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper that gave up mid-answer (short scrape timeout) is not an error."""
        exc = sys.exc_info()[1]
        if isinstance(exc, BrokenPipeError | ConnectionResetError):
            return
        super().handle_error(request, client_address)


class _PodHandler(BaseHTTPRequestHandler):
    server: _PodHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every second would flood the terminal; stay quiet."""

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, data: object) -> None:
        self._send(code, json.dumps(data).encode() + b"\n", "application/json")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        sim, name = self.server.sim, self.server.pod_name
        path = self.path.split("?", 1)[0]
        try:
            snap = sim.snapshot(name)
        except KeyError:
            self._send(404, b"pod is gone\n")
            return
        if path == "/metrics":
            if not snap.ready:
                self._send(503, b"model is loading\n")
            else:
                # Always 0.0.4 text, whatever the Accept header: see exposition.py.
                self._send(200, render(snap, created=sim.created), CONTENT_TYPE)
        elif path == "/health":
            self._send(200 if snap.ready else 503, b"" if snap.ready else b"loading\n")
        elif path == "/sim/state":
            self._json(200, sim.state(name))
        else:
            self._send(404, b"not found\n")

    def do_POST(self) -> None:
        sim, name = self.server.sim, self.server.pod_name
        if self.path.split("?", 1)[0] != "/sim/args":
            self._send(404, b"not found\n")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, b"body too large\n")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            if "args" in body:
                args = body["args"]
                if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                    raise ValueError("args must be a list of strings")
                restarted = sim.apply_args(name, args)
            elif "speculative_config" in body:
                restarted = sim.set_speculative_config(name, body["speculative_config"])
            else:
                raise ValueError('give "args" or "speculative_config"')
        except KeyError:
            self._send(404, b"pod is gone\n")
            return
        except (ValueError, AlphagateError) as exc:
            self._json(400, {"error": str(exc)})
            return
        self._json(200, {"restarted": restarted, "k": sim.fleet.pod(name).k})


class SimServer:
    """Serves a fleet's pods over HTTP in real time. Use as a context manager."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        speed: float = 1.0,
        port_base: int | None = None,
        file_sd: str | Path | None = None,
        created: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if speed <= 0:
            raise SandboxError(f"speed must be > 0, got {speed}")
        self.fleet = fleet
        self.speed = speed
        self.port_base = port_base
        self.file_sd = Path(file_sd) if file_sd is not None else None
        self.created = created
        self.lock = threading.RLock()
        self._clock = clock
        self._t0 = clock()
        self._sim0 = fleet.now
        self._servers: dict[str, _PodHTTPServer] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._next_port = port_base
        self._events: list[FleetEvent] = []
        self._started = False

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Bind every pod's port; raises SandboxError if a port is taken."""
        with self.lock:
            self._started = True
            try:
                self._reconcile()
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Stop every pod's server (idempotent)."""
        with self.lock:
            self._started = False
            names = list(self._servers)
        for name in names:
            self._stop_server(name, wait=True)

    def __enter__(self) -> SimServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- time -------------------------------------------------------------------------------
    def sim_now(self) -> float:
        return self._sim0 + (self._clock() - self._t0) * self.speed

    def _advance(self) -> None:
        self.fleet.advance_to(self.sim_now())
        self._reconcile()

    def sync(self) -> list[FleetEvent]:
        """Advance the fleet to now, start/stop servers for added/removed pods, and return the
        events since the last call (scrapes advance the fleet too, but keep the events)."""
        with self.lock:
            self._advance()
            events, self._events = self._events, []
            return events

    # --- pods -------------------------------------------------------------------------------
    @property
    def ports(self) -> dict[str, int]:
        with self.lock:
            return {name: srv.server_address[1] for name, srv in self._servers.items()}

    def url(self, name: str, path: str = "/metrics") -> str:
        return f"http://{HOST}:{self.ports[name]}{path}"

    def snapshot(self, name: str) -> PodSnapshot:
        """The pod's counters now (KeyError if the pod is gone)."""
        with self.lock:
            self._advance()
            pod = self.fleet.pods[name]
            return pod.snapshot(self.fleet.now)

    def ready(self, name: str) -> bool:
        """Is the pod serving now (KeyError if it is gone)? A readiness probe: the kubelet
        asks for every pod many times a second, so no snapshot of its counters is taken."""
        with self.lock:
            self._advance()
            return bool(self.fleet.pods[name].ready)

    def state(self, name: str) -> dict[str, Any]:
        with self.lock:
            self._advance()
            pod = self.fleet.pods[name]
            truth = self.fleet.truth().pods[name]
            return {
                "labels": pod.labels(),
                "args": pod.args,
                "phase": pod.phase,
                "k": pod.k,
                "restarts": pod.restarts,
                "ready_at": pod.ready_at,
                "t": self.fleet.now,
                "scrape_interval": self.fleet.scrape_interval,
                "prometheus_lag": self.fleet.prometheus_lag,
                "truth": truth.to_json(),
            }

    def add_pod(self, spec: PodSpec, *, ready: bool = False) -> int:
        """Create a pod (loading unless ``ready``) and serve it; returns its port."""
        with self.lock:
            self._advance()
            self.fleet.add_pod(spec, ready=ready)
            self._reconcile()
            return self._servers[spec.name].server_address[1]

    def remove_pod(self, name: str) -> None:
        with self.lock:
            self._advance()
            self.fleet.remove_pod(name)
            self._reconcile()

    def apply_args(self, name: str, args: list[str]) -> bool:
        """New container args for a pod; a change restarts it. KeyError if no such pod."""
        with self.lock:
            self._advance()
            if name not in self.fleet.pods:
                raise KeyError(name)
            changed = self.fleet.apply_args(name, args)
            self._reconcile()
            return changed

    def set_speculative_config(self, name: str, config: dict[str, Any] | None) -> bool:
        with self.lock:
            self._advance()
            if name not in self.fleet.pods:
                raise KeyError(name)
            changed = self.fleet.set_speculative_config(name, config)
            self._reconcile()
            return changed

    # --- servers ----------------------------------------------------------------------------
    def _reconcile(self) -> None:
        self._events.extend(self.fleet.drain_events())
        if not self._started:
            return
        changed = False
        for name in list(self._servers):
            if name not in self.fleet.pods:
                self._stop_server(name, wait=False)
                changed = True
        for name in self.fleet.pods:
            if name not in self._servers:
                self._start_server(name)
                changed = True
        if changed and self.file_sd is not None:
            self.write_file_sd(self.file_sd)

    def _start_server(self, name: str) -> None:
        port = 0
        if self._next_port is not None:
            port = self._next_port
            self._next_port += 1
        try:
            srv = _PodHTTPServer((HOST, port), self, name)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SandboxError(
                    f"{HOST}:{port} is already in use (wanted for pod {name}); "
                    "pick another --port-base, or leave it out to use free ports"
                ) from exc
            raise SandboxError(f"cannot listen on {HOST}:{port} for pod {name}: {exc}") from exc
        thread = threading.Thread(
            target=srv.serve_forever, kwargs={"poll_interval": 0.1}, name=f"sim-{name}"
        )
        thread.daemon = True
        thread.start()
        self._servers[name] = srv
        self._threads[name] = thread

    def _stop_server(self, name: str, *, wait: bool) -> None:
        srv = self._servers.pop(name, None)
        thread = self._threads.pop(name, None)
        if srv is None:
            return

        def stop() -> None:
            srv.shutdown()
            srv.server_close()

        if wait:
            stop()
            if thread is not None:
                thread.join(timeout=5)
        else:
            threading.Thread(target=stop, daemon=True).start()

    # --- discovery --------------------------------------------------------------------------
    def targets(self) -> list[dict[str, Any]]:
        """Prometheus file-SD target groups, one per pod."""
        with self.lock:
            return [
                {
                    "targets": [f"{HOST}:{srv.server_address[1]}"],
                    "labels": self.fleet.pods[name].labels(),
                }
                for name, srv in self._servers.items()
                if name in self.fleet.pods
            ]

    def write_file_sd(self, path: str | Path) -> None:
        """Write the target list atomically (Prometheus may read it at any moment)."""
        path = Path(path)
        data = json.dumps(self.targets(), indent=2) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=".sd-", suffix=".json", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

"""Run the real Prometheus server for tests, dashboards checks and the demo.

`PrometheusServer` starts the ``prometheus`` binary on 127.0.0.1 with a free port, a temporary
data dir and a generated config (static targets, a file-SD target list it can rewrite while
running, rule files), waits until it is ready, and stops it. Nothing here depends on pytest::

    with PrometheusServer(targets=[{"targets": ["127.0.0.1:8000"], "labels": {"pod": "a"}}],
                          scrape_interval=1.0) as prom:
        prom.wait_for('sum(vllm:generation_tokens_total)')   # polls, never sleeps blindly
        print(prom.url, prom.query("up"))

The binary is ``$ALPHAGATE_PROMETHEUS`` or ``prometheus`` on PATH (Debian's package).
A fresh server scrapes its first targets only after ~5 s (its discovery manager throttles
updates), so wait for data with :meth:`PrometheusServer.wait_for`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

from alphagate.errors import SandboxError

HOST = "127.0.0.1"
ENV_BINARY = "ALPHAGATE_PROMETHEUS"

Result = list[dict[str, Any]]


def find_binary() -> str | None:
    """The prometheus binary to run, or None when it is not installed."""
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("prometheus")


def available() -> bool:
    return find_binary() is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _duration(seconds: float) -> str:
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


class PrometheusServer:
    """One Prometheus process. Use as a context manager or call start()/stop().

    `targets` is a file-SD target list (``[{"targets": ["host:port"], "labels": {...}}]``)
    scraped by job ``vllm``; rewrite it while running with :meth:`write_targets`.
    `scrape_configs` are extra raw scrape configs. `rule_files` are copied into the config.
    """

    def __init__(
        self,
        *,
        targets: Sequence[Mapping[str, Any]] | None = None,
        scrape_configs: Sequence[Mapping[str, Any]] = (),
        rule_files: Sequence[str | Path] = (),
        scrape_interval: float = 1.0,
        evaluation_interval: float = 1.0,
        job: str = "vllm",
        metrics_path: str = "/metrics",
        data_dir: str | Path | None = None,
        port: int = 0,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
        log_level: str = "warn",
    ) -> None:
        self.targets = list(targets or [])
        self.scrape_configs = list(scrape_configs)
        self.rule_files = [str(Path(r).resolve()) for r in rule_files]
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.job = job
        self.metrics_path = metrics_path
        self._data_dir_arg = Path(data_dir) if data_dir is not None else None
        self._port_arg = port
        self._binary_arg = binary
        self.extra_args = list(extra_args)
        self.log_level = log_level
        self.workdir: Path | None = None
        self._own_workdir = False
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._client = httpx.Client(timeout=10.0)

    # ------------------------------------------------------------ paths

    @property
    def url(self) -> str:
        if not self.port:
            raise SandboxError("Prometheus is not running")
        return f"http://{HOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self._dir() / "prometheus.yml"

    @property
    def targets_path(self) -> Path:
        return self._dir() / "targets.json"

    @property
    def log_path(self) -> Path:
        return self._dir() / "prometheus.log"

    @property
    def data_path(self) -> Path:
        return self._data_dir_arg or self._dir() / "data"

    def _dir(self) -> Path:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="alphagate-prometheus-"))
            self._own_workdir = True
        return self.workdir

    # ------------------------------------------------------------ config

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this server runs with."""
        scrape: list[dict[str, Any]] = [
            {
                "job_name": self.job,
                "metrics_path": self.metrics_path,
                "file_sd_configs": [{"files": [str(self.targets_path)], "refresh_interval": "1s"}],
            }
        ]
        scrape.extend(dict(c) for c in self.scrape_configs)
        interval = _duration(self.scrape_interval)
        return {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": _duration(self.evaluation_interval),
            },
            "rule_files": self.rule_files,
            "scrape_configs": scrape,
        }

    def write_targets(self, targets: Sequence[Mapping[str, Any]]) -> None:
        """Replace the file-SD target list atomically (Prometheus picks it up by itself)."""
        self.targets = [dict(t) for t in targets]
        tmp = self.targets_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.targets, indent=1))
        tmp.replace(self.targets_path)

    # ------------------------------------------------------------ lifecycle

    def start(self, *, timeout: float = 30.0) -> Self:
        """Start and wait until /-/ready answers. Raises SandboxError naming why not."""
        if self.process is not None:
            return self
        binary = self._binary_arg or find_binary()
        if binary is None:
            raise SandboxError(
                f"prometheus binary not found (install Debian's `prometheus` or set {ENV_BINARY})"
            )
        if self.targets or not self.targets_path.exists():  # keep a list someone else wrote
            self.write_targets(self.targets)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self.data_path.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _ in range(3 if not self._port_arg else 1):  # a free port can be taken meanwhile
            self.port = self._port_arg or free_port()
            self._spawn(binary)
            try:
                self._wait_ready(timeout)
                return self
            except SandboxError as exc:
                last_error = str(exc)
                self._terminate()
                if "address already in use" not in last_error:
                    break
        self.port = 0
        raise SandboxError(last_error)

    def _spawn(self, binary: str) -> None:
        args = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_path}",
            f"--web.listen-address={HOST}:{self.port}",
            "--web.enable-lifecycle",
            f"--log.level={self.log_level}",
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed by stop()
        try:
            self.process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise SandboxError(f"cannot run {binary}: {exc}") from exc
        finally:
            log.close()

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise SandboxError(
                    f"prometheus exited with {self.process.returncode}: {self._log_tail()}"
                )
            try:
                if self._client.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise SandboxError(f"prometheus not ready after {timeout}s: {self._log_tail()}")

    def _log_tail(self, lines: int = 8) -> str:
        try:
            return " | ".join(
                self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
            )
        except OSError:
            return "(no log)"

    def _terminate(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and remove the temp dir it made."""
        self._terminate()
        self.port = 0
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
            self._own_workdir = False

    def close(self) -> None:
        self.stop()
        self._client.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def reload(self) -> None:
        """Re-read prometheus.yml (after changing `scrape_configs` or `rule_files`)."""
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        resp = self._client.post(f"{self.url}/-/reload")
        if resp.status_code != 200:
            raise SandboxError(f"prometheus reload failed: HTTP {resp.status_code} {resp.text}")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ queries

    def query(self, expr: str, *, at: float | None = None) -> Result:
        """An instant query's result list; raises SandboxError on any error."""
        data: dict[str, str] = {"query": expr}
        if at is not None:
            data["time"] = repr(at)
        return self._api("query", data)

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> Result:
        data = {"query": expr, "start": repr(start), "end": repr(end), "step": repr(step)}
        return self._api("query_range", data)

    def _api(self, endpoint: str, data: dict[str, str]) -> Result:
        try:
            resp = self._client.post(f"{self.url}/api/v1/{endpoint}", data=data)
            body = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise SandboxError(f"prometheus {endpoint} {data['query']!r}: {exc}") from exc
        if body.get("status") != "success":
            raise SandboxError(
                f"prometheus {endpoint} {data['query']!r}: {body.get('errorType')}: "
                f"{body.get('error')}"
            )
        result: Result = body["data"]["result"]
        return result

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[Result], bool] = bool,
        *,
        timeout: float = 30.0,
        poll: float = 0.2,
    ) -> Result:
        """Poll `expr` until `predicate(result)` holds (default: non-empty); bounded."""
        deadline = time.monotonic() + timeout
        last: Result = []
        while True:
            if not self.running:
                raise SandboxError(f"prometheus stopped while waiting for {expr!r}")
            last = self.query(expr)
            if predicate(last):
                return last
            if time.monotonic() >= deadline:
                raise SandboxError(f"timed out after {timeout}s waiting for {expr!r}; last: {last}")
            time.sleep(poll)

    def wait_for_targets(
        self, count: int, *, job: str | None = None, timeout: float = 30.0
    ) -> Result:
        """Wait until at least `count` targets (of `job`, or of every job) are up."""
        selector = f'{{job="{job}"}}' if job else ""
        return self.wait_for(f"up{selector} == 1", lambda r: len(r) >= count, timeout=timeout)

"""One run of the noisy-neighbour benchmark: the real controller beside some tenants.

The API double (this process) holds the tenants' canaries, Deployments and pods; the pods are
served by `bench.tenants_pods` (a child process per tenant); a real Prometheus scrapes them for the
Prometheus classes, read through a slow proxy; `alphagate run` (a child: its memory is its
own) watches every namespace with the shipped budgets. This process watches the victims' status
(what each evaluation decided, and when), polls the controller's `/healthz`, reads its peak
RSS and counts the API requests the double served. Bounded by `seconds`; binds 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import yaml

from alphagate.config import GROUP
from alphagate_lab.bench.tenants_attacks import Attack, Tenant
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate
from alphagate_lab.testing import prometheus as promtest

POLL: Final = 0.25
"""Seconds between looks at the victims' status."""
PROXY_DELAY: Final = 0.05
"""The slow Prometheus: every query answered this late (the baseline reads through it too)."""
POD_LATENCY: Final = 0.05
"""Seconds before a healthy pod answers (a network between the controller and its pods)."""


@dataclass
class Evaluation:
    at: float  # seconds since the run's start
    state: str
    verdict: str
    action: str
    why: str = ""  # an Error's SourceHealthy (or SpecValid) message: what failed


@dataclass
class RunResult:
    """What one run showed."""

    victims: dict[str, list[Evaluation]] = field(default_factory=dict)
    attacker: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> its status
    seconds: float = 0.0
    peak_rss_mib: float = 0.0
    api_requests: int = 0
    healthz_ok: int = 0
    healthz_failed: int = 0
    error: str = ""
    load: tuple[float, float] = (0.0, 0.0)
    """The machine's 1-minute load average at the run's start and end (2 cores shared: a
    victim's late read under load 12 is the machine's as much as the attacker's)."""

    @property
    def api_per_second(self) -> float:
        return self.api_requests / self.seconds if self.seconds else 0.0


class Children:
    """The child processes of a run, stopped in reverse order whatever happens."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[Any]] = []

    def start(self, args: list[str], **kw: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(args, **kw)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            with contextlib.suppress(OSError):
                proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _pod_server(
    children: Children, kinds: list[str], page: Path, extra: list[str]
) -> dict[str, Any]:
    runs: list[str] = []
    for kind in kinds:  # consecutive kinds as KIND:COUNT
        if runs and runs[-1].split(":")[0] == kind:
            runs[-1] = f"{kind}:{int(runs[-1].split(':')[1]) + 1}"
        else:
            runs.append(f"{kind}:1")
    proc = children.start(
        [sys.executable, "-m", "alphagate_lab.bench.tenants_pods", "--pods", ",".join(runs),
         "--page", str(page), "--latency", str(POD_LATENCY), "--max-seconds", "900", *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # bounded: the server prints it or exits
    if not line:
        raise RuntimeError(f"tenants_pods exited with {proc.wait(10)}")
    got: dict[str, Any] = json.loads(line)
    return got


def _pod_object(name: str, namespace: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"prometheus.io/port": str(port)},
        },
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:latest"}]},
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _seed(api: ApiServer, tenants: list[Tenant], ports: list[int]) -> list[dict[str, Any]]:
    """Deployments, pods and canaries into the double; the Prometheus targets of the pods."""
    targets = []
    i = 0
    for t in tenants:
        for name in t.deployments:
            api.put(
                DeploymentTemplate(name, t.namespace, args=["--model", "/m"], replicas=1).build()
            )
        for pod in t.pods:
            api.put(_pod_object(pod.name, pod.namespace, pod.labels, ports[i]))
            labels = {**pod.labels, "pod": pod.name, "namespace": pod.namespace}
            targets.append({"targets": [f"127.0.0.1:{ports[i]}"], "labels": labels})
            i += 1
        for obj in t.canaries:
            api.put(obj)
    return targets


def _kubeconfig(path: Path, url: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "double", "cluster": {"server": url}}],
                "users": [{"name": "controller", "user": {}}],
                "contexts": [
                    {"name": "double", "context": {"cluster": "double", "user": "controller"}}
                ],
                "current-context": "double",
            }
        )
    )


def _peak_rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(
    tenants: list[Tenant],
    attack: Attack | None,
    *,
    prometheus: bool,
    seconds: float,
    page: Path,
    log: Path | None = None,
    controller_args: tuple[str, ...] = (),
) -> RunResult:
    """Run the controller beside `tenants` (the victims first, then the attacker, if any) for
    `seconds` of measurement, and say what the victims got."""
    result = RunResult()
    children = Children()
    prom: promtest.PrometheusServer | None = None
    api = ApiServer().start()
    try:
        # One pod server per tenant: a hostile pod's CPU (a 1.6 MB page built per scrape) is
        # not the victims' pods' (they are other machines); in one process the victims' pods
        # answered late behind the attacker's page building, which is the bench, not the
        # controller. The machine's cores are still shared, as the controller's are.
        ports = [
            port
            for t in tenants
            for port in _pod_server(children, [p.kind for p in t.pods], page, [])["ports"]
        ]
        targets = _seed(api, tenants, ports)
        extra: list[str] = list(controller_args)
        if prometheus:
            prom = _prometheus(targets, attack.max_samples if attack else 0)
            proxy = _pod_server(
                children, [], page, ["--prometheus", prom.url, "--delay", str(PROXY_DELAY)]
            )
            extra += ["--prometheus-url", f"http://127.0.0.1:{proxy['proxy']}",
                      "--prometheus-scrape-interval", "1"]  # fmt: skip
        _measure(api, tenants, children, extra, seconds, result, log)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        children.close()
        if prom is not None:
            prom.close()
        api.stop()
    return result


def _prometheus(targets: list[dict[str, Any]], max_samples: int) -> promtest.PrometheusServer:
    args = [f"--query.max-samples={max_samples}"] if max_samples else []
    prom = promtest.PrometheusServer(
        targets=targets, scrape_interval=1.0, evaluation_interval=1.0, extra_args=args
    ).start(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every target scraped at least once: bounded
        with contextlib.suppress(Exception):
            got = prom.query('count(up{job="vllm"} == 1)')
            if got and float(got[0]["value"][1]) >= len(targets):
                break
        time.sleep(1.0)
    return prom


def _measure(
    api: ApiServer,
    tenants: list[Tenant],
    children: Children,
    extra: list[str],
    seconds: float,
    result: RunResult,
    log: Path | None,
) -> None:
    victims, attackers = tenants[0], tenants[1:]
    port = promtest.free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "kubeconfig"
        _kubeconfig(config, api.url)
        sink = log.open("w") if log is not None else subprocess.DEVNULL
        child = children.start(
            [sys.executable, "-m", "alphagate", "run", "--kubeconfig", str(config),
             "--no-leader-elect", "--metrics-port", str(port), "--log-level", "WARNING",
             "--log-format", "json", "--exit-after", f"{seconds + 30:.0f}", *extra],
            stdout=sink, stderr=sink,
        )  # fmt: skip
        api.clear_requests()
        started = time.monotonic()
        last: dict[str, str] = {}
        next_probe = started
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() - started < seconds and child.poll() is None:
                now = time.monotonic()
                _look(api, victims, last, result, now - started)
                if now >= next_probe:
                    next_probe = now + 1.0
                    _probe(client, port, result)
                with contextlib.suppress(OSError, ValueError):
                    result.peak_rss_mib = max(result.peak_rss_mib, _peak_rss(child.pid))
                time.sleep(POLL)
        result.seconds = time.monotonic() - started
        result.api_requests = len(api.requests)
        if child.poll() is not None and result.seconds < seconds:
            result.error = f"the controller exited with {child.returncode}"
        for t in attackers:
            for obj in t.canaries:
                name = obj["metadata"]["name"]
                got = api.get("speculativecanaries", t.namespace, name, group=GROUP)
                result.attacker[name] = got.get("status") or {}


def _look(
    api: ApiServer, victims: Tenant, last: dict[str, str], result: RunResult, at: float
) -> None:
    for obj in victims.canaries:
        name = obj["metadata"]["name"]
        st = api.get("speculativecanaries", victims.namespace, name, group=GROUP).get("status")
        stamp = (st or {}).get("lastEvaluated")
        if not st or not stamp or last.get(name) == stamp:
            continue
        last[name] = stamp
        d = st.get("lastDecision") or {}
        verdict = str(d.get("verdict", ""))
        why = ""
        if verdict == "Error":
            bad = [c for c in st.get("conditions") or [] if c.get("status") == "False"]
            why = "; ".join(_short(f"{c.get('reason')}: {c.get('message', '')}") for c in bad)
        result.victims.setdefault(name, []).append(
            Evaluation(at, str(st.get("state", "")), verdict, str(d.get("action", "")), why)
        )


def _probe(client: httpx.Client, port: int, result: RunResult) -> None:
    """One /healthz; failures count once the server has answered at least once."""
    try:
        ok = client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    except httpx.HTTPError:
        ok = False
    if ok:
        result.healthz_ok += 1
    elif result.healthz_ok:
        result.healthz_failed += 1


def _short(text: str) -> str:
    """A condition's sentence, its head and its tail (a query in the middle can be long)."""
    return text if len(text) <= 360 else f"{text[:120]} ... {text[-220:]}"

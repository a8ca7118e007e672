"""`python -m alphagate_lab.bench.load`: one controller, many canaries, a simulated hour.

The real `alphagate run` (a child process: its CPU and memory are its own) watches N
SpeculativeCanaries in the API server double (this process), each with a canary and a baseline
Deployment and one pod per pool; the pods are served by :mod:`alphagate_lab.sandbox.pageserver`
(the real vLLM capture, growing each tick) and found through the API like real pods. Time is
compressed by `--speed`: a 30 s interval runs every 3 s at speed 10, so a simulated hour takes
six wall minutes. This process watches the canaries' status and notes when each evaluation
lands; it reports evaluations per canary against the interval (late ones: a gap over 1.5
intervals), the child's CPU and peak RSS, and the API requests it made. Numbers only: nothing
here asserts a speed. Bounded by `--max-minutes`; binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import watch

from alphagate.config import API_VERSION, GROUP, KIND, PLURAL, VERSION
from alphagate.kube.client import API_ERRORS, Kube
from alphagate_lab.bench.fleet import PageServer, _machine, _page
from alphagate_lab.bench.fleet_cycle import CLK_TCK
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

NS: Final = "llm"
QUICK_ARGS: Final = ["--canaries", "10", "--sim-minutes", "5", "--max-minutes", "2"]


def canary(name: str, *, interval: float, speed: float) -> dict[str, Any]:
    """A canary with the shipped policy's shape; its timing compressed by `speed`."""
    s = 1.0 / speed
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "target": {"name": f"{name}-canary", "container": "vllm"},
            "baseline": {"name": f"{name}-baseline", "container": "vllm"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {
                    "name": "chat",
                    "canary": {"matchLabels": {"app": name, "role": "canary"}},
                    "baseline": {"matchLabels": {"app": name, "role": "baseline"}},
                }
            ],
            "acceptance": {"batchSeconds": max(0.1, 300 * s)},
            "latency": {"batchSeconds": max(0.1, 300 * s)},
            "timing": {
                "intervalSeconds": interval * s,
                "windowSeconds": 10 * interval * s,
                "warmupSeconds": 60 * s,
                "minDwellSeconds": 600 * s,
                "probeSeconds": 900 * s,
                "rolloutTimeoutSeconds": 600 * s,
                "cooldown": {"initialSeconds": 600 * s, "maxSeconds": 3600 * s},
            },
            "source": {"kind": "podScrape", "scrape": {"timeoutSeconds": 5}},
        },
    }


def pod(name: str, app: str, role: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app": app, "role": role},
            "annotations": {"prometheus.io/port": str(port)},
        },
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:latest"}]},
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


class Evaluations:
    """When each canary's status changed `lastEvaluated`, as seen by a watch (wall time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[str, list[float]] = defaultdict(list)
        self._last: dict[str, str] = {}

    def watch(self, kube: Kube, stop: threading.Event) -> None:
        while not stop.is_set():  # bounded by `stop`; each stream by its own timeout
            w = watch.Watch()
            try:
                for ev in w.stream(
                    kube.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    NS,
                    PLURAL,
                    timeout_seconds=5,
                    _request_timeout=15,
                ):
                    obj = ev.get("object") or {}
                    name = (obj.get("metadata") or {}).get("name", "")
                    stamp = (obj.get("status") or {}).get("lastEvaluated")
                    if stamp and self._last.get(name) != stamp:
                        self._last[name] = stamp
                        with self.lock:
                            self.at[name].append(time.monotonic())
                    if stop.is_set():
                        w.stop()
                        break
            except API_ERRORS:  # a dropped stream: watch again
                stop.wait(0.2)


def _proc_cpu_rss(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS MiB) of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return cpu, peak


def run(
    canaries: int, *, interval: float, speed: float, sim_minutes: float, max_minutes: float
) -> dict[str, Any]:
    wall_interval = interval / speed
    wall = min(sim_minutes * 60 / speed, max_minutes * 60)
    page, _ = _page(None)
    pages = PageServer(page, 2 * canaries, tick_seconds=wall_interval)
    api = ApiServer().start()
    kube = Kube.from_configuration(api.configuration())
    stop = threading.Event()
    evals = Evaluations()
    try:
        for i in range(canaries):
            name = f"c{i:03d}"
            for role, port in (
                ("canary", pages.ports[2 * i]),
                ("baseline", pages.ports[2 * i + 1]),
            ):
                dep = DeploymentTemplate(f"{name}-{role}", NS, args=["--model", "/m"], replicas=1)
                api.put(dep.build())
                api.put(pod(f"{name}-{role}-0", name, role, port))
            api.put(canary(name, interval=interval, speed=speed))
        watcher = threading.Thread(target=evals.watch, args=(kube, stop), daemon=True)
        watcher.start()
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "kubeconfig"
            config.write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "clusters": [{"name": "double", "cluster": {"server": api.url}}],
                        "users": [{"name": "controller", "user": {}}],
                        "contexts": [
                            {
                                "name": "double",
                                "context": {"cluster": "double", "user": "controller"},
                            }
                        ],
                        "current-context": "double",
                    }
                )
            )
            api.clear_requests()
            started = time.monotonic()
            child = subprocess.Popen(
                [
                    sys.executable, "-m", "alphagate", "run", "--kubeconfig", str(config),
                    "--namespace", NS, "--no-leader-elect", "--metrics-port", "0",
                    "--exit-after", f"{wall:.1f}", "--log-level", "WARNING",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            cpu = peak = 0.0
            deadline = started + wall + 60
            while child.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError, ValueError, IndexError):  # it just exited
                    cpu, peak = _proc_cpu_rss(child.pid)
                time.sleep(0.5)
            if child.poll() is None:
                child.kill()
            child.wait(30)
            ended = time.monotonic()
        requests = len(api.requests)
    finally:
        stop.set()
        kube.close()
        api.stop()
        pages.close()
    return _summary(evals, canaries, wall_interval, ended, speed, cpu, peak, requests)


def _summary(
    evals: Evaluations,
    canaries: int,
    wall_interval: float,
    ended: float,
    speed: float,
    cpu: float,
    peak: float,
    requests: int,
) -> dict[str, Any]:
    gaps: list[float] = []
    counts = []
    with evals.lock:
        firsts = [at[0] for at in evals.at.values() if at]
        for name in (f"c{i:03d}" for i in range(canaries)):
            at = evals.at.get(name, [])
            counts.append(len(at))
            gaps += [b - a for a, b in itertools.pairwise(at)]
    # from the first evaluation (the child has started and listed) to its exit
    elapsed = ended - min(firsts) if firsts else 0.0
    late = sum(1 for g in gaps if g > 1.5 * wall_interval)
    q = statistics.quantiles(gaps, n=100) if len(gaps) >= 2 else [math_nan()] * 99
    return {
        "canaries": canaries,
        "interval_sim_s": wall_interval * speed,
        "sim_minutes": elapsed * speed / 60,
        "evaluations": sum(counts),
        "expected": int(canaries * (elapsed / wall_interval + 1)),
        "never_evaluated": sum(1 for c in counts if c == 0),
        "gap_median_sim_s": statistics.median(gaps) * speed if gaps else math_nan(),
        "gap_p95_sim_s": q[94] * speed,
        "gap_max_sim_s": max(gaps) * speed if gaps else math_nan(),
        "late": late,
        "late_share": late / len(gaps) if gaps else math_nan(),
        "cpu_s": cpu,  # start-up included
        "cpu_share": cpu / (elapsed + 1e-9),
        "peak_rss_mib": peak,
        "api_requests_per_s": requests / elapsed if elapsed else math_nan(),
    }


def math_nan() -> float:
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--canaries", type=int, default=200)
    parser.add_argument("--interval", type=float, default=30.0, help="simulated seconds")
    parser.add_argument("--speed", type=float, default=10.0, help="simulated s per wall s")
    parser.add_argument("--sim-minutes", type=float, default=60.0)
    parser.add_argument("--max-minutes", type=float, default=8.0, help="hard wall-clock cap")
    args = parser.parse_args(argv)
    if not (0 < args.canaries <= 1000 and args.speed > 0 and args.interval > 0):
        parser.error("--canaries 1..1000, --speed and --interval above 0")
    print(f"machine: {_machine()}; pid {os.getpid()}")
    got = run(
        args.canaries,
        interval=args.interval,
        speed=args.speed,
        sim_minutes=args.sim_minutes,
        max_minutes=args.max_minutes,
    )
    width = max(len(k) for k in got)
    for key, value in got.items():
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

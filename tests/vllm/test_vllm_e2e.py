"""End to end on real vLLM: the controller rolls speculation back when real alpha falls, and a
probe brings it back when the traffic improves.

Real parts: two vLLM CPU servers (tools/vllm: a tiny model, n-gram drafts with K=4) run as the
pods of a baseline and a canary Deployment by the sandbox kubelet runner through
:class:`~alphagate_lab.sandbox.vllm_runtime.VllmRuntime`; Debian's Prometheus scrapes them every
second through file SD; the API server double holds the Deployments and a SpeculativeCanary;
`alphagate run`'s controller (the real reconciler, actuator and status writer over the real
`kubernetes` client) decides and patches; the runner restarts the canary's vLLM process with
the patched args. Alpha is *natural*: the prompt mix of the load sets it (repetitive greedy
prompts: ~0.98; varied prompts at temperature 0.05: ~0.0-0.13).

Cost on the 2-core machine: 6-8 minutes (measured 6:04, 6:33 and 8:13 as other jobs loaded
the machine; one cold start of both pods 80-130 s, each canary restart 54-92 s, the rest is
the controller's windows and the cooldown). A timeline of every decision, restart and check,
with the duration of each phase, is printed to the terminal whether the test passes or not.

The first test needs the vLLM environment (tools/vllm/setup.sh) and Prometheus; it is
skipped without them, and fails instead when ALPHAGATE_REQUIRE_VLLM=1 (CI). Skip it locally
with ``pytest -m "not vllm"``. The last test checks the runtime with a stand-in server in a
few seconds and runs in the default suite.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_e2e_support import (
    CounterSampler,
    Timeline,
    TrafficDriver,
    fake_vllm_home,
    wait_until,
)

from alphagate.config import dump, parse
from alphagate.core.model import (
    AcceptanceEvidence,
    Action,
    Cause,
    CheckKind,
    LatencyEvidence,
    Verdict,
)
from alphagate.kube.crd import build_crd
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate
from alphagate_lab.sandbox.kubelet import KubeletEvent, KubeletRunner
from alphagate_lab.sandbox.load import Mix
from alphagate_lab.sandbox.vllm_runtime import (
    SPEC_PREFIX,
    VllmIncarnation,
    VllmRuntime,
    has_flag,
    scrape_metrics,
)
from alphagate_lab.sandbox.vllm_server import vllm_unavailable_reason

NS = "e2e"
MODEL = "tiny-chat"
CANARY = "chat-canary"
BASELINE = "chat-baseline"
K = 4
SPEC: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": K,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}
FLAG = "--speculative-config"

# Timings (seconds). Evaluate every 4 s over a 32 s window, judge only after a 4 s warm-up.
# Measured on these 2 cores with both vLLM pods serving (load ~16): at a 2 s interval, a third
# of the reads missed their deadline (80% of the interval: 1.6 s for a Prometheus query), and
# a 16 s window held ~30 requests a pod, too few for the per-token mean to be shown within the
# margin through CPU contention's spread (phase 3 Inconclusive for 4 min, CI 2026-12-04).
INTERVAL_S = 4.0
WINDOW_S = 32.0
BATCH_S = 4.0  # 8 batches a window, as the 2 s batches of a 16 s window were
WARMUP_S = 4.0
READY_TIMEOUT_S = 420.0  # one vLLM start: 54-160 s measured here, more on a busy machine
ALPHA_TOLERANCE = 0.05  # controller (Prometheus) vs the canary's own counters, same window
CONCURRENCY = 2  # per pod


# ---------------------------------------------------------------- the cluster's objects


def deployment(name: str, role: str, *, speculative: bool) -> dict[str, Any]:
    args = [
        "--model",
        "/models/tiny-chat",
        "--served-model-name",
        MODEL,
        "--port",
        "8000",
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "8",
    ]
    if speculative:
        args += [FLAG, json.dumps(SPEC)]
    dep = DeploymentTemplate(
        name,
        NS,
        image="vllm/vllm-cpu:0.32.0",
        args=args,
        labels={"app.kubernetes.io/name": "vllm", "role": role, "slice": "chat"},
    ).build()
    dep["spec"]["strategy"] = {"type": "Recreate"}
    return dep


def canary_policy(prometheus_url: str, cooldown_s: float) -> dict[str, Any]:
    """The SpeculativeCanary under test (enforce mode, one slice, short timings).

    Latency guard: per token (`vllm:request_time_per_output_token_seconds`, one observation
    per request, so a speculating canary is compared like for like), P75, and an allowed
    regression of +100%. A latency Pass needs evidence that the canary is within the margin,
    and at ~2 requests/s per pod a 32 s window holds ~60 requests: a P99 cannot be shown from
    them (about 300 are needed with none above the limit), so a P99 guard would stay
    Inconclusive and no probe would ever be confirmed. P75 can be shown from a few dozen
    (simulated with a 16 s window and this contention: 90% of windows Pass when the canary is as
    fast, 55% when it is 1.3x slower, 6% when 1.85x). On these 2 shared cores the two pods'
    per-token times differ by tens of percent between identical runs from CPU contention
    alone (measured: either pod's P99 ahead by up to one coarse bucket), so the default +10%
    would judge the scheduler, not speculation.
    The guard still runs on the real histograms and must PASS (mean and P75 shown within
    +100%) for a probe to be confirmed; the rollback here is alpha's.
    """
    return {
        "apiVersion": "alphagate.io/v1alpha1",
        "kind": "SpeculativeCanary",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {
            "target": {"name": CANARY, "container": "vllm"},
            "baseline": {"name": BASELINE, "container": "vllm"},
            "speculativeConfig": SPEC,
            "mode": "enforce",
            "aggregation": "combined",
            "slices": [
                {
                    "name": "chat",
                    "canary": {"matchLabels": {"slice": "chat", "role": "canary"}},
                    "baseline": {"matchLabels": {"slice": "chat", "role": "baseline"}},
                }
            ],
            # The gate, confidence and consecutiveWindows are the defaults; the rest is
            # compressed: one real-vLLM run has minutes, not a day.
            "acceptance": {
                "disableBelow": 0.55,
                "enableAbove": 0.60,
                # minDrafts: the shipped 200 (a 32 s window of varied prompts holds ~700)
                # Kept until a whole run passes without it. Rerun with automatic blocks (2026-12,
                # load average ~18 on the 2 cores): phases 1-2 decided right (confirmed at alpha
                # [0.941, 0.989], rolled back at [0.020, 0.378]); phase 3 timed out because every
                # window of the re-probe was an Error (the Prometheus read budget exceeded under
                # that load), so no window was judged; an earlier try timed out in phase 1 on two
                # canary restarts of 123 s and over 97 s. Neither failure was about the batches.
                "batchSeconds": BATCH_S,  # see above
            },
            "latency": {
                "quantile": 0.75,  # P99 shipped: ~60 requests a window cannot show one (above)
                "maxRegressionRatio": 1.0,  # +10% shipped: CPU contention alone moves +-tens of %
                "minCount": 20,  # 100 shipped: a 32 s window holds ~60 requests a pod
                "batchSeconds": BATCH_S,  # 60 s shipped > the 32 s window: one batch a pod
            },
            "timing": {
                "intervalSeconds": INTERVAL_S,  # 30 s shipped: see the Timings note above
                "windowSeconds": WINDOW_S,  # 300 s shipped: each phase lasts a minute or two
                "warmupSeconds": WARMUP_S,  # 120 s shipped: tiny model, no CUDA graphs to warm
                "rolloutTimeoutSeconds": READY_TIMEOUT_S,  # a CPU vLLM start: 54-160 s here
                "minDwellSeconds": 10,  # 600 s shipped: the test flips within minutes
                # probeSeconds: the default 900 s, longer than the whole probe phase
                "maxFlipsPerHour": 10,  # 4 shipped: all of the run's flips fall in one hour
                # minutes, not the policies' 12-24 h: fitted to one canary restart (see
                # `cooldown_s`), constant so phase 3's probe lands at a known time
                "cooldown": {
                    "initialSeconds": cooldown_s,
                    "factor": 1.0,
                    "maxSeconds": cooldown_s,
                },
            },
            "source": {
                "kind": "prometheus",
                "prometheus": {"timeoutSeconds": 5},  # a loaded 2-core machine answers slowly
            },
        },
    }


def _require_vllm() -> None:
    reason = vllm_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("ALPHAGATE_REQUIRE_VLLM") == "1":
        pytest.fail(f"ALPHAGATE_REQUIRE_VLLM=1 but {reason}")
    pytest.skip(reason)


def _require_prometheus() -> None:
    from alphagate_lab.testing import prometheus

    if prometheus.available():
        return
    msg = "no prometheus binary (Debian's `prometheus` package; tools/ensure-prometheus.sh)"
    if os.environ.get("ALPHAGATE_REQUIRE_VLLM") == "1":
        pytest.fail(f"ALPHAGATE_REQUIRE_VLLM=1 but {msg}")
    pytest.skip(msg)


# ---------------------------------------------------------------- the observed controller


class Decisions:
    """Every evaluation the reconciler made, as (unix time, Outcome), in order."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self._items: list[tuple[float, Any]] = []
        self._lock = threading.Lock()
        self._last_verdict: str | None = None

    def add(self, out: Any) -> None:
        at = time.time()
        with self._lock:
            self._items.append((at, out))
        self._narrate(at, out)

    def items(self) -> list[tuple[float, Any]]:
        with self._lock:
            return list(self._items)

    def evaluations(self) -> list[Any]:
        return [
            u.evaluation
            for _, out in self.items()
            for u in out.units[:1]
            if u.evaluation is not None
        ]

    def transitions(self) -> list[Any]:
        return [e for e in self.evaluations() if e.transition is not None]

    def state(self) -> str | None:
        evs = self.evaluations()
        return evs[-1].memory.state.value if evs else None

    def _narrate(self, at: float, out: Any) -> None:
        unit = out.units[0] if out.units else None
        ev = unit.evaluation if unit is not None else None
        if ev is None:
            self.timeline.add("controller", f"no evaluation: {out.spec_error or unit}", at=at)
            return
        alpha = ""
        if ev.combined is not None and math.isfinite(ev.combined.value):
            c = ev.combined
            alpha = (
                f" alpha {c.value:.3f} [{c.lower:.3f}, {c.upper:.3f}] over {c.drafts:.0f} drafts;"
            )
        lat = [c for c in ev.checks if isinstance(c.evidence, LatencyEvidence)]
        lat_text = ""
        if lat:
            e = lat[0].evidence
            lat_text = f" latency {lat[0].verdict.value}"
            if isinstance(e, LatencyEvidence) and e.canary is not None and e.baseline is not None:
                cq, bq = e.canary.quantile_seconds, e.baseline.quantile_seconds
                q = f"P{e.quantile * 100:g}"
                lat_text += f" ({q}/token canary {cq * 1000:.1f} ms, baseline {bq * 1000:.1f} ms)"
            if isinstance(e, LatencyEvidence) and e.undecided:
                lat_text += " not shown: " + ",".join(u.value for u in e.undecided)
            lat_text += ";"
        if ev.transition is not None:
            t = ev.transition
            applied = " [patched]" if unit is not None and unit.applied else ""
            self.timeline.add(
                "controller",
                f"{t.from_state.value} -> {t.to_state.value} ({ev.action.value}){applied}:"
                f"{alpha}{lat_text} {ev.reason}",
                at=at,
            )
        elif ev.verdict.value != self._last_verdict:
            why = next((c.reason for c in ev.checks if c.verdict is ev.verdict), ev.reason)
            self.timeline.add(
                "controller",
                f"{ev.memory.state.value}: window {ev.verdict.value};{alpha}{lat_text} {why}",
                at=at,
            )
        self._last_verdict = ev.verdict.value


def start_controller(api: ApiServer, decisions: Decisions, prometheus_url: str) -> Any:
    """`alphagate run` in this process, its reconciler reporting every evaluation; the test's
    Prometheus is the controller's endpoint `default` (as `--prometheus-url` makes it)."""
    from alphagate.shell.controller import Controller, RunOptions
    from alphagate.sources.endpoints import SourcesConfig
    from alphagate_lab.sandbox.vllm_server import free_port

    opts = RunOptions(
        server=api.url,
        namespace=NS,
        leader_elect=False,
        metrics_port=free_port(),
        watch_timeout=30.0,
        sources=SourcesConfig.single(prometheus_url),
    )
    return Controller(opts, on_outcome=decisions.add).start()


# ---------------------------------------------------------------- helpers


def canary_args(api: ApiServer) -> list[str]:
    dep = api.get("deployments", NS, CANARY, group="apps")
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


def spec_value(argv: list[str] | tuple[str, ...]) -> dict[str, Any] | None:
    for i, a in enumerate(argv):
        if a == FLAG and i + 1 < len(argv):
            return dict(json.loads(argv[i + 1]))
        if a.startswith(FLAG + "="):
            return dict(json.loads(a[len(FLAG) + 1 :]))
    return None


def newest_ready(runtime: VllmRuntime, after: float) -> VllmIncarnation | None:
    for inc in reversed(runtime.incarnations(CANARY)):
        if inc.started_at > after and inc.ready_at is not None:
            return inc
    return None


def judged_acceptance(ev: Any) -> Any:
    return next(
        (
            c
            for c in ev.checks
            if isinstance(c.evidence, AcceptanceEvidence) and c.evidence.estimate is not None
        ),
        None,
    )


def compare_alpha(
    decisions: Decisions,
    sampler: CounterSampler,
    traffic: TrafficDriver,
    timeline: Timeline,
    *,
    since: float,
    until: float,
) -> list[tuple[Mix | None, float, float, float]]:
    """(mix, controller alpha, server alpha, drafted tokens) for every judged evaluation in
    [since, until], the server's alpha recomputed over the evaluation's own window."""
    out = []
    for ev in decisions.evaluations():
        if not since <= ev.at <= until or ev.combined is None:
            continue
        if judged_acceptance(ev) is None or not math.isfinite(ev.combined.value):
            continue
        got = sampler.alpha_over(ev.at - WINDOW_S, ev.at)
        if got is None or not got[2] > 0:
            continue
        mix = traffic.pure(ev.at - WINDOW_S, ev.at)
        out.append((mix, ev.combined.value, got[0], got[2]))
    for mix, mine, theirs, n in out:
        if mix is None:  # alpha then hinges on where the switch falls, to the second
            timeline.add(
                "check",
                f"alpha (window spans a mix switch, not compared): controller {mine:.3f}, "
                f"canary's own counters {theirs:.3f} over {n:.0f} draft tokens",
            )
            continue
        timeline.add(
            "check",
            f"alpha ({mix.value} window): controller {mine:.3f}, canary's own counters "
            f"{theirs:.3f} over {n:.0f} draft tokens (diff {mine - theirs:+.3f}, tolerance "
            f"{ALPHA_TOLERANCE})",
        )
    return out


# ---------------------------------------------------------------- the real thing


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.timeout(1500)
def test_vllm_e2e_rollback_on_real_alpha_and_probe_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _require_vllm()
    _require_prometheus()
    from alphagate_lab.testing.prometheus import PrometheusServer

    timeline = Timeline()
    decisions = Decisions(timeline)
    stack: list[tuple[str, Any]] = []  # (what, stop function), stopped newest first
    runtime: VllmRuntime | None = None
    passed = False

    def terminated(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}: stopping the vLLM servers first")

    # A CI job cancelled with SIGTERM still runs the teardown (the servers have their own
    # sessions and would outlive pytest otherwise).
    previous_handler = signal.signal(signal.SIGTERM, terminated)
    try:
        timeline.phase("setup: API double, Prometheus, two vLLM pods starting")
        api = ApiServer(kubelet=None).start()
        stack.append(("API server", api.stop))
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.put(build_crd())
        api.put(deployment(BASELINE, "baseline", speculative=False))
        api.put(deployment(CANARY, "canary", speculative=True))

        prom = PrometheusServer(scrape_interval=1.0, evaluation_interval=1.0)
        prom.workdir = tmp_path / "prometheus"
        prom.workdir.mkdir()
        stack.append(("Prometheus", prom.close))
        prom.start(timeout=60)
        timeline.add("test", f"Prometheus {prom.url} (scrape 1 s, file SD)")

        # Each server's worker gets its own core (vLLM pins its OpenMP threads to core 0 by
        # default, so both pods would share one).
        runtime = VllmRuntime(
            file_sd=prom.targets_path,
            env={
                BASELINE: {"VLLM_CPU_OMP_THREADS_BIND": "0"},
                CANARY: {"VLLM_CPU_OMP_THREADS_BIND": "1"},
            },
            log_dir=tmp_path,
            stop_timeout_s=10.0,  # SIGKILL after 10 s (a stop normally takes 1-3 s)
        )
        stack.append(("vLLM runtime", runtime.close))

        def on_kubelet(ev: KubeletEvent) -> None:
            shown = ("started", "ready", "replaced", "deleted", "restarted", "failed")
            if ev.kind in shown or (ev.kind == "rollout" and "complete" in ev.message):
                timeline.add("kubelet", ev.message, at=ev.at)

        kubelet = KubeletRunner(api, runtime, namespace=NS, poll_seconds=0.2, on_event=on_kubelet)
        api.kubelet = kubelet.hook
        stack.append(("kubelet runner", kubelet.stop))
        kubelet.start()

        def both_ready() -> bool:
            return all(runtime.ready_url(d) for d in (BASELINE, CANARY)) if runtime else False

        startup_s = wait_until("both vLLM pods ready", both_ready, READY_TIMEOUT_S)
        for inc in runtime.incarnations():
            timeline.add(
                "test",
                f"{inc.pod}: vLLM ready in {inc.ready_seconds:.1f} s; spec series at ready: "
                f"{sorted(inc.metrics_at_ready.spec_families) if inc.metrics_at_ready else '?'}",
            )
        first_canary = runtime.current(CANARY)
        assert first_canary is not None and first_canary.speculative
        assert first_canary.metrics_at_ready is not None
        assert first_canary.metrics_at_ready.spec_families, "spec series absent at start"

        # ---- phase 1: repetitive prompts -> high natural alpha; the controller turns it on
        timeline.phase("1. repetitive mix: measure alpha, canary on")
        traffic = TrafficDriver(
            runtime,
            model=MODEL,
            concurrency={BASELINE: CONCURRENCY, CANARY: CONCURRENCY},
            mix=Mix.REPETITIVE,
            timeline=timeline,
            hold_while_unready={BASELINE: CANARY},
        ).start()
        stack.append(("load", traffic.stop))
        sampler = CounterSampler(runtime, CANARY).start()
        stack.append(("sampler", sampler.stop))
        prom.wait_for(
            'count(sum by (role) ({__name__=~"vllm.generation_tokens_total"}) > 0)',
            lambda r: bool(r) and float(r[0]["value"][1]) >= 2,
            timeout=60,
        )
        timeline.add("test", "Prometheus has traffic from both pods")
        # A rollback cools down long enough for the spec-off pod to restart and serve: a
        # single restart takes about what the two concurrent starts took.
        cooldown_s = float(min(300.0, max(60.0, 1.25 * startup_s + 20.0)))
        policy = canary_policy(prom.url, cooldown_s)
        parse(policy, where="test policy")
        controller = start_controller(api, decisions, str(prom.url))
        stack.append(("controller", lambda: controller.stop(release=False)))
        api.put(dump(parse(policy)))
        phase1_t0 = time.time()
        timeline.add("test", f"SpeculativeCanary created (cooldown {cooldown_s:.0f} s)")

        wait_until("state On", lambda: decisions.state() == "On", 360)
        phase1_t1 = time.time()
        trans = decisions.transitions()
        assert [(t.transition.from_state.value, t.transition.to_state.value) for t in trans] == [
            ("Off", "Probing"),
            ("Probing", "On"),
        ], [t.reason for t in trans]
        # The canary already ran the config: enabling it was an annotation, not a restart.
        assert len(runtime.incarnations(CANARY)) == 1
        assert spec_value(canary_args(api)) == SPEC
        confirm = trans[-1]
        assert confirm.combined is not None and confirm.combined.lower > 0.60
        pairs = compare_alpha(
            decisions, sampler, traffic, timeline, since=phase1_t0, until=phase1_t1
        )
        pure = [p for p in pairs if p[0] is Mix.REPETITIVE]
        assert pure, f"no judged repetitive window to compare: {pairs}"
        for _, mine, theirs, _n in pure:
            assert abs(mine - theirs) <= ALPHA_TOLERANCE, (mine, theirs)
            assert theirs > 0.9, f"repetitive prompts gave alpha {theirs:.3f}"

        # ---- phase 2: varied prompts -> alpha under the gate -> rollback, restart without
        timeline.phase("2. varied mix: alpha falls, rollback, restart without speculation")
        switch_t = traffic.set_mix(Mix.VARIED)
        wait_until(
            "rollback",
            lambda: any(t.action is Action.DISABLE for t in decisions.transitions()),
            180,
        )
        rollback = next(t for t in decisions.transitions() if t.action is Action.DISABLE)
        timeline.add("test", f"rolled back {rollback.at - switch_t:.1f} s after the mix switch")
        assert rollback.transition.from_state.value == "On"
        assert rollback.transition.to_state.value == "RolledBack"
        failing = [c for c in rollback.checks if c.verdict is Verdict.FAIL]
        assert any(c.kind is CheckKind.ACCEPTANCE for c in failing), failing
        assert rollback.transition.cause is Cause.POLICY_FAIL
        assert rollback.combined is not None and rollback.combined.upper < 0.55
        # The canary's own counters agree the rolled-back window was under the gate.
        server = sampler.alpha_over(rollback.at - WINDOW_S, rollback.at)
        assert server is not None and server[0] < 0.55, server
        timeline.add(
            "check",
            f"rollback window: controller alpha {rollback.combined.value:.3f} "
            f"(upper {rollback.combined.upper:.3f}), canary's own counters {server[0]:.3f}",
        )
        mixed = compare_alpha(
            decisions, sampler, traffic, timeline, since=switch_t, until=rollback.at
        )
        for mix, mine, theirs, _n in mixed:
            if mix is not None:
                assert abs(mine - theirs) <= ALPHA_TOLERANCE, (mine, theirs)

        # The Deployment lost the flag; the runner restarted vLLM without it.
        wait_until("args without the flag", lambda: FLAG not in " ".join(canary_args(api)), 30)
        assert spec_value(canary_args(api)) is None
        wait_until(
            "the spec-off canary ready",
            lambda: newest_ready(runtime, rollback.at - 1) is not None,
            READY_TIMEOUT_S,
        )
        off = newest_ready(runtime, rollback.at - 1)
        assert off is not None
        timeline.add("test", f"{off.pod}: spec-off vLLM ready in {off.ready_seconds:.1f} s")
        assert not off.speculative and not has_flag(off.argv, FLAG)
        assert off.cmdline and not has_flag(off.cmdline, FLAG), off.cmdline
        assert off.metrics_at_ready is not None and not off.metrics_at_ready.spec_families
        assert off.metrics_at_ready.total("vllm:generation_tokens_total") == 0  # a new process
        # Let it serve some traffic and look again (live, while the cooldown runs).
        try:
            wait_until(
                "the spec-off canary serving",
                lambda: scrape_metrics(f"{off.url}/metrics").generation_tokens >= 256,
                60,
            )
            page = scrape_metrics(f"{off.url}/metrics")
            assert not page.spec_families, sorted(page.spec_families)
            timeline.add(
                "check",
                f"{off.pod} served {page.generation_tokens:.0f} tokens: no "
                f"{SPEC_PREFIX}_* series; cmdline has no {FLAG}",
            )
        except Exception as exc:  # the probe may have replaced it already on a slow machine
            timeline.add("check", f"live look at {off.pod} not possible ({exc}); using records")
        # Status and Event say why, with the numbers.
        status = api.get("speculativecanaries", NS, "chat", group="alphagate.io").get("status")
        assert status is not None
        if status["state"] == "RolledBack":
            assert status["speculationOn"] is False, status
        else:
            # A loaded machine restarts the spec-off pod slower than the cooldown (its length
            # comes from the first start-up): then the probe that follows is on record too.
            assert any(
                (h["fromState"], h["toState"], h.get("cause"))
                == ("RolledBack", "Probing", Cause.PROBE.value)
                for h in status["history"]
            ), status["history"]
        entry = next(
            h for h in status["history"] if (h["fromState"], h["toState"]) == ("On", "RolledBack")
        )
        timeline.add("status", f"history: {entry['reason']} | evidence {entry['evidence']}")
        # Typed fields, not the wording: one decisive window or two failing ones both
        # roll back with cause policy-fail (which one depends on how fast alpha fell).
        assert entry["cause"] == Cause.POLICY_FAIL.value, entry
        assert "cooldown" in entry["reason"], entry
        evidence = entry["evidence"]
        assert abs(float(evidence["alpha"]) - rollback.combined.value) < 1e-3, evidence
        assert float(evidence["alpha_upper"]) < 0.55, evidence
        assert "acceptance" in evidence["why"] and "disableBelow" in evidence["why"], evidence
        events = [e for e in api.objects("events", NS) if e.get("reason") == "SpeculationDisabled"]
        assert len(events) == 1, [e.get("reason") for e in api.objects("events", NS)]
        message = str(events[0].get("message", ""))
        timeline.add("event", f"{events[0].get('type')} SpeculationDisabled: {message}")
        assert events[0].get("type") == "Warning"
        assert message.startswith(f"{FLAG} removed"), message
        assert f"alpha {rollback.combined.value:.3f}" in message, message
        assert f"{rollback.combined.drafts:.0f} drafts" in message, message

        # ---- phase 3: the mix improves; after the cooldown a probe re-enables speculation
        timeline.phase("3. repetitive mix again: cooldown, probe, restart with speculation")
        improve_t = traffic.set_mix(Mix.REPETITIVE)
        wait_until(
            "a probe",
            lambda: sum(t.action is Action.ENABLE for t in decisions.transitions()) >= 2,
            cooldown_s + 120,
        )
        probe = [t for t in decisions.transitions() if t.action is Action.ENABLE][-1]
        assert probe.transition.from_state.value == "RolledBack"
        assert probe.transition.to_state.value == "Probing"
        assert probe.at >= rollback.at + cooldown_s - 1
        timeline.add(
            "test",
            f"probe {probe.at - rollback.at:.1f} s after the rollback "
            f"({probe.at - improve_t:.1f} s after the mix improved)",
        )
        assert probe.transition.cause is Cause.PROBE, probe.reason
        enabled = [e for e in api.objects("events", NS) if e.get("reason") == "SpeculationEnabled"]
        assert len(enabled) == 2, [e.get("message") for e in enabled]
        assert any("cooldown over" in str(e.get("message")) for e in enabled), enabled
        wait_until("args with the flag", lambda: spec_value(canary_args(api)) == SPEC, 30)
        wait_until(
            "the spec-on canary ready",
            lambda: newest_ready(runtime, probe.at - 1) is not None,
            READY_TIMEOUT_S,
        )
        on = newest_ready(runtime, probe.at - 1)
        assert on is not None and on.speculative
        assert spec_value(list(on.cmdline)) == SPEC, on.cmdline
        assert on.metrics_at_ready is not None and on.metrics_at_ready.spec_families
        timeline.add("test", f"{on.pod}: spec-on vLLM ready in {on.ready_seconds:.1f} s")
        # The spec-off incarnation is gone, and what it exposed until the end had no spec series.
        off_final = next(i for i in runtime.incarnations(CANARY) if i.pod == off.pod)
        assert off_final.stopped_at is not None
        if off_final.metrics_at_stop is not None:
            assert not off_final.metrics_at_stop.spec_families
            timeline.add(
                "check",
                f"{off.pod} at stop: {off_final.metrics_at_stop.generation_tokens:.0f} tokens "
                f"served, spec series {sorted(off_final.metrics_at_stop.spec_families)}",
            )
        wait_until(
            "drafts on the re-enabled canary",
            lambda: scrape_metrics(f"{on.url}/metrics").drafts > 0,
            60,
        )
        page = scrape_metrics(f"{on.url}/metrics")
        timeline.add(
            "check",
            f"{on.pod} exposes {len(page.spec_families)} {SPEC_PREFIX}_* families; "
            f"{page.drafts:.0f} drafts so far",
        )
        wait_until("state On again", lambda: decisions.state() == "On", 360)
        phase3_t1 = time.time()
        pairs = compare_alpha(
            decisions, sampler, traffic, timeline, since=on.ready_at or probe.at, until=phase3_t1
        )
        for mix, mine, theirs, _n in pairs:
            if mix is Mix.REPETITIVE:
                assert abs(mine - theirs) <= ALPHA_TOLERANCE, (mine, theirs)
        states = [
            (t.transition.from_state.value, t.transition.to_state.value)
            for t in decisions.transitions()
        ]
        assert states == [
            ("Off", "Probing"),
            ("Probing", "On"),
            ("On", "RolledBack"),
            ("RolledBack", "Probing"),
            ("Probing", "On"),
        ], states
        assert len(runtime.incarnations(CANARY)) == 3
        assert len(runtime.incarnations(BASELINE)) == 1
        timeline.add("load", traffic.summary())
        passed = True
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        timeline.close()
        errors: list[str] = []
        while stack:
            what, stop = stack.pop()
            try:
                stop()
            except Exception as exc:
                errors.append(f"stopping {what}: {exc!r}")
        if runtime is not None:
            for inc in runtime.incarnations():
                stopped = f"+{timeline.rel(inc.stopped_at):.1f}s" if inc.stopped_at else "NO"
                timeline.add(
                    "teardown",
                    f"{inc.pod}: started +{timeline.rel(inc.started_at):.1f}s, ready after "
                    f"{inc.ready_seconds or float('nan'):.1f} s, stopped "
                    f"{stopped} "
                    f"(exit {inc.exit_code}, stop took {inc.stop_seconds or float('nan'):.1f} s);"
                    f" log {inc.log_path}",
                )
            for inc in runtime.incarnations():
                if passed and inc.exit_code == 0 and inc.ready_at is not None:
                    continue
                # Rotated away with pytest's temp dirs later: the log's end goes in the timeline.
                try:
                    lines = Path(inc.log_path).read_text(errors="replace").splitlines()[-12:]
                except OSError as exc:
                    lines = [f"(log unreadable: {exc})"]
                for line in lines:
                    timeline.add("vllm-log", f"{inc.pod}: {line[:300]}", at=inc.stopped_at)
        for e in errors:
            timeline.add("teardown", e)
        with capsys.disabled():
            print(timeline.render(), flush=True)
    assert not errors, errors
    for inc in runtime.incarnations():
        assert inc.argv[inc.argv.index("--host") + 1] == "127.0.0.1", inc.argv
        assert inc.stopped_at is not None, f"{inc.pod} still running"
        if inc.pid is not None:
            assert not Path(f"/proc/{inc.pid}").exists() or _zombie(inc.pid), inc.pid


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


# ---------------------------------------------------------------- the runtime, fast


@pytest.fixture
def fake_home(tmp_path: Path) -> Iterator[Path]:
    yield fake_vllm_home(tmp_path)


def test_vllm_e2e_runtime_restarts_the_process_with_patched_args(
    fake_home: Path, tmp_path: Path
) -> None:
    """The runtime under the kubelet runner, with a stand-in vLLM: a patch restarts it."""
    sd = tmp_path / "sd" / "targets.json"
    runtime = VllmRuntime(home=fake_home, file_sd=sd, log_dir=tmp_path, probe_period_s=0.05)
    assert json.loads(sd.read_text()) == []
    with ApiServer(kubelet=None) as api:
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.put(deployment(CANARY, "canary", speculative=True))
        kubelet = KubeletRunner(api, runtime, namespace=NS, poll_seconds=0.05)
        api.kubelet = kubelet.hook
        try:
            kubelet.start()
            wait_until("ready", lambda: runtime.ready_url(CANARY) is not None, 20, poll_s=0.05)
            first = runtime.current(CANARY)
            assert first is not None and first.speculative
            assert spec_value(list(first.cmdline)) == SPEC  # the kernel's view of the process
            assert first.metrics_at_ready is not None
            assert first.metrics_at_ready.spec_families == {
                "vllm:spec_decode_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens",
            }
            [group] = json.loads(sd.read_text())
            assert group["targets"] == [f"127.0.0.1:{first.port}"]
            assert group["labels"] == {
                "pod": first.pod,
                "namespace": NS,
                "deployment": CANARY,
                "role": "canary",
                "slice": "chat",
            }
            pod = api.get("pods", NS, first.pod)
            assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(first.port)
            assert pod["spec"]["containers"][0]["args"] == canary_args(api)

            dep = api.get("deployments", NS, CANARY, group="apps")
            args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
            dep["spec"]["template"]["spec"]["containers"][0]["args"] = args[:-2]  # flag off
            api.put(dep)
            wait_until(
                "restarted without the flag",
                lambda: (
                    (c := runtime.current(CANARY)) is not None
                    and c.pod != first.pod
                    and c.ready_at is not None
                ),
                20,
                poll_s=0.05,
            )
            second = runtime.current(CANARY)
            assert second is not None and not second.speculative
            assert second.cmdline and not has_flag(second.cmdline, FLAG)
            assert second.metrics_at_ready is not None
            assert not second.metrics_at_ready.spec_families
            old = next(i for i in runtime.incarnations(CANARY) if i.pod == first.pod)
            assert old.stopped_at is not None and old.metrics_at_stop is not None
            assert old.metrics_at_stop.spec_families
            assert not Path(f"/proc/{old.pid}").exists() or _zombie(old.pid or 0)
            [group] = json.loads(sd.read_text())
            assert group["labels"]["pod"] == second.pod

            # A container that dies is started again in the same pod, on a new port.
            runtime.kill(second.pod)
            wait_until(
                "the container restarted",
                lambda: (
                    (c := runtime.current(CANARY)) is not None
                    and c.started_at > second.started_at
                    and c.ready_at is not None
                ),
                20,
                poll_s=0.05,
            )
            third = runtime.current(CANARY)
            assert third is not None and third.pod == second.pod and third.port != second.port
            died = [i for i in runtime.incarnations(CANARY) if i.pod == second.pod]
            assert len(died) == 2 and died[0].stopped_at is not None
            assert kubelet.pods()[second.pod]["restarts"] == 1
        finally:
            kubelet.stop()
            runtime.close()
    assert json.loads(sd.read_text()) == []
    assert all(i.stopped_at is not None for i in runtime.incarnations())

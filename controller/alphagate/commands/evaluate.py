"""`alphagate evaluate --policy FILE`: one evaluation of a policy now, without acting.

Reads the policy's pools from a source (the policy's own, ``--prometheus URL``, or pods given
with ``--scrape-target slice:role=URL``), runs the same core the controller runs
(``alphagate.core.evaluate.evaluate``) and prints per-slice evidence, each check's verdict and
the decision it would take. Nothing is patched.

The controller remembers its state between windows; a one-shot run cannot, so it assumes one:
``--state auto`` (default) takes On when a canary pool shows spec-decode series (even all at
zero: an idle canary is speculating with no data, Inconclusive, never "off"), else Off. A
fresh memory means streaks start at zero: a first Pass or Fail holds until the policy's
consecutive-window count is met, and the reason says so.

Pod scrapes read counters since each pod started (``--scrape-seconds 0``, the default) or
the increase over a live sample of that many seconds (two scrapes).

The sources and the kubernetes client are imported when the command runs, not when the CLI
starts (help, and `inspect`, which shares the draft-length text).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from alphagate.config import (
    PrometheusSettings,
    SourceKind,
    SpeculativeCanary,
    SpeculativeCanarySpec,
)
from alphagate.core import timing
from alphagate.core.draft_length import DraftLengthReport
from alphagate.core.evaluate import evaluate
from alphagate.core.histogram import quantile
from alphagate.core.insights import Insights, analyse
from alphagate.core.model import (
    AcceptanceEvidence,
    Evaluation,
    LatencyEvidence,
    Memory,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    State,
)
from alphagate.core.resolution import describe
from alphagate.errors import PolicyError, SourceError
from alphagate.kube.insights_status import insights_status

if TYPE_CHECKING:
    from alphagate.sources import Source
    from alphagate.sources.discovery import Target
    from alphagate.sources.scrape import ScrapeSource

MAX_SCRAPE_SECONDS = 3600.0


class AssumedState(StrEnum):
    AUTO = "auto"
    OFF = "Off"
    PROBING = "Probing"
    ON = "On"


def load_policy(path: Path, name: str | None) -> SpeculativeCanary:
    from alphagate.commands.policy import load_file

    docs = load_file(path)
    bad = [d for d in docs if not d.ok]
    if bad:
        lines = [
            f"{d.where}: {p.path or '<root>'}"
            + (f" (line {p.line})" if p.line else "")
            + f": {p.message}"
            for d in bad
            for p in d.problems
        ]
        raise PolicyError("; ".join(lines), where=str(path))
    resources = [d.resource for d in docs if d.resource is not None]
    if name is not None:
        picked = [r for r in resources if r.metadata.name == name]
        if not picked:
            known = ", ".join(r.metadata.name for r in resources)
            raise PolicyError(
                f"no resource named {name!r} (the file has: {known})", where=str(path)
            )
        return picked[0]
    if len(resources) > 1:
        known = ", ".join(r.metadata.name for r in resources)
        raise PolicyError(
            f"the file holds several resources ({known}); pick one with --name", where=str(path)
        )
    return resources[0]


def parse_scrape_targets(values: list[str]) -> dict[tuple[str, Role], list[Target]]:
    from alphagate.sources.discovery import Target

    out: dict[tuple[str, Role], list[Target]] = {}
    for raw in values:
        key, sep, url = raw.partition("=")
        slice_name, colon, role = key.partition(":")
        if not sep or not colon or not slice_name or not url.startswith(("http://", "https://")):
            raise typer.BadParameter(
                f"{raw!r}: expected slice:role=http://host:port/metrics",
                param_hint="--scrape-target",
            )
        try:
            r = Role(role)
        except ValueError:
            raise typer.BadParameter(
                f"{raw!r}: role must be canary or baseline, got {role!r}",
                param_hint="--scrape-target",
            ) from None
        out.setdefault((slice_name, r), []).append(Target(url=url, pod=url))
    return out


def _check_slices(
    spec: SpeculativeCanarySpec, targets: dict[tuple[str, Role], list[Target]]
) -> None:
    known = {s.name for s in spec.slices}
    unknown = sorted({s for s, _ in targets} - known)
    if unknown:
        raise typer.BadParameter(
            f"slices {unknown} are not in the policy (it has {sorted(known)})",
            param_hint="--scrape-target",
        )


def _scrape_observe(
    source: ScrapeSource, spec: SpeculativeCanarySpec, seconds: float, interval: float
) -> Observation:
    """One observation from pod scrapes: since each pod started, or over a live sample."""
    if seconds <= 0:
        now = time.time()
        obs = source.observe(spec, start=0.0, end=now, interval_seconds=interval)
        # The window is the pods' lifetime: from the earliest `_created` stamp (0 when the
        # stamps are missing or not on this clock, e.g. a simulator's epoch).
        starts = [s.start for p in obs.pools for s in p.acceptance if 0 < s.start < now]
        window = now - min(starts) if starts else 0.0
        return dataclasses.replace(obs, window_seconds=window)
    t0 = time.time()
    source.observe(spec, start=t0 - seconds, end=t0, interval_seconds=seconds)
    time.sleep(min(seconds, MAX_SCRAPE_SECONDS))  # the sample itself, bounded
    t1 = time.time()
    return source.observe(spec, start=t0, end=t1, interval_seconds=t1 - t0)


def _assumed(state: AssumedState, obs: Observation) -> State:
    if state is not AssumedState.AUTO:
        return State(state.value)
    speculating = any(p.role is Role.CANARY and p.speculating for p in obs.pools)
    return State.ON if speculating else State.OFF


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("+Inf" if obj > 0 else "-Inf")
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, StrEnum):
        return obj.value
    return obj


def _pool_json(pool: PoolObservation) -> dict[str, Any]:
    drafts = sum(s.drafts for s in pool.acceptance)
    tokens = sum(s.draft_tokens for s in pool.acceptance)
    accepted = sum(s.accepted_tokens for s in pool.acceptance)
    return {
        "slice": pool.slice,
        "role": pool.role.value,
        "pods": pool.pods,
        "error": pool.error,
        "batches": len(pool.acceptance),
        "drafts": drafts,
        "draft_tokens": tokens,
        "accepted_tokens": accepted,
        "alpha": accepted / tokens if tokens > 0 else math.nan,
        "speculating": pool.speculating,
        "spec_series": pool.spec_series,
        "no_data": pool.no_data,
        "generation_tokens": pool.generation_tokens,
        "itl_p99": quantile(0.99, pool.itl),
        "tpot_p99": quantile(0.99, pool.tpot),
        "itl_count": pool.itl.total if pool.itl else 0.0,
        "tpot_count": pool.tpot.total if pool.tpot else 0.0,
    }


def _insights_json(ins: Insights | None) -> dict[str, Any] | None:
    if ins is None:
        return None
    return insights_status(ins).model_dump(mode="json", by_alias=True, exclude_none=True)


def draft_text(d: DraftLengthReport) -> list[str]:
    """The draft-length recommendation and its reason, as `evaluate` and `inspect` print it."""
    rates = ", ".join(f"{p.unconditional:.3f}" for p in d.positions)
    return [
        f"draft length K={d.configured_k}: {d.advice.value}, recommended K={d.recommended_k}"
        f" (position rates {rates or 'n/a'}; cost {d.cost.per_position:.3g} per position, "
        f"{d.cost.source.value})",
        f"  {d.reason}",
    ]


def _insights_text(ins: Insights) -> list[str]:
    out = []
    if ins.draft is not None:
        out.extend(draft_text(ins.draft))
    g = ins.diagnosis
    if g is not None:
        out.append(f"latency shape {g.shape.value}: {g.reason}")
    out.append(f"outputs: {ins.outputs.finding.value}: {ins.outputs.reason}")
    return out


def to_json(
    resource: SpeculativeCanary,
    source: str,
    obs: Observation,
    assumed: State,
    ev: Evaluation,
    insights: Insights | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = _clean(
        {
            "policy": {"name": resource.metadata.name, "namespace": resource.metadata.namespace},
            "source": source,
            "at": obs.at,
            "window_seconds": obs.window_seconds,
            "source_error": obs.source_error,
            "scrape_interval_seconds": obs.scrape_interval_seconds,
            "assumed_state": assumed.value,
            "pools": [_pool_json(p) for p in obs.pools],
            "estimates": {k: dataclasses.asdict(v) for k, v in ev.estimates.items()},
            "weights": ev.weights,
            "combined": dataclasses.asdict(ev.combined) if ev.combined else None,
            "checks": [
                {
                    "check": c.name,
                    "kind": c.kind.value,
                    "slice": c.slice,
                    "verdict": c.verdict.value,
                    "reason": c.reason,
                    "evidence": c.flat_evidence(),
                }
                for c in ev.checks
            ],
            "verdict": ev.verdict.value,
            "action": ev.action.value,
            "reason": ev.reason,
            "state_after": ev.memory.state.value,
            "target_speculation_on": ev.target_speculation_on,
            "alerts": list(ev.alerts),
            "acted": False,
        }
    )
    out["insights"] = _insights_json(insights)
    return out


def _ms(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x * 1000:.1f} ms"


def render_text(
    resource: SpeculativeCanary,
    source: str,
    obs: Observation,
    assumed: State,
    ev: Evaluation,
    *,
    since_start: bool = False,
    insights: Insights | None = None,
) -> str:
    spec = resource.spec
    span = "counters since pod start" if since_start else f"window {obs.window_seconds:.0f}s"
    out = [
        f"policy {resource.metadata.namespace}/{resource.metadata.name}  source {source}",
        f"{span} ending "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(obs.at))}"
        f"  assumed state {assumed.value}",
    ]
    if obs.source_error:
        out.append(f"source error: {obs.source_error}")
    for s in spec.slices:
        weight = ev.weights.get(s.name, math.nan)
        out.append(f"slice {s.name}  traffic weight {weight:.2f}")
        est = ev.estimates.get(s.name)
        if est is not None:
            blocks = f" of {est.block_seconds:g} s" if math.isfinite(est.block_seconds) else ""
            out.append(
                f"  alpha {est.value:.3f} [{est.lower:.3f}, {est.upper:.3f}]"
                f" at {est.confidence:.0%}"
                f" ({est.method}, {est.batches} batches{blocks}, {est.drafts:.0f} drafts)"
                f"  mean acceptance length {est.mean_acceptance_length:.2f}"
            )
        for role in (Role.CANARY, Role.BASELINE):
            pool = obs.pool(s.name, role)
            if pool is None:
                continue
            p = _pool_json(pool)
            if pool.error:
                out.append(f"  {role.value:<8} error: {pool.error}")
                continue
            if pool.acceptance:
                spec_part = f"alpha {p['alpha']:.3f} over {p['batches']} batches"
            elif pool.speculating:
                why = pool.no_data.value if pool.no_data is not None else "no drafts"
                spec_part = f"speculating, no data ({why})"
            else:
                spec_part = "no spec-decode series"
            out.append(
                f"  {role.value:<8} pods {pool.pods}  {spec_part}"
                f"  tokens {pool.generation_tokens:.0f}"
                f"  ITL P99 {_ms(p['itl_p99'])}  TPOT P99 {_ms(p['tpot_p99'])}"
            )
    if ev.combined is not None and len(spec.slices) > 1:
        comb = ev.combined
        out.append(
            f"combined alpha {comb.value:.3f} [{comb.lower:.3f}, {comb.upper:.3f}] ({comb.method})"
        )
    out.append("checks")
    for check in ev.checks:
        out.append(f"  {check.name:<24} {check.verdict.value:<12} {check.reason}")
        lat = check.evidence if isinstance(check.evidence, LatencyEvidence) else None
        if lat is not None and lat.tail is not None and not lat.layout_in_reason:
            where = describe(lat.tail.resolution, lat.tail.quantile)
            out.append(f"  {'':<24} {'':<12} quantile at these buckets: {where}")
    for check in ev.checks:
        found = check.evidence
        if isinstance(found, AcceptanceEvidence) and found.judgeable is not None:
            from alphagate.kube.events import judgeable_message

            text = judgeable_message(found.judgeable, check.slice or "")
            out.append(f"not judgeable: {text}")
    would = {
        "enable": "turn speculation ON",
        "disable": "turn speculation OFF",
        "hold": "change nothing",
        "promote": "promote the config to the stable fleet",
    }[ev.action.value]
    out.append(f"verdict {ev.verdict.value}: the controller would {would} ({ev.action.value})")
    out.append(f"reason: {ev.reason}")
    if ev.alerts:
        out.append(f"alerts: {', '.join(ev.alerts)}")
    if insights is not None:
        out.extend(_insights_text(insights))
    out.append("(evaluate never acts: nothing was patched)")
    return "\n".join(out)


def evaluate_command(
    policy: Path = typer.Option(..., "--policy", "-p", help="A SpeculativeCanary YAML file."),
    name: str | None = typer.Option(
        None, "--name", help="Which resource, if the file has several."
    ),
    prometheus: str | None = typer.Option(
        None, "--prometheus", help="Prometheus URL (overrides the policy's source)."
    ),
    config_file: Path | None = typer.Option(
        None,
        "--config",
        help="The controller's config file (the Prometheus endpoint the policy names).",
    ),
    scrape_target: list[str] = typer.Option(
        [], "--scrape-target", help="slice:role=URL of a pod's /metrics; repeatable."
    ),
    scrape_seconds: float = typer.Option(
        0.0, "--scrape-seconds", help="Pod scrapes: sample this long (0: since pod start)."
    ),
    namespace: str | None = typer.Option(None, "--namespace", help="Pods' namespace (podScrape)."),
    server: str | None = typer.Option(None, "--server", help="Kubernetes API URL (podScrape)."),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="kubeconfig (podScrape)."),
    window: float | None = typer.Option(None, "--window", help="Seconds (default: the policy's)."),
    state: AssumedState = typer.Option(AssumedState.AUTO, "--state", help="State to assume."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """One evaluation of a policy now: evidence, verdicts, and the decision it would take."""
    if prometheus and scrape_target:
        raise typer.BadParameter("use --prometheus or --scrape-target, not both")
    if not 0 <= scrape_seconds <= MAX_SCRAPE_SECONDS:
        raise typer.BadParameter(
            f"must be within 0..{MAX_SCRAPE_SECONDS:.0f}", param_hint="--scrape-seconds"
        )
    resource = load_policy(policy, name)
    spec = resource.spec
    interval = spec.timing.interval_seconds
    span = window if window is not None else spec.timing.window_seconds
    if span <= 0:
        raise typer.BadParameter("must be positive", param_hint="--window")

    from alphagate.sources.discovery import KubeDiscovery, StaticDiscovery
    from alphagate.sources.endpoints import PrometheusEndpoint, check_url
    from alphagate.sources.endpoints import load as endpoints_load
    from alphagate.sources.prometheus import PrometheusSource
    from alphagate.sources.scrape import ScrapeSource

    src: Source
    if scrape_target:
        targets = parse_scrape_targets(scrape_target)
        _check_slices(spec, targets)
        src = ScrapeSource(StaticDiscovery(targets), since_start=scrape_seconds <= 0)
        label = f"pod scrape ({sum(len(v) for v in targets.values())} targets)"
    elif prometheus or spec.source.kind is SourceKind.PROMETHEUS:
        wanted = spec.source.prometheus or PrometheusSettings()
        if prometheus:  # the person at the terminal names the Prometheus: their own endpoint
            try:
                endpoint = PrometheusEndpoint(url=check_url(prometheus))
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--prometheus") from None
        elif config_file is not None:
            try:
                endpoint = endpoints_load(config_file).prometheus_endpoint(wanted.endpoint)
            except SourceError as exc:
                raise typer.BadParameter(str(exc), param_hint="--config") from None
        else:
            raise typer.BadParameter(
                f"the policy names Prometheus endpoint {wanted.endpoint!r}: give its URL with "
                "--prometheus URL, or the controller's config file with --config FILE",
                param_hint="--prometheus",
            )
        src = PrometheusSource(endpoint, timeout_seconds=wanted.timeout_seconds)
        label = f"prometheus {endpoint.display_url}"
    else:
        from kubernetes import client

        from alphagate.kube.client import api_client, load_configuration

        cfg = load_configuration(server=server, kubeconfig=kubeconfig)
        ns = namespace or resource.metadata.namespace
        core = client.CoreV1Api(api_client(cfg))
        src = ScrapeSource(KubeDiscovery(core, ns), since_start=scrape_seconds <= 0)
        label = f"pod scrape via Kubernetes ({ns})"

    since_start = isinstance(src, ScrapeSource) and scrape_seconds <= 0
    try:
        if isinstance(src, ScrapeSource):
            obs = _scrape_observe(src, spec, scrape_seconds, interval)
        else:
            now = time.time()
            obs = src.observe(spec, start=now - span, end=now, interval_seconds=interval)
    finally:
        close = getattr(src, "close", None)
        if close is not None:
            close()
    # Prometheus: the interval and window against the scrape interval it reported (pod scrapes
    # here are one-shot reads, not the controller's cadence)
    advice = (
        timing.advise(spec, obs.scrape_interval_seconds)
        if isinstance(src, PrometheusSource)
        else ()
    )
    assumed = _assumed(state, obs)
    memory = Memory(state=assumed, since=0.0)
    rollout = Rollout(speculation_on=assumed in (State.ON, State.PROBING))
    ev = evaluate(spec, obs, memory, rollout, now=obs.at)
    ins = analyse(
        spec,
        obs,
        estimates=ev.estimates,
        combined=ev.combined,
        cost_per_position=spec.draft_length.cost_per_position,
    )
    if as_json:
        out = to_json(resource, label, obs, assumed, ev, ins)
        out["timing"] = [
            {"problem": w.problem.value, "field": w.field, "message": w.message} for w in advice
        ]
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(
            render_text(resource, label, obs, assumed, ev, since_start=since_start, insights=ins)
        )
        for w in advice:
            typer.echo(f"warn  {w.field}: {w.message}", err=True)


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate_command)

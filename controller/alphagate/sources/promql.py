"""The PromQL alphagate asks Prometheus, built from a policy's pools.

PromQL used for one pool, with `M` = the pool's matchers (slice role ``matchLabels`` plus
``source.prometheus.matchLabels``; label keys sanitised as Kubernetes SD does, ``.``/``/`` ->
``_``), `W` = the window (end - start) and `I` = the interval. Every expression is written for
both the ``vllm:`` name and the ``vllm_`` spelling a Prometheus 2 scrape stores, joined with
``or`` so one pod is never counted twice::

    acceptance batches, range query start+I..end step I, one per counter:
      sum by (instance, pod) (increase(vllm:spec_decode_num_drafts_total{M}[I]))
      sum by (instance, pod) (increase(vllm:spec_decode_num_draft_tokens_total{M}[I]))
      sum by (instance, pod) (increase(vllm:spec_decode_num_accepted_tokens_total{M}[I]))
      sum by (instance, pod, position)
        (increase(vllm:spec_decode_num_accepted_tokens_per_pos_total{M}[I]))
    traffic and pod count, instant at end:
      sum by (instance, pod) (increase(vllm:generation_tokens_total{M}[W]))
    latency, instant at end:
      sum by (le) (increase(vllm:inter_token_latency_seconds_bucket{M}[W]))
      sum (increase(vllm:inter_token_latency_seconds_sum{M}[W]))
      (and the same two for vllm:request_time_per_output_token_seconds)
    how long requests decode (canary pools: what sizes alpha's blocks), instant at end:
      sum by (le) (increase(vllm:request_decode_time_seconds_bucket{M}[W]))
      sum (increase(vllm:request_decode_time_seconds_sum{M}[W]))
    spec-decode series present when the range queries came back empty, instant at end:
      count (last_over_time(vllm:spec_decode_num_drafts_total{M}[W]))
    the latency families present, when the one the latency guard reads came back empty:
      count by (__name__) ({__name__=~"vllm[:_](inter_token_latency_seconds|...)_count",M})
    with recorded rates (``recordedRulesIntervalSeconds`` E), the counters above become
    ``E * sum by (...) (sum_over_time(alphagate:<name>:rate{M}[step - 1ms]))``, and first,
    instant at end, how far each recording rule the source reads (RECORDED) reaches (see
    ``PrometheusSource``), one series per rule, told apart by the label RULE_LABEL:
      max by (alphagate_rule) (label_replace(timestamp(alphagate:<name>:rate{M}),
        "alphagate_rule", "alphagate:<name>:rate", "", "") or ...)
    and, only when a rule has no series there, which of its raw counters the pool has:
      count by (__name__) ({__name__=~"vllm[:_](<name>|...)",M})
    scrape interval (unless the endpoint configures scrapeIntervalSeconds), at most every
    SCRAPE_PROBE_SECONDS: the ``scrapeInterval`` of the active targets whose labels match the
    pool (``GET /api/v1/targets?state=active``; unknown on backends without that API)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from alphagate import vllm, vllm_compat

LATENCY_FAMILIES: Final = tuple(sorted(vllm_compat.LATENCY))
"""The per-step and per-token histograms of every vLLM layout, the old per-step name included
(the compatibility table's)."""

_LABEL_NAME_BAD: Final = re.compile(r"[^a-zA-Z0-9_]")
_DURATION_PART: Final = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_SECONDS: Final = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}


def parse_duration(text: str) -> float | None:
    """A Prometheus duration (``1m30s``, ``500ms``) in seconds; None when it is not one."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


def label_name(key: str) -> str:
    """A pod label key as Prometheus' Kubernetes SD stores it (``app.kubernetes.io/x`` ->
    ``app_kubernetes_io_x``)."""
    return _LABEL_NAME_BAD.sub("_", key)


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def matchers(labels: Mapping[str, str]) -> str:
    """``k="v",...`` sorted by key, values escaped."""
    return ",".join(f"{label_name(k)}={quote(v)}" for k, v in sorted(labels.items()))


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds as ``30s``, anything finer in milliseconds."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"duration must be positive, got {seconds}")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _either(template: Callable[[str], str], name: str) -> str:
    return f"({template(name)}) or ({template(vllm.escaped(name))})"


def increase_by(name: str, m: str, rng: str, by: str) -> str:
    """``sum by (by) (increase(name{m}[rng]))`` for both spellings of `name`."""
    grouping = f" by ({by})" if by else ""
    return _either(lambda n: f"sum{grouping} (increase({n}{{{m}}}[{rng}]))", name)


RECORDED: Final = (
    vllm.SPEC_DRAFTS,
    vllm.SPEC_DRAFT_TOKENS,
    vllm.SPEC_ACCEPTED,
    vllm.SPEC_PER_POS,
    vllm.GENERATION_TOKENS,
    vllm.ITL + vllm.BUCKET,
    vllm.ITL + vllm.SUM,
    vllm.TPOT + vllm.BUCKET,
    vllm.TPOT + vllm.SUM,
)
"""The counters the source reads recorded (every one the shipped rules record): each rule's
reach is checked, since one rule behind or missing skews the window as much as all of them."""

RULE_LABEL: Final = "alphagate_rule"
"""The label the reach query names each recording rule's newest point by."""


def recorded_name(name: str) -> str:
    """The series deploy/monitoring/rules/alphagate-batches.yaml records for `name`: its per-pod
    rate (both spellings merged), evaluated every ``recordedRulesIntervalSeconds``."""
    return f"alphagate:{vllm.escaped(name).removesuffix(vllm.TOTAL)}:rate"


def recorded_by(every: float) -> Callable[[str, str, str, str], str]:
    """``E * sum by (by) (sum_over_time(recorded{m}[rng]))`` with E the rules' interval: the
    increase over `rng` from the recorded per-pod rates (one point per E seconds)."""

    def of(name: str, m: str, rng: str, by: str) -> str:
        grouping = f" by ({by})" if by else ""
        inner = f"sum{grouping} (sum_over_time({recorded_name(name)}{{{m}}}[{rng}]))"
        return f"{every:g} * {inner}"

    return of


@dataclass(frozen=True, slots=True)
class PoolQueries:
    """The PromQL for one pool (see the module docstring)."""

    drafts: str
    draft_tokens: str
    accepted: str
    per_position: str
    generation_tokens: str
    itl_buckets: str
    itl_sum: str
    tpot_buckets: str
    tpot_sum: str
    # per pod per interval, for the latency guard's batches (exact sums)
    tpot_pod_buckets: str = ""
    tpot_pod_sum: str = ""
    # are there spec-decode series at all over the window (when the batches came back empty)
    spec_present: str = ""
    # output lengths (finished requests) and requests running per pod, over the window
    output_length_buckets: str = ""
    output_length_sum: str = ""
    running: str = ""
    # how long the requests that finished in the window decoded (alpha's block length)
    decode_time_buckets: str = ""
    decode_time_sum: str = ""
    # recorded rates only: when each rule last recorded the pool (its newest point's time),
    # and which raw counters the pool has (a rule missing rather than no such counter)
    recorded_at: str = ""
    traffic_present: str = ""
    # which per-step/per-token latency families the pool's pods export (by name), asked only
    # when the one the latency guard reads is missing: the layout says which vLLM it needs
    latency_present: str = ""


def pool_queries(
    match_labels: Mapping[str, str],
    *,
    window_seconds: float,
    interval_seconds: float,
    recorded: float | None = None,
) -> PoolQueries:
    return queries(
        matchers(match_labels),
        window_seconds=window_seconds,
        interval_seconds=interval_seconds,
        recorded=recorded,
    )


def queries(
    m: str,
    *,
    window_seconds: float,
    interval_seconds: float,
    keys: tuple[str, ...] = (),
    recorded: float | None = None,
) -> PoolQueries:
    """The queries for matchers `m`, each also grouped by the label names `keys` (a batch of
    pools tells its pools apart by them, see :mod:`alphagate.sources.prombatch`). `recorded`:
    read the recorded rates, recorded every that many seconds, instead of raw counters (for
    the families the rules record; the others are read raw)."""
    w, i = duration(window_seconds), duration(interval_seconds)
    extra = "".join(f", {k}" for k in keys)
    by_keys = f" by ({extra[2:]})" if keys else ""
    pod = "instance, pod" + extra
    names = "|".join(sorted(n.removeprefix(vllm.PREFIX) for n in LATENCY_FAMILIES))
    raw = {
        "latency_present": (
            f'count by (__name__{extra}) ({{__name__=~"vllm[:_]({names}){vllm.COUNT}",{m}}})'
        ),
        "spec_present": _either(
            lambda n: f"count{by_keys} (last_over_time({n}{{{m}}}[{w}]))", vllm.SPEC_DRAFTS
        ),
        "output_length_buckets": increase_by(
            vllm.REQUEST_GENERATION_TOKENS + vllm.BUCKET, m, w, vllm.LE + extra
        ),
        "output_length_sum": increase_by(
            vllm.REQUEST_GENERATION_TOKENS + vllm.SUM, m, w, extra[2:]
        ),
        "decode_time_buckets": increase_by(vllm.DECODE_TIME + vllm.BUCKET, m, w, vllm.LE + extra),
        "decode_time_sum": increase_by(vllm.DECODE_TIME + vllm.SUM, m, w, extra[2:]),
        # mean over the window per pod (engines of a pod add up), then the mean over pods
        "running": _either(
            lambda n: f"avg{by_keys} (sum by ({pod}) (avg_over_time({n}{{{m}}}[{w}])))",
            vllm.RUNNING,
        ),
    }
    of: Callable[[str, str, str, str], str] = increase_by
    if recorded:
        # timestamp() drops the name: each rule's points are labelled before they are joined
        reach = " or ".join(
            f'label_replace(timestamp({recorded_name(n)}{{{m}}}), "{RULE_LABEL}", '
            f'"{recorded_name(n)}", "", "")'
            for n in RECORDED
        )
        raw["recorded_at"] = f"max by ({RULE_LABEL}{extra}) ({reach})"
        counters = "|".join(n.removeprefix(vllm.PREFIX) for n in RECORDED)
        raw["traffic_present"] = (
            f'count by (__name__{extra}) ({{__name__=~"vllm[:_]({counters})",{m}}})'
        )
        # One recorded point per `recorded` seconds: a range 1 ms short of the step holds
        # step / recorded of them whatever the phase (Prometheus 2 ranges include both ends).
        of = recorded_by(recorded)
        w, i = duration(window_seconds - 0.001), duration(interval_seconds - 0.001)
    return PoolQueries(
        drafts=of(vllm.SPEC_DRAFTS, m, i, pod),
        draft_tokens=of(vllm.SPEC_DRAFT_TOKENS, m, i, pod),
        accepted=of(vllm.SPEC_ACCEPTED, m, i, pod),
        per_position=of(vllm.SPEC_PER_POS, m, i, f"{pod}, {vllm.POSITION}"),
        generation_tokens=of(vllm.GENERATION_TOKENS, m, w, pod),
        itl_buckets=of(vllm.ITL + vllm.BUCKET, m, w, vllm.LE + extra),
        itl_sum=of(vllm.ITL + vllm.SUM, m, w, extra[2:]),
        tpot_buckets=of(vllm.TPOT + vllm.BUCKET, m, w, vllm.LE + extra),
        tpot_sum=of(vllm.TPOT + vllm.SUM, m, w, extra[2:]),
        tpot_pod_buckets=of(vllm.TPOT + vllm.BUCKET, m, i, f"{pod}, {vllm.LE}"),
        tpot_pod_sum=of(vllm.TPOT + vllm.SUM, m, i, pod),
        **raw,
    )

"""One Prometheus-path pool's answers into its PoolObservation.

`PrometheusSource._pool` (`sources/prometheus.py`) asks these questions of an `Asker` (the
source itself, one query each, or a batch's shared answers, `sources/prombatch.py`): the
batches of a window, the latency histograms and per-pod TPOT samples, running requests, decode
times, whether recorded rates reach the window's end, and whether the pods' vLLM is too old for
the guard's metric. Each raises a classified SourceError for what it cannot use.
"""

from __future__ import annotations

import math
from typing import Final

from alphagate import vllm
from alphagate.config import LatencyMetric
from alphagate.core.model import AcceptanceSample, Buckets, LatencySample, NoData, RequestLives
from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources.common import (
    MAX_POSITIONS,
    HistSum,
    check_finite,
    has_drafts,
    per_position_tuple,
    sorted_samples,
)
from alphagate.sources.layout import layout_error
from alphagate.sources.page_builder import parse_number
from alphagate.sources.promql import (
    LATENCY_FAMILIES,
    RECORDED,
    RULE_LABEL,
    PoolQueries,
    recorded_name,
)
from alphagate.sources.promwire import Asker, pod_of
from alphagate.vllm_compat import layout_of

RECORDED_LAG_EVALUATIONS: Final = 2
"""Recorded rates whose newest point is older than this many rule intervals at the window's
end are stale: one evaluation late is the rules' own pace (a point is written after its group
ran), two missed mean the rules are behind (or stopped)."""


def layout_check(ask: Asker, expr: str, metric: LatencyMetric, at: float, where: str) -> None:
    """Raise the pool's EMPTY error when its pods' latency families are a vLLM layout too old
    for the guard's `metric` (vllm_compat); nothing for a layout it cannot place."""
    names = {
        vllm.unescaped(p.labels.get("__name__", "")).removesuffix(vllm.COUNT)
        for p in ask.query(expr, at=at)
    }
    seen = layout_of(
        {*names, vllm.base(vllm.GENERATION_TOKENS)},
        examined={*LATENCY_FAMILIES, vllm.base(vllm.GENERATION_TOKENS)},
    )
    err = layout_error([seen], metric, where)
    if err is not None:
        raise err


def recorded_reach(ask: Asker, q: PoolQueries, end: float, every: float, where: str) -> None:
    """Raise STALE unless every recorded rate the pool reads reaches the window's end.

    The recorded points of a window are summed as its counts, whatever their number: with
    the rules behind (a slow group skips evaluations and writes late), stopped or removed, a
    window would be judged on its older part, or on none, as if that were all that happened;
    with one rule missing or behind (a hand-edited rules file), its counter alone is short
    (accepted tokens short of drafts read as a low alpha). So each rule's newest point (over
    the pool's pods) must be at most RECORDED_LAG_EVALUATIONS rule intervals old at `end`,
    and a rule with no series while the pool has its raw counters is missing. A counter the
    pods do not export (no speculation, an older vLLM) has nothing to check."""
    newest: dict[str, float] = {}
    for p in ask.query(q.recorded_at, at=end):
        rule = p.labels.get(RULE_LABEL, "")
        newest[rule] = max(newest.get(rule, p.value), p.value)
    allowed = RECORDED_LAG_EVALUATIONS * every
    behind = {r: end - t for r, t in newest.items() if end - t > allowed + 1e-3}
    missing: list[str] = []
    if len(newest) < len(RECORDED):
        raw = {
            recorded_name(p.labels.get("__name__", ""))
            for p in ask.query(q.traffic_present, at=end)
            if p.value > 0
        }
        missing = sorted(raw - newest.keys())
    if behind:
        lag = max(behind.values())
        why = (
            f"the recorded rates end up to {lag:.1f}s before the window's end (at most "
            f"{allowed:g}s, {RECORDED_LAG_EVALUATIONS} rule intervals) for "
            f"{', '.join(sorted(behind))}: the recording rules are behind; see "
            f"prometheus_rule_group_last_duration_seconds"
        )
    elif missing:
        why = (
            f"no recorded rates ({', '.join(missing)}) although the pods' counters exist: are "
            f"the recording rules (alphagate-batches.yaml) installed, every rule of them?"
        )
    else:
        return
    raise SourceError(SourceErrorKind.STALE, why, target=where)


def lives(ask: Asker, q: PoolQueries, at: float) -> RequestLives | None:
    """The pool's decode times over the window (what sizes alpha's blocks); None when the
    pods export none or no request finished."""
    h = buckets(ask, q.decode_time_buckets, q.decode_time_sum, at)
    return RequestLives(h) if h is not None and h.total > 0 else None


def running(ask: Asker, expr: str, at: float) -> float | None:
    """Requests running per pod, averaged over the window; None when not exported."""
    points = ask.query(expr, at=at)
    if not points:
        return None
    check_finite((p.value for p in points), vllm.RUNNING, expr)
    return points[0].value


def acceptance(
    ask: Asker, q: PoolQueries, start: float, end: float, interval: float
) -> tuple[tuple[AcceptanceSample, ...], bool, NoData | None]:
    """The batches, whether spec-decode series exist, and why there are no batches."""
    first = min(start + interval, end)
    series: dict[str, dict[tuple[str, float], float]] = {}
    for name, expr in (
        ("drafts", q.drafts),
        ("draft_tokens", q.draft_tokens),
        ("accepted", q.accepted),
    ):
        points = ask.query_range(expr, start=first, end=end, step=interval)
        check_finite((p.value for p in points), name, expr)
        series[name] = {(pod_of(p.labels), p.at): p.value for p in points}
    if not series["drafts"]:
        # no series (speculation off: expected) or series with too few scrapes per interval
        present = ask.query(q.spec_present, at=end) if q.spec_present else []
        if any(p.value > 0 for p in present):
            return (), True, NoData.SPARSE_SCRAPES
        return (), False, None
    per_pos: dict[tuple[str, float], dict[int, float]] = {}
    for p in ask.query_range(q.per_position, start=first, end=end, step=interval):
        check_finite((p.value,), "per_position", q.per_position)
        pos = p.labels.get(vllm.POSITION, "")
        if not (pos.isascii() and pos.isdigit()):
            continue  # not a draft position: not a series we can use
        if len(pos) > 4 or int(pos) >= MAX_POSITIONS:
            raise SourceError(
                SourceErrorKind.QUERY_ERROR,
                f"draft position {pos[:12]!r} is beyond the {MAX_POSITIONS} alphagate accepts",
                target=q.per_position,
            )
        per_pos.setdefault((pod_of(p.labels), p.at), {})[int(pos)] = p.value
    out = []
    for key, drafts in series["drafts"].items():
        pod, at = key
        if key not in series["draft_tokens"] or key not in series["accepted"]:
            continue  # a point without all three counters cannot be a batch
        sample = AcceptanceSample(
            drafts=drafts,
            draft_tokens=series["draft_tokens"][key],
            accepted_tokens=series["accepted"][key],
            per_position=per_position_tuple(per_pos.get(key, {})),
            pod=pod,
            start=at - interval,
            end=at,
        )
        if has_drafts(sample):
            out.append(sample)
    return sorted_samples(out), True, (None if out else NoData.NO_TRAFFIC)


def latency_samples(
    ask: Asker, q: PoolQueries, start: float, end: float, interval: float
) -> tuple[LatencySample, ...]:
    """Per pod per interval TPOT increments (exact _sum, bucket counts): guard batches."""
    if not q.tpot_pod_buckets:
        return ()
    first = min(start + interval, end)
    counts: dict[tuple[str, float], dict[float, float]] = {}
    for p in ask.query_range(q.tpot_pod_buckets, start=first, end=end, step=interval):
        check_finite((p.value,), "histogram buckets", q.tpot_pod_buckets)
        try:
            le = parse_number(p.labels.get(vllm.LE, "NaN"))
        except ValueError:
            continue
        if not math.isnan(le):
            counts.setdefault((pod_of(p.labels), p.at), {})[le] = p.value
    if not counts:
        return ()
    sums = {}
    for p in ask.query_range(q.tpot_pod_sum, start=first, end=end, step=interval):
        check_finite((p.value,), "histogram sum", q.tpot_pod_sum)
        sums[(pod_of(p.labels), p.at)] = p.value
    out = []
    for (pod, at), by_le in counts.items():
        bounds = tuple(sorted(by_le))
        total = by_le.get(math.inf, 0.0)
        if (pod, at) not in sums or not total > 0 or bounds[-1] != math.inf:
            continue
        out.append(
            LatencySample(
                count=total,
                sum=sums[(pod, at)],
                buckets=Buckets(bounds=bounds, counts=tuple(by_le[b] for b in bounds)),
                pod=pod,
                start=at - interval,
                end=at,
            )
        )
    return tuple(sorted(out, key=lambda t: (t.pod, t.start)))


def buckets(ask: Asker, buckets_expr: str, sum_expr: str, at: float) -> Buckets | None:
    points = ask.query(buckets_expr, at=at)
    if not points:
        return None
    check_finite((p.value for p in points), "histogram buckets", buckets_expr)
    acc = HistSum()
    for p in points:
        try:
            le = parse_number(p.labels.get(vllm.LE, "NaN"))
        except ValueError:
            continue
        if not math.isnan(le):
            acc.add({le: p.value})
    totals = ask.query(sum_expr, at=at)
    check_finite((p.value for p in totals), "histogram sum", sum_expr)
    acc.sum = sum(p.value for p in totals) if totals else math.nan
    return acc.to_buckets()


__all__ = [
    "RECORDED_LAG_EVALUATIONS",
    "acceptance",
    "buckets",
    "latency_samples",
    "layout_check",
    "lives",
    "recorded_reach",
    "running",
]

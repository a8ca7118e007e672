"""The latency guard's verdict: canary against baseline (or an absolute stutter limit), on
exact sums where vLLM gives them and on the bucket question otherwise.

A Pass needs evidence that the canary is within the margin (non-inferiority), not only the
absence of a significant regression. On exact sums that evidence is the mean per token
(`latency.confirmOn: mean`, the default) or the mean and the quantile (`meanAndQuantile`);
on a pooled histogram, which has no spread for a mean test, it is the quantile. A quantile is
judged only as finely as the bucket layout resolves it (core/resolution.py): it is never
claimed within where the baseline's bucket is wider than the margin (typed `unresolvable`),
and its Fail side prints the effective margin it can see. Whatever the window cannot show is
Inconclusive, with a typed `LatencyUndecided` cause and the numbers a person needs.
`core/latency.py` holds the statistics; this module words and types the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from alphagate.config import ConfirmOn, LatencyGuard, LatencyMetric
from alphagate.core import histogram, latency, resolution
from alphagate.core.batching import Ratio
from alphagate.core.fmt import number as _fmt
from alphagate.core.model import (
    Buckets,
    CheckKind,
    CheckResult,
    ExceedanceTest,
    LatencyEvidence,
    LatencyUndecided,
    PoolLatency,
    PoolObservation,
    TailGuard,
    Verdict,
)
from alphagate.core.resolution import Resolution, TailWithin, describe
from alphagate.core.resolution import ms as _ms
from alphagate.core.resolution import quantile_name as _q

_NO_DATA: Final = (LatencyUndecided.NO_DATA,)
_FEW: Final = (LatencyUndecided.FEW_OBSERVATIONS,)
_UNTESTABLE: Final = (LatencyUndecided.UNTESTABLE,)
_UNDECIDED_TAIL: Final = {
    TailWithin.UNRESOLVABLE: LatencyUndecided.UNRESOLVABLE,
    TailWithin.NOT_SHOWN: LatencyUndecided.TAIL_NOT_SHOWN,
    TailWithin.UNTESTABLE: LatencyUndecided.UNTESTABLE,
}

Missing = list[tuple[LatencyUndecided, str]]
# A bound's excess holds a Pass back when its one-sided p-value is under this: an excess of
# at least 0.67 of its standard error. A point estimate over (p < 0.5) at one of 15-50 fine
# bounds is what chance gives a healthy canary: a canary 1.6x faster on the mean was held
# Inconclusive in 35% of windows at P90 on the plan's layout; at 0.25, 4%. A canary with 12%
# of its requests 2x over the baseline's P90 still passes in 1% of windows of 80 requests.
SUGGESTIVE: Final = 0.25


# ---------------------------------------------------------------- words


def _tail_text(t: ExceedanceTest, guard: LatencyGuard, unit: str) -> str:
    """Why the canary's tail is not shown within the limit, with the numbers that say what
    is missing (how many observations would show it at this share)."""
    worth = ""
    if math.isfinite(t.effective) and t.effective < 0.95 * t.total:
        worth = f", worth {t.effective:.0f} independent ones (clustered in time and pods)"
    share = (
        f"{t.fraction:.2%} of them above {_fmt(t.edge)} s{worth}; allowed {t.expected_fraction:.2%}"
        f", upper bound {t.upper:.2%} (p={_fmt(t.p_within, 2)})"
    )
    if math.isinf(t.needed):
        need = "more than the allowed share lies above it, so no amount of data shows it"
    else:
        need = f"about {t.needed:,.0f} {unit} would show it at this share"
    return (
        f"{_q(guard.quantile)} from {t.total:,.0f} canary {unit} cannot be told within "
        f"+{guard.max_regression_ratio:.0%}: {share}; {need}"
    )


def _describe(guard: LatencyGuard, tokens_per_step: float | None) -> str:
    q = _q(guard.quantile)
    if guard.metric is LatencyMetric.PER_TOKEN:
        return f"{q} time per output token (per token)"
    if guard.metric is LatencyMetric.PER_STEP_SCALED:
        tps = _fmt(tokens_per_step) if tokens_per_step is not None else "?"
        return f"{q} inter-token latency (per step scaled by {tps} tokens/step)"
    limit = _fmt(guard.max_step_seconds or math.nan)
    return f"{q} inter-token latency per step (absolute stutter limit {limit} s)"


def _quantile_missing(tail: TailGuard | None, guard: LatencyGuard, unit: str) -> Missing:
    """What keeps the quantile from being shown within, where a Pass needs it."""
    if tail is None:
        return [(LatencyUndecided.UNTESTABLE, f"the baseline's {_q(guard.quantile)} is unknown")]
    cause = _UNDECIDED_TAIL.get(tail.within)
    if cause is None:
        return []
    if cause is LatencyUndecided.TAIL_NOT_SHOWN and tail.pass_test is not None:
        return [(cause, _tail_text(tail.pass_test, guard, unit))]
    q, m = _q(guard.quantile), guard.max_regression_ratio
    if cause is LatencyUndecided.UNRESOLVABLE:
        return [(cause, f"{q} within +{m:.0%} is unresolvable at these buckets")]
    return [(cause, f"{q} within +{m:.0%} cannot be tested at these buckets")]


def _possible(tail: TailGuard | None) -> Missing:
    """A canary share above the Fail edge over 1 - quantile, not significantly."""
    f = tail.fail_test if tail is not None else None
    if f is None or not f.fraction > f.expected_fraction:
        return []
    return [
        (
            LatencyUndecided.POSSIBLE_REGRESSION,
            f"possible regression, not significant: {f.fraction:.2%} of canary requests above "
            f"the Fail edge {_fmt(f.edge)} s against {f.expected_fraction:.2%} allowed "
            f"(p={_fmt(f.p_value, 2)})",
        )
    ]


# ---------------------------------------------------------------- the check


@dataclass(frozen=True, slots=True)
class _Out:
    """Builds the check's results with the evidence gathered so far."""

    guard: LatencyGuard
    what: str
    slice: str | None
    evidence: LatencyEvidence

    def __call__(
        self,
        verdict: Verdict,
        text: str,
        undecided: Sequence[LatencyUndecided] = (),
        *,
        prefix: bool = True,
    ) -> CheckResult:
        evidence = replace(self.evidence, undecided=tuple(undecided))
        reason = f"{self.what}: {text}" if prefix else text
        return CheckResult(CheckKind.LATENCY, verdict, reason, evidence, self.slice)


def check_latency(
    canary: PoolObservation | None,
    baseline: PoolObservation | None,
    *,
    guard: LatencyGuard,
    tokens_per_step: float | None = None,
    slice: str | None = None,
) -> CheckResult:
    """The latency guard of canary against baseline (or an absolute stutter limit): on exact
    sums per pod (`_by_sums`) where the metric is perToken and both pools carry them, else on
    the pooled histograms (`_by_buckets`). Never raises on data: bad input is Error or
    Inconclusive with a typed cause."""
    out = _Out(
        guard,
        _describe(guard, tokens_per_step),
        slice,
        LatencyEvidence(
            metric=guard.metric,
            quantile=guard.quantile,
            max_regression_ratio=guard.max_regression_ratio,
            significance=guard.significance,
            min_count=guard.min_count,
            confirms_quantile=guard.confirm_on is ConfirmOn.MEAN_AND_QUANTILE,
        ),
    )
    if not guard.enabled:
        return out(Verdict.PASS, "latency guard disabled", prefix=False)
    absolute = guard.metric is LatencyMetric.PER_STEP_ABSOLUTE
    failed = _source_errors(out, canary, None if absolute else baseline, absolute)
    if failed is not None:
        return failed
    assert canary is not None
    if (
        guard.metric is LatencyMetric.PER_TOKEN
        and canary.tpot_samples
        and baseline is not None
        and baseline.tpot_samples
    ):
        return _by_sums(canary, baseline, guard, slice)
    return _by_buckets(out, canary, baseline, tokens_per_step)


def _source_errors(
    out: _Out, canary: PoolObservation | None, baseline: PoolObservation | None, absolute: bool
) -> CheckResult | None:
    """Error when a pool the guard needs is missing or its source failed."""
    if canary is None:
        return out(Verdict.ERROR, "no canary pool in the observation")
    if canary.error is not None:
        return out(Verdict.ERROR, f"canary source failed: {canary.error}")
    if absolute:
        return None
    if baseline is None:
        return out(Verdict.ERROR, "no baseline pool in the observation")
    if baseline.error is not None:
        return out(Verdict.ERROR, f"baseline source failed: {baseline.error}")
    return None


def _histogram(pool: PoolObservation, metric: LatencyMetric) -> Buckets | None:
    return pool.tpot if metric is LatencyMetric.PER_TOKEN else pool.itl


def _read(hist: Buckets | None, q: float) -> PoolLatency | None:
    """The pooled quantile for people to read (display only; never a limit)."""
    if hist is None or histogram.problem(hist) is not None or not hist.total > 0:
        return None
    lo, hi = histogram.bracket(q, hist)
    return PoolLatency(hist.total, histogram.quantile(q, hist), lo, hi)


def _histograms(
    out: _Out, canary: PoolObservation, baseline: PoolObservation | None, tps: float | None
) -> tuple[Buckets, Buckets | None, _Out] | CheckResult:
    """The canary's histogram (scaled to per token for perStepScaled) and the baseline's, or
    the result that stops the check."""
    metric = out.guard.metric
    absolute = metric is LatencyMetric.PER_STEP_ABSOLUTE
    c_hist = _histogram(canary, metric)
    b_hist = _histogram(baseline, metric) if baseline is not None else None
    if c_hist is None:
        return out(Verdict.INCONCLUSIVE, "no canary histogram in the window", _NO_DATA)
    bad = histogram.problem(c_hist)
    if bad is not None:
        return out(Verdict.ERROR, f"bad canary histogram: {bad}")
    if b_hist is not None and histogram.problem(b_hist) is not None:
        if not absolute:
            return out(Verdict.ERROR, f"bad baseline histogram: {histogram.problem(b_hist)}")
        b_hist = None
    if b_hist is None and not absolute:
        return out(Verdict.INCONCLUSIVE, "no baseline histogram in the window", _NO_DATA)
    if metric is LatencyMetric.PER_STEP_SCALED:
        if tps is None or not math.isfinite(tps) or tps < 1:
            return out(
                Verdict.INCONCLUSIVE,
                "no measured tokens per step to scale the canary's per-step latency by",
                _NO_DATA,
            )
        c_hist = histogram.scale(c_hist, 1.0 / tps)
        out = replace(out, evidence=replace(out.evidence, tokens_per_step=tps))
    return c_hist, b_hist, out


def _pooled_share(hist: Buckets) -> Callable[[float], Ratio | None]:
    """The share of a pooled histogram above a bound, as one batch (independent requests)."""

    def share(edge: float) -> Ratio | None:
        ex = histogram.exceedance(edge, hist)
        if ex is None:
            return None
        return Ratio(ex.fraction, ex.above, ex.total, math.nan, 0.0, 1)

    return share


def _by_buckets(
    out: _Out, canary: PoolObservation, baseline: PoolObservation | None, tps: float | None
) -> CheckResult:
    """The quantile on pooled histograms (no per-pod sums, or a per-step metric): FAIL when
    the canary's share above the Fail edge is significantly above 1 - quantile; PASS only
    when its share above the Pass edge is shown at most 1 - quantile where the layout
    resolves the margin (there is no mean test here)."""
    got = _histograms(out, canary, baseline, tps)
    if isinstance(got, CheckResult):
        return got
    c_hist, b_hist, out = got
    guard, q = out.guard, out.guard.quantile
    absolute = guard.metric is LatencyMetric.PER_STEP_ABSOLUTE
    ev = replace(out.evidence, canary=_read(c_hist, q), baseline=_read(b_hist, q))
    out = replace(out, evidence=ev)
    if c_hist.total < guard.min_count:
        text = f"too few canary observations ({c_hist.total:.0f} < minCount {guard.min_count})"
        return out(Verdict.INCONCLUSIVE, text, _FEW)
    if not absolute and b_hist is not None and b_hist.total < guard.min_count:
        text = f"too few baseline observations ({b_hist.total:.0f} < minCount {guard.min_count})"
        return out(Verdict.INCONCLUSIVE, text, _FEW)
    res = _reference(guard, c_hist, b_hist)
    if res is None:
        b_q = ev.baseline.quantile_seconds if ev.baseline is not None else math.nan
        return out(Verdict.INCONCLUSIVE, f"baseline quantile is {_fmt(b_q)}", _UNTESTABLE)
    tail = latency.tail_guard(
        res, _pooled_share(c_hist), quantile=q, significance=guard.significance
    )
    fail = tail.fail_test
    fail_p = fail.p_value if fail is not None else math.nan
    tail = replace(tail, rejected=fail_p <= guard.significance)
    limit = res.bucket_hi if absolute else res.bucket_lo * (1.0 + res.margin)
    out = replace(
        out,
        evidence=replace(out.evidence, tail=tail, limit_seconds=limit, p_adjusted=tail.decisive_p),
    )
    return _bucket_verdict(out, tail, absolute)


def _reference(guard: LatencyGuard, c_hist: Buckets, b_hist: Buckets | None) -> Resolution | None:
    """The edges at the canary's layout: around the baseline quantile's bucket, or the limit."""
    if guard.metric is LatencyMetric.PER_STEP_ABSOLUTE:
        return resolution.absolute(c_hist.bounds, float(guard.max_step_seconds or math.nan))
    return histogram.resolution_at(
        guard.quantile, b_hist, guard.max_regression_ratio, c_hist.bounds
    )


def _bucket_verdict(out: _Out, tail: TailGuard, absolute: bool) -> CheckResult:
    guard = out.guard
    res, fail = tail.resolution, tail.fail_test
    where = describe(res, guard.quantile, absolute=absolute)
    out = replace(out, evidence=replace(out.evidence, layout_in_reason=True))
    if tail.rejected and fail is not None:
        return out(
            Verdict.FAIL,
            f"regressed: {fail.fraction:.2%} of {fail.total:,.0f} canary observations above "
            f"{_fmt(fail.edge)} s, allowed {fail.expected_fraction:.2%}, "
            f"p={_fmt(fail.p_value, 2)} < {_fmt(guard.significance)} ({where})",
        )
    missing = _quantile_missing(tail, guard, "observations") + _possible(tail)
    if missing:
        return out(
            Verdict.INCONCLUSIVE,
            "not shown within the limit: " + "; ".join(t for _, t in missing) + f" ({where})",
            [u for u, _ in missing],
        )
    shown = tail.pass_test
    assert shown is not None  # SHOWN needs its test
    return out(
        Verdict.PASS,
        f"within limit: {shown.fraction:.2%} of {shown.total:,.0f} canary observations above "
        f"{_fmt(shown.edge)} s, shown at most {shown.expected_fraction:.2%} (upper bound "
        f"{shown.upper:.2%}, p={_fmt(shown.p_within, 2)}) ({where})",
    )


# ---------------------------------------------------------------- exact sums


def _by_sums(
    canary: PoolObservation,
    baseline: PoolObservation,
    guard: LatencyGuard,
    slice: str | None,
) -> CheckResult:
    """The guard on exact sums, the quantile at the layout's resolution and per-bound
    exceedance over independent batches (core/latency.py): FAIL when the family (mean, the
    quantile's Fail test, every bound) rejects anything after weighted Holm.

    PASS needs the evidence that the canary is within the margin: the speed-up's one-sided
    lower bound at or above 1 / (1 + margin) (and, with confirmOn meanAndQuantile, the
    quantile shown within at a layout that resolves the margin); no share above the Fail edge
    or any bound above its allowed share. Anything not shown is INCONCLUSIVE."""
    q, margin = guard.quantile, guard.max_regression_ratio
    report = latency.compare(
        canary.tpot_samples,
        baseline.tpot_samples,
        quantile=q,
        margin=margin,
        significance=guard.significance,
        batch_seconds=guard.batch_seconds,
    )
    tail = report.tail
    limit = tail.resolution.bucket_lo * (1.0 + margin) if tail is not None else None
    out = _Out(
        guard,
        "time per output token (per token, exact means and every bucket bound)",
        slice,
        LatencyEvidence(
            metric=guard.metric,
            quantile=q,
            max_regression_ratio=margin,
            significance=guard.significance,
            min_count=guard.min_count,
            canary=_read(report.canary_hist or canary.tpot, q),
            baseline=_read(report.baseline_hist or baseline.tpot, q),
            limit_seconds=limit,
            speedup=report.speedup,
            bounds=report.bounds,
            tail=tail,
            confirms_quantile=guard.confirm_on is ConfirmOn.MEAN_AND_QUANTILE,
            p_adjusted=report.p_adjusted,
        ),
    )
    c_count = math.fsum(t.count for t in canary.tpot_samples if math.isfinite(t.count))
    b_count = math.fsum(t.count for t in baseline.tpot_samples if math.isfinite(t.count))
    if not (c_count >= guard.min_count and b_count >= guard.min_count):
        return out(
            Verdict.INCONCLUSIVE,
            f"too few observations (canary {c_count:.0f}, baseline {b_count:.0f} < minCount "
            f"{guard.min_count})",
            _FEW,
        )
    if report.speedup is None:
        return out(
            Verdict.INCONCLUSIVE,
            "fewer than two independent batches (pods or blocks of batchSeconds) in a pool, "
            "or no spread between them: no honest comparison",
            (LatencyUndecided.FEW_BATCHES,),
        )
    return _sums_verdict(out, report)


def _sums_verdict(out: _Out, report: latency.TailReport) -> CheckResult:
    guard = out.guard
    sp, tail, margin = report.speedup, report.tail, guard.max_regression_ratio
    assert sp is not None
    if tail is not None:  # every reason below ends with `describe(tail.resolution, ...)`
        out = replace(out, evidence=replace(out.evidence, layout_in_reason=True))
    means = (
        f"canary {_ms(sp.canary_mean)} vs baseline {_ms(sp.baseline_mean)} per token, measured "
        f"speed-up {_fmt(sp.value, 3)}x [{_fmt(sp.lower, 3)}, {_fmt(sp.upper, 3)}]"
    )
    where = (
        f" ({describe(tail.resolution, guard.quantile)})"
        if tail is not None
        else f" (the baseline's {_q(guard.quantile)} is unknown: no quantile guard)"
    )
    if report.regressed:
        return out(Verdict.FAIL, f"regressed: {means}; " + _regressions(report, guard) + where)
    missing: Missing = []
    if not sp.p_within <= guard.significance:
        missing.append(
            (
                LatencyUndecided.MEAN_NOT_SHOWN,
                f"the mean is not shown within +{margin:.0%}: the speed-up's lower bound is "
                f"not above {1.0 / (1.0 + margin):.3f} (p={_fmt(sp.p_within, 2)})",
            )
        )
    if guard.confirm_on is ConfirmOn.MEAN_AND_QUANTILE:
        missing += _quantile_missing(tail, guard, "requests")
    missing += _possible(tail) + _bounds_over(report)
    if missing:
        return out(
            Verdict.INCONCLUSIVE,
            f"{means}; not shown within the limit: " + "; ".join(t for _, t in missing) + where,
            [u for u, _ in missing],
        )
    claim = "mean and quantile" if guard.confirm_on is ConfirmOn.MEAN_AND_QUANTILE else "mean"
    return out(
        Verdict.PASS,
        f"within limit ({claim}): {means}, its lower bound above {1.0 / (1.0 + margin):.3f} "
        f"(p={_fmt(sp.p_within, 2)}); no bucket bound shows more slow requests{where}",
    )


def _regressions(report: latency.TailReport, guard: LatencyGuard) -> str:
    """The rejected tests of a failing window, for people."""
    sp, tail = report.speedup, report.tail
    parts = []
    if report.mean_rejected and sp is not None:
        parts.append(
            f"mean above baseline +{guard.max_regression_ratio:.0%} (p={_fmt(sp.p_regressed, 2)})"
        )
    if tail is not None and tail.rejected and tail.fail_test is not None:
        f = tail.fail_test
        parts.append(
            f"{f.fraction:.2%} of canary requests above the {_q(guard.quantile)} Fail edge "
            f"{_fmt(f.edge)} s, allowed {f.expected_fraction:.2%} (p={_fmt(f.p_value, 2)})"
        )
    parts += [
        f"{b.canary_fraction:.2%} above {_fmt(b.bound)} s vs the baseline's "
        f"{b.baseline_fraction:.2%} above {_fmt(b.baseline_bound)} s "
        f"(allowed {b.allowed_fraction:.2%}, p={_fmt(b.p_value, 2)})"
        for b in report.bounds
        if b.rejected
    ][:3]
    return "; ".join(parts) + f" (weighted Holm at {_fmt(guard.significance)})"


def _bounds_over(report: latency.TailReport) -> Missing:
    """Bounds with an excess over the allowed share that chance alone gives rarely (p under
    SUGGESTIVE); the guarded quantile's own edge (`_possible`) blocks on its point estimate."""
    over = [
        b
        for b in report.bounds
        if b.canary_fraction > b.allowed_fraction and b.p_value < SUGGESTIVE
    ]
    if not over:
        return []
    b = max(over, key=lambda x: x.canary_fraction - x.allowed_fraction)
    return [
        (
            LatencyUndecided.POSSIBLE_REGRESSION,
            f"possible regression, not significant: {b.canary_fraction:.2%} above "
            f"{_fmt(b.bound)} s against {b.allowed_fraction:.2%} allowed "
            f"(p={_fmt(b.p_value, 2)}; {len(over)} bound(s) over)",
        )
    ]

"""The latency guard's verdict: canary against baseline (or an absolute stutter limit), on
exact sums where vLLM gives them and on the bucket question otherwise.

A Pass needs evidence that the canary is within the margin (non-inferiority), not only the
absence of a significant regression: whatever the window cannot show is Inconclusive, with a
typed `LatencyUndecided` cause and the numbers a person needs (how many requests would show
it). `core/latency.py` holds the statistics; this module words and types the verdict.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Final

from alphagate.config import LatencyGuard, LatencyMetric
from alphagate.core import histogram, latency
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
    Verdict,
)
from alphagate.core.stats import binomial_sf

_NO_DATA_L: Final = (LatencyUndecided.NO_DATA,)
_FEW: Final = (LatencyUndecided.FEW_OBSERVATIONS,)
_UNTESTABLE: Final = (LatencyUndecided.UNTESTABLE,)


def _tail_text(t: ExceedanceTest, guard: LatencyGuard, unit: str) -> str:
    """Why the canary's tail is not shown within the limit, with the numbers that say what
    is missing (how many observations would show it at this share)."""
    q = f"P{guard.quantile * 100:g}"
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
        f"{q} from {t.total:,.0f} canary {unit} cannot be told within "
        f"+{guard.max_regression_ratio:.0%}: {share}; {need}"
    )


def _describe(guard: LatencyGuard, tokens_per_step: float | None) -> str:
    q = f"P{guard.quantile * 100:g}"
    if guard.metric is LatencyMetric.PER_TOKEN:
        return f"{q} time per output token (per token)"
    if guard.metric is LatencyMetric.PER_STEP_SCALED:
        tps = _fmt(tokens_per_step) if tokens_per_step is not None else "?"
        return f"{q} inter-token latency (per step scaled by {tps} tokens/step)"
    limit = _fmt(guard.max_step_seconds or math.nan)
    return f"{q} inter-token latency per step (absolute stutter limit {limit} s)"


def _histogram(pool: PoolObservation, metric: LatencyMetric) -> Buckets | None:
    return pool.tpot if metric is LatencyMetric.PER_TOKEN else pool.itl


def check_latency(
    canary: PoolObservation | None,
    baseline: PoolObservation | None,
    *,
    guard: LatencyGuard,
    tokens_per_step: float | None = None,
    slice: str | None = None,
) -> CheckResult:
    """P-quantile latency guard of canary against baseline (or an absolute stutter limit).

    The limit is the baseline's interpolated quantile times (1 + maxRegressionRatio)
    (perStepAbsolute: maxStepSeconds). Because a regression can hide inside one coarse bucket,
    the verdict comes from the bucket question: the canary's observations above the smallest
    bucket bound >= the limit are tested one-sided against the (1 - q) share a canary within
    the limit can have at most (binomial tail). FAIL when significant at guard.significance;
    INCONCLUSIVE when the share is above (1 - q) but not significant, or below minCount;
    PASS otherwise.
    """
    metric = guard.metric
    absolute = metric is LatencyMetric.PER_STEP_ABSOLUTE
    what = _describe(guard, tokens_per_step)
    # The evidence so far: each step below fills its part (`result` reads them when called),
    # so an early stop shows how far the check got.
    scaled_by: float | None = None
    c_read: PoolLatency | None = None
    b_read: PoolLatency | None = None
    limit_seconds: float | None = None
    exceeded: ExceedanceTest | None = None

    def result(
        verdict: Verdict,
        text: str,
        *,
        prefix: bool = True,
        undecided: tuple[LatencyUndecided, ...] = (),
    ) -> CheckResult:
        evidence = LatencyEvidence(
            metric=metric,
            quantile=guard.quantile,
            max_regression_ratio=guard.max_regression_ratio,
            significance=guard.significance,
            min_count=guard.min_count,
            tokens_per_step=scaled_by,
            canary=c_read,
            baseline=b_read,
            limit_seconds=limit_seconds,
            test=exceeded,
            undecided=undecided,
        )
        reason = f"{what}: {text}" if prefix else text
        return CheckResult(CheckKind.LATENCY, verdict, reason, evidence, slice)

    if not guard.enabled:
        return result(Verdict.PASS, "latency guard disabled", prefix=False)
    if canary is None:
        return result(Verdict.ERROR, "no canary pool in the observation")
    if canary.error is not None:
        return result(Verdict.ERROR, f"canary source failed: {canary.error}")
    if not absolute:
        if baseline is None:
            return result(Verdict.ERROR, "no baseline pool in the observation")
        if baseline.error is not None:
            return result(Verdict.ERROR, f"baseline source failed: {baseline.error}")

    if (
        metric is LatencyMetric.PER_TOKEN
        and canary.tpot_samples
        and baseline is not None
        and baseline.tpot_samples
    ):
        return _by_sums(canary, baseline, guard, slice)

    c_hist = _histogram(canary, metric)
    b_hist = (
        _histogram(baseline, metric) if baseline is not None and baseline.error is None else None
    )
    if c_hist is None:
        return result(
            Verdict.INCONCLUSIVE, "no canary histogram in the window", undecided=_NO_DATA_L
        )
    bad = histogram.problem(c_hist)
    if bad is not None:
        return result(Verdict.ERROR, f"bad canary histogram: {bad}")
    if b_hist is not None:
        bad = histogram.problem(b_hist)
        if bad is not None:
            if not absolute:
                return result(Verdict.ERROR, f"bad baseline histogram: {bad}")
            b_hist = None
    elif not absolute:
        return result(
            Verdict.INCONCLUSIVE, "no baseline histogram in the window", undecided=_NO_DATA_L
        )

    if metric is LatencyMetric.PER_STEP_SCALED:
        if tokens_per_step is None or not math.isfinite(tokens_per_step) or tokens_per_step < 1:
            return result(
                Verdict.INCONCLUSIVE,
                "no measured tokens per step to scale the canary's per-step latency by",
                undecided=_NO_DATA_L,
            )
        scaled_by = tokens_per_step
        c_hist = histogram.scale(c_hist, 1.0 / tokens_per_step)

    q = guard.quantile
    c_p = histogram.quantile(q, c_hist)
    c_lo, c_hi = histogram.bracket(q, c_hist)
    c_read = PoolLatency(c_hist.total, c_p, c_lo, c_hi)
    b_p = math.nan
    if b_hist is not None:
        b_p = histogram.quantile(q, b_hist)
        b_lo, b_hi = histogram.bracket(q, b_hist)
        b_read = PoolLatency(b_hist.total, b_p, b_lo, b_hi)

    if c_hist.total < guard.min_count:
        return result(
            Verdict.INCONCLUSIVE,
            f"too few canary observations ({c_hist.total:.0f} < minCount {guard.min_count})",
            undecided=_FEW,
        )
    if not absolute and b_hist is not None and b_hist.total < guard.min_count:
        return result(
            Verdict.INCONCLUSIVE,
            f"too few baseline observations ({b_hist.total:.0f} < minCount {guard.min_count})",
            undecided=_FEW,
        )

    if absolute:
        limit = float(guard.max_step_seconds or math.nan)
        limit_text = f"the stutter limit {_fmt(limit)} s"
    else:
        if not (math.isfinite(b_p) and b_p >= 0):
            return result(
                Verdict.INCONCLUSIVE, f"baseline quantile is {_fmt(b_p)}", undecided=_UNTESTABLE
            )
        limit = b_p * (1.0 + guard.max_regression_ratio)
        limit_text = f"baseline {_fmt(b_p)} s +{guard.max_regression_ratio:.0%} = {_fmt(limit)} s"
    limit_seconds = limit
    ex = histogram.exceedance(limit, c_hist)
    values = f"canary {_fmt(c_p)} s in bucket ({_fmt(c_lo)}, {_fmt(c_hi)}]"
    if b_hist is not None:
        values += f", baseline {_fmt(b_p)} s"
    if ex is None:
        return result(
            Verdict.INCONCLUSIVE,
            f"{values}; no finite canary bucket bound at or above {limit_text}: the buckets "
            f"cannot test it",
            undecided=_UNTESTABLE,
        )
    expected = 1.0 - q
    k, n = round(ex.above), round(ex.total)
    p_value = binomial_sf(k, n, expected)
    exceeded = replace(
        latency.within_test(
            ex.edge, ex.above, ex.total, expected=expected, significance=guard.significance
        ),
        p_value=p_value,
    )
    test = (
        f"{ex.fraction:.2%} of {n} canary observations exceed {_fmt(ex.edge)} s (the bucket "
        f"bound at or above {limit_text}); allowed {expected:.2%}, p={_fmt(p_value, 2)}"
    )
    if math.isnan(p_value):
        return result(
            Verdict.INCONCLUSIVE, f"{values}; exceedance test undefined", undecided=_UNTESTABLE
        )
    if p_value < guard.significance:
        return result(Verdict.FAIL, f"regressed: {values}; {test} < {_fmt(guard.significance)}")
    missing: list[tuple[LatencyUndecided, str]] = []
    if ex.fraction > expected:
        missing.append(
            (
                LatencyUndecided.POSSIBLE_REGRESSION,
                f"possible regression, not significant: {test} >= {_fmt(guard.significance)}",
            )
        )
    if not exceeded.p_within <= guard.significance:
        missing.append(
            (LatencyUndecided.TAIL_NOT_SHOWN, _tail_text(exceeded, guard, "observations"))
        )
    if not absolute and c_p > limit:
        missing.append(
            (
                LatencyUndecided.QUANTILE_ABOVE_LIMIT,
                f"canary P{q * 100:g} {_fmt(c_p)} s is above the limit {_fmt(limit)} s",
            )
        )
    if missing:
        undecided = tuple(u for u, _ in missing)
        return result(
            Verdict.INCONCLUSIVE,
            f"{values}; not shown within the limit: " + "; ".join(t for _, t in missing),
            undecided=undecided,
        )
    return result(
        Verdict.PASS,
        f"within limit: {values}; {test}; shown at most {expected:.2%} "
        f"(upper bound {exceeded.upper:.2%}, p={_fmt(exceeded.p_within, 2)})",
    )


def _pool_read(hist: Buckets | None, q: float) -> PoolLatency | None:
    """The pooled quantile for people to read beside the exact means (display only)."""
    if hist is None or histogram.problem(hist) is not None or not hist.total > 0:
        return None
    lo, hi = histogram.bracket(q, hist)
    return PoolLatency(hist.total, histogram.quantile(q, hist), lo, hi)


def _by_sums(
    canary: PoolObservation,
    baseline: PoolObservation,
    guard: LatencyGuard,
    slice: str | None,
) -> CheckResult:
    """The guard on exact sums and per-bound exceedance over independent batches
    (core/latency.py): FAIL when the mean test or any bound's test rejects after Holm.

    PASS needs the evidence that the canary is within the margin (intersection-union: each
    part at `significance`): the speed-up's one-sided lower bound at or above
    1 / (1 + margin); the canary's share above the bucket bound at or above the limit
    (baseline quantile x (1 + margin)) shown at most 1 - quantile; its quantile, read like
    histogram_quantile, not above the limit; and no bound's share above its allowed share.
    Anything not shown is INCONCLUSIVE, with what is missing in `undecided`."""
    what = "time per output token (per token, exact means and every bucket bound)"
    q = guard.quantile
    margin = guard.max_regression_ratio
    report = latency.compare(
        canary.tpot_samples,
        baseline.tpot_samples,
        quantile=q,
        margin=margin,
        significance=guard.significance,
        batch_seconds=guard.batch_seconds,
    )
    c_count = math.fsum(t.count for t in canary.tpot_samples)
    b_count = math.fsum(t.count for t in baseline.tpot_samples)
    sp = report.speedup
    c_read = _pool_read(report.canary_hist or canary.tpot, q)
    b_read = _pool_read(report.baseline_hist or baseline.tpot, q)
    evidence = LatencyEvidence(
        metric=guard.metric,
        quantile=q,
        max_regression_ratio=margin,
        significance=guard.significance,
        min_count=guard.min_count,
        canary=c_read,
        baseline=b_read,
        limit_seconds=report.limit,
        test=report.tail,
        speedup=sp,
        bounds=report.bounds,
    )

    def result(
        verdict: Verdict, text: str, undecided: tuple[LatencyUndecided, ...] = ()
    ) -> CheckResult:
        typed = replace(evidence, undecided=undecided) if undecided else evidence
        return CheckResult(CheckKind.LATENCY, verdict, f"{what}: {text}", typed, slice)

    if c_count < guard.min_count or b_count < guard.min_count:
        return result(
            Verdict.INCONCLUSIVE,
            f"too few observations (canary {c_count:.0f}, baseline {b_count:.0f} < minCount "
            f"{guard.min_count})",
            _FEW,
        )
    if sp is None:
        return result(
            Verdict.INCONCLUSIVE,
            "fewer than two independent batches (pods or blocks of batchSeconds) in a pool: "
            "no honest comparison",
            (LatencyUndecided.FEW_BATCHES,),
        )
    means = (
        f"canary {_fmt(sp.canary_mean * 1e3)} ms vs baseline {_fmt(sp.baseline_mean * 1e3)} ms "
        f"per token, measured speed-up {sp.value:.2f}x [{sp.lower:.2f}, {sp.upper:.2f}]"
    )
    if report.regressed:
        parts = []
        if report.mean_rejected:
            parts.append(f"mean above baseline +{margin:.0%} (p={sp.p_regressed:.2g})")
        parts += [
            f"{b.canary_fraction:.2%} above {_fmt(b.bound)} s vs the baseline's "
            f"{b.baseline_fraction:.2%} above {_fmt(b.baseline_bound)} s "
            f"(allowed {b.allowed_fraction:.2%}, p={b.p_value:.2g})"
            for b in report.bounds
            if b.rejected
        ][:3]
        return result(
            Verdict.FAIL,
            f"regressed: {means}; " + "; ".join(parts) + f" (Holm at {_fmt(guard.significance)})",
        )
    missing = _not_shown(report, guard, c_read, b_read)
    if missing:
        return result(
            Verdict.INCONCLUSIVE,
            f"{means}; not shown within the limit: " + "; ".join(t for _, t in missing),
            tuple(u for u, _ in missing),
        )
    tail = report.tail
    assert tail is not None  # _not_shown reports a missing tail test
    return result(
        Verdict.PASS,
        f"within limit: {means}, its lower bound above {1.0 / (1.0 + margin):.3f} "
        f"(p={_fmt(sp.p_within, 2)}); {tail.fraction:.2%} of {tail.total:,.0f} canary requests "
        f"above {_fmt(tail.edge)} s (the bound at or above the limit {_fmt(report.limit or 0)} "
        f"s), shown at most {tail.expected_fraction:.2%} (upper bound {tail.upper:.2%}); no "
        f"bucket bound shows more slow requests",
    )


def _not_shown(
    report: latency.TailReport,
    guard: LatencyGuard,
    c_read: PoolLatency | None,
    b_read: PoolLatency | None,
) -> list[tuple[LatencyUndecided, str]]:
    """What the exact-sums evidence does not show of "within the margin", with the numbers."""
    sp = report.speedup
    assert sp is not None
    margin = guard.max_regression_ratio
    q = f"P{guard.quantile * 100:g}"
    out: list[tuple[LatencyUndecided, str]] = []
    if not sp.p_within <= guard.significance:
        out.append(
            (
                LatencyUndecided.MEAN_NOT_SHOWN,
                f"the mean is not shown within +{margin:.0%}: the speed-up's lower bound is "
                f"not above {1.0 / (1.0 + margin):.3f} (p={_fmt(sp.p_within, 2)})",
            )
        )
    tail = report.tail
    if report.limit is None:
        out.append((LatencyUndecided.UNTESTABLE, f"the baseline's {q} is unknown"))
    elif tail is None:
        out.append(
            (
                LatencyUndecided.UNTESTABLE,
                f"no finite bucket bound at or above the limit {_fmt(report.limit)} s "
                f"(baseline {q} +{margin:.0%}): the buckets cannot test it",
            )
        )
    elif not tail.p_within <= guard.significance:
        out.append((LatencyUndecided.TAIL_NOT_SHOWN, _tail_text(tail, guard, "requests")))
    if (
        report.limit is not None
        and c_read is not None
        and b_read is not None
        and c_read.quantile_seconds > report.limit
    ):
        hint = ""
        if c_read.bucket_lo <= report.limit:
            hint = (
                f"; the limit lies inside the canary's bucket ({_fmt(c_read.bucket_lo)}, "
                f"{_fmt(c_read.bucket_hi)}] s, so only finer buckets (vLLM's "
                f"--custom-histogram-buckets) can tell"
            )
        out.append(
            (
                LatencyUndecided.QUANTILE_ABOVE_LIMIT,
                f"canary {q} {_fmt(c_read.quantile_seconds * 1e3)} ms is above the limit "
                f"{_fmt(report.limit * 1e3)} ms (baseline {_fmt(b_read.quantile_seconds * 1e3)}"
                f" ms +{margin:.0%}){hint}",
            )
        )
    over = [b for b in report.bounds if b.canary_fraction > b.allowed_fraction]
    if over:
        b = max(over, key=lambda x: x.canary_fraction - x.allowed_fraction)
        out.append(
            (
                LatencyUndecided.POSSIBLE_REGRESSION,
                f"possible regression, not significant: {b.canary_fraction:.2%} above "
                f"{_fmt(b.bound)} s against {b.allowed_fraction:.2%} allowed "
                f"(p={_fmt(b.p_value, 2)}; {len(over)} bound(s) over)",
            )
        )
    return out

"""The latency guard's quantile Fail test pooled over a run of disjoint judged windows.

A tail-only regression (a few percent of requests much slower, the mean barely moved) puts
the canary's share above the P99 Fail edge at 2-3% against the 1% allowed: with a few hundred
requests a window, that is significant in some windows and only "possible" in others, and an
undecided window starts the fail streak over. So every judged window leaves its counts here,
and each judged window also tests the sum of the last `consecutiveWindows` adjacent disjoint
windows' counts (this one included).

* **The counts.** Each window's effective observations (its requests over the design effect
  of its batches, core/design.py: a stall episode of one pod counts as few requests) and the
  effective share of them above that window's own Fail edge. Every window's edge is one the
  canary's share above stays at most 1 - quantile under the null (a canary within the
  margin), so the sum of the counts is at most Binomial(sum of totals, 1 - quantile) under
  the null whatever the edges: one exact binomial test on the pooled counts. Where any
  window's batches show overdispersion (core/design.py's dispersion test: a stall episode of
  the canary pod is one batch, not hundreds of requests), also a t test over all the
  windows' batches, as one decisive window must pass, and the larger p of the two.
* **Which windows.** A fixed set by time, never by outcome: the last `windows` judged windows
  that follow each other (disjoint, at most a window of unjudged time between them), whatever
  their verdicts. Pooling only the windows that looked bad would select on the outcome and
  reject a healthy canary.
* **The Fail edge.** The pooled p-value over the quantile's weight in a window's family
  (W_QUANTILE) at or below significance ** windows: the bar at which one window is as strong
  as `windows` disjoint failing windows (`checks.decisive`). A pooled Fail is decisive: it
  rolls back on this window.
* **False rollbacks.** Each judged window's pooled test rejects a canary on the null's edge
  with probability at most W_QUANTILE x significance ** windows (0.11% with the shipped 0.05
  and 2 windows), the same budget as one decisive window; it adds at most that to the fail
  streak's significance ** windows per judged window, so the rule's rate a day at most about
  doubles at the null's edge, and a healthy canary (its share below the allowed one) is
  further from it in every window.

Pure: counts in, a typed result and the run to remember out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from pydantic import BaseModel, ConfigDict

from alphagate.core.design import design_effect
from alphagate.core.evidence import CheckResult
from alphagate.core.fmt import number as _fmt
from alphagate.core.latency_evidence import LatencyEvidence, PooledTail
from alphagate.core.resolution import quantile_name as _q
from alphagate.core.stats import betainc, t_cdf
from alphagate.core.vocab import CheckKind, Verdict

EPS: Final = 1e-3  # seconds: the window module's tolerance on window edges


class TailCount(BaseModel):
    """One judged window's canary counts at its own quantile Fail edge (effective counts)."""

    model_config = ConfigDict(frozen=True)

    slice: str = ""  # the latency check's slice ("" when it covers the policy)
    start: float
    end: float
    above: float  # effective observations above the window's Fail edge
    total: float  # effective observations
    expected: float  # 1 - quantile: the share the null allows above the edge
    # the share over the window's batches: requests counted, its variance over the batches
    # (never below independent requests') and degrees of freedom (0: fewer than two batches;
    # never NaN, which JSON cannot carry back)
    requests: float = 0.0
    share: float = 0.0
    var: float = 0.0
    dof: float = 0.0


class LatencyRun(BaseModel):
    """The latest judged windows' tail counts, per slice, in time order: at most the
    consecutiveWindows - 1 that the next judged window pools with."""

    model_config = ConfigDict(frozen=True)

    windows: tuple[TailCount, ...] = ()


def count_of(result: CheckResult, *, start: float, end: float) -> TailCount | None:
    """A latency check's canary counts above its Fail edge, on effective observations; None
    when the check has no Fail-side test with a usable count."""
    ev = result.evidence
    if not isinstance(ev, LatencyEvidence) or ev.tail is None or ev.tail.fail_test is None:
        return None
    f = ev.tail.fail_test
    n = f.effective if math.isfinite(f.effective) else f.total
    if not (math.isfinite(n) and n > 0 and math.isfinite(f.fraction)):
        return None
    if not 0.0 < f.expected_fraction < 1.0:
        return None
    share = min(1.0, max(0.0, f.fraction))
    return TailCount(
        slice=result.slice or "",
        start=start,
        end=end,
        above=share * n,
        total=n,
        expected=f.expected_fraction,
        requests=_finite(f.total),
        share=share,
        var=_finite(ev.tail.fail_var),
        dof=_finite(ev.tail.fail_dof),
    )


def _finite(x: float) -> float:
    return x if math.isfinite(x) and x > 0 else 0.0


def p_above(above: float, total: float, expected: float) -> float:
    """P(X >= above) for X ~ Binomial(total, expected), continuous in both (effective counts
    are rarely whole) through the incomplete beta; exact at whole counts."""
    if not (math.isfinite(above) and math.isfinite(total) and total > 0):
        return math.nan
    if above <= 0:
        return 1.0
    k = min(above, total)
    return betainc(k, total - k + 1.0, expected)


def p_batches(counts: Sequence[TailCount], expected: float) -> float:
    """p of "the pooled share is above `expected`" on a t test over every window's batches
    (each window's variance weighted by its share of the requests, Welch-Satterthwaite
    degrees of freedom); NaN when a window has no batch spread (dof 0). As one decisive window must
    pass it too: one pod's stall episode is one batch, not hundreds of requests."""
    n = math.fsum(c.requests for c in counts)
    ok = all(c.var > 0 and c.dof > 0 and c.requests > 0 for c in counts)
    if not (ok and n > 0):
        return math.nan
    share = math.fsum(c.requests * c.share for c in counts) / n
    terms = [((c.requests / n) ** 2 * c.var, c.dof) for c in counts]
    var = math.fsum(v for v, _ in terms)
    if not var > 0:
        return 0.0 if share > expected else 1.0
    denom = math.fsum(v * v / d for v, d in terms if math.isfinite(d))
    dof = var * var / denom if denom > 0 else math.inf
    return 1.0 - t_cdf((share - expected) / math.sqrt(var), dof)


def _overdispersed(c: TailCount) -> bool:
    """Does the window's spread over its batches show overdispersion (core/design.py's
    dispersion test, as the Fail side counts it)? A stall episode does; independent
    requests, whatever their share, rarely."""
    if not (c.var > 0 and c.dof > 0 and c.requests > 0):
        return False
    return design_effect(math.sqrt(c.var), c.share, c.requests, c.dof) > 1.0


def pooled_test(
    counts: Sequence[TailCount], *, significance: float, weight: float
) -> PooledTail | None:
    """The exact binomial test on the counts' sum, rejected at weight x significance ** n
    (n = how many windows it pools); None without counts."""
    if not counts:
        return None
    above = math.fsum(c.above for c in counts)
    total = math.fsum(c.total for c in counts)
    expected = max(c.expected for c in counts)
    binomial = p_above(above, total, expected)
    batches = p_batches(counts, expected)
    p = binomial
    if math.isfinite(batches) and any(_overdispersed(c) for c in counts):
        p = max(binomial, batches)
    level = weight * significance ** len(counts)
    return PooledTail(
        windows=len(counts),
        since=counts[0].start,
        above=above,
        total=total,
        expected_fraction=expected,
        p_value=p,
        level=level,
        rejected=math.isfinite(p) and p <= level,
        p_binomial=binomial,
        p_batches=batches,
    )


def _follows(prev: TailCount, start: float, window_seconds: float) -> bool:
    """Disjoint and adjacent: the window starting at `start` begins at or after `prev` ends,
    with at most one window of unjudged time between them (as the fail streak counts)."""
    return prev.end - EPS <= start <= prev.end + window_seconds + EPS


def _chain(run: LatencyRun, slice: str, start: float, window_seconds: float) -> list[TailCount]:
    """The slice's remembered windows when they lead up to the window starting at `start`."""
    mine = [c for c in run.windows if c.slice == slice]
    if not mine or not _follows(mine[-1], start, window_seconds):
        return []
    return mine


def pool(
    run: LatencyRun,
    results: Sequence[CheckResult],
    *,
    start: float,
    end: float,
    window_seconds: float,
    windows: int,
    significance: float,
    weight: float,
) -> tuple[tuple[CheckResult, ...], LatencyRun]:
    """Call on a judged window only. Each latency check's counts pooled with its slice's
    last `windows - 1` adjacent windows: a pooled rejection makes the check FAIL (and
    decisive) with the pooled evidence; any other pooled result is attached for people. The
    run remembers this window's counts (a check without them starts its slice over)."""
    out: list[CheckResult] = []
    kept: list[TailCount] = []
    for r in results:
        if r.kind is not CheckKind.LATENCY or not isinstance(r.evidence, LatencyEvidence):
            out.append(r)
            continue
        now = count_of(r, start=start, end=end)
        if now is None:
            out.append(r)
            continue
        chain = [*_chain(run, now.slice, start, window_seconds), now][-max(1, windows) :]
        if windows >= 2:
            kept += chain[max(0, len(chain) - (windows - 1)) :]
        test = pooled_test(chain, significance=significance, weight=weight)
        if windows < 2 or len(chain) < windows or test is None:
            out.append(r)
            continue
        out.append(_with_pooled(r, r.evidence, test))
    return tuple(out), LatencyRun(windows=tuple(kept))


def _with_pooled(r: CheckResult, ev: LatencyEvidence, test: PooledTail) -> CheckResult:
    """The check with the pooled test in its evidence; FAIL when the pooled test rejects."""
    ev = replace(ev, pooled=test)
    if not test.rejected or r.verdict is Verdict.ERROR:
        return replace(r, evidence=ev)
    text = (
        f"regressed over {test.windows} disjoint windows pooled: {test.fraction:.2%} of "
        f"{test.total:,.0f} effective canary requests above the {_q(ev.quantile)} Fail edges, "
        f"allowed {test.expected_fraction:.2%}, p={_fmt(test.p_value, 2)} <= "
        f"{_fmt(test.level, 2)} (as strong as {test.windows} failing windows)"
    )
    if r.verdict is Verdict.FAIL:
        return replace(r, evidence=ev, reason=f"{r.reason}; {text}")
    head = r.reason.split(": ", 1)[0]
    return replace(
        r, verdict=Verdict.FAIL, evidence=replace(ev, undecided=()), reason=f"{head}: {text}"
    )

"""A sequential test run in the shadow of the machine, to choose the rollback rule by
measurement: a one-sided CUSUM over disjoint whole windows on each window's evidence that
alpha lies below the gate.

Each disjoint window's estimate gives a score u = Phi^-1(F_t((alpha - gate) / se; dof)): the
normal quantile of the window's own one-sided t level (so its calibration does not depend on
the degrees of freedom: with an honest interval, u ~ N(0, 1) when the truth sits on the gate,
below 0 under it). The CUSUM S = max(0, S - u - K) alarms at S >= H. K = 0.5 and H = 5.6 give
an average run of about 1,640 windows at the gate, the same budget as two consecutive
disjoint windows failing at 2.5% each (288 x 0.025^2 = 0.18 false alarms a day at the gate).
Windows without an honest interval score 0 (no evidence) and do not reset S.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.stats import normal_quantile, t_cdf

if TYPE_CHECKING:
    from alphagate_lab.bench.machine.loop import Judged

K: Final = 0.5
H: Final = 5.6
T0: Final = 1_700_000_000.0


def _disjoint(judged: Sequence[Judged], window: float) -> list[Judged]:
    out: list[Judged] = []
    end = -math.inf
    for j in judged:
        if j.at - j.start >= window - 1e-6 and j.start >= end - 1e-6:
            out.append(j)
            end = j.at
    return out


def score(j: Judged, gate: float) -> float:
    e = j.estimate
    if e is None or not e.conclusive or not (e.std_error > 0) or not math.isfinite(e.dof):
        return 0.0
    if e.drafts <= 0:
        return 0.0
    f = t_cdf((e.value - gate) / e.std_error, e.dof)
    return normal_quantile(min(1 - 1e-12, max(1e-12, f)))


def _run(judged: Sequence[Judged], spec: SpeculativeCanarySpec) -> list[float]:
    gate = spec.acceptance.disable_below
    s = 0.0
    alarms = []
    last = -math.inf
    for j in _disjoint(judged, spec.timing.window_seconds):
        if j.start - last > spec.timing.window_seconds + 1e-6:
            s = 0.0  # a gap (rolled back, warm-up): start over
        last = j.at
        s = max(0.0, s - score(j, gate) - K)
        if s >= H:
            alarms.append(j.at - T0)
            s = 0.0
    return alarms


def cusum_alarms(judged: Sequence[Judged], spec: SpeculativeCanarySpec) -> list[float]:
    """Alarm times (seconds into the day) of the shadow CUSUM over the machine's windows."""
    return _run(judged, spec)


def cusum_delays(
    judged: Sequence[Judged], spec: SpeculativeCanarySpec, restart: float
) -> list[float]:
    """Seconds between successive shadow alarms on a canary that is never rolled back (the
    first from the first window's start), each plus `restart` (the rollout and warm-up a
    probe pays before its first window)."""
    alarms = _run(judged, spec)
    if not alarms:
        return []
    first = judged[0].start - T0
    starts = [first, *alarms[:-1]]
    return [a - s + restart for s, a in zip(starts, alarms, strict=True)]

"""Early looks at a probe's first window: a group-sequential Fail test on the growing window.

A probe's first judged window ends a whole `windowSeconds` after its data may be judged (the
warm-up's end, `window.warmup_end`), and a bad canary speculates all that time. The
evaluations before it (every `intervalSeconds`) are looks; here each may FAIL the probe, never
pass it, at a Lan-DeMets O'Brien-Fleming-type alpha-spending level: the look at information
fraction f (the share of the first window elapsed) spends S(f) - S(f - step) with
S(f) = 2 (1 - Phi(z_{1 - L/2} / sqrt(f))), S(1) = L, next to nothing early. By the union
bound the looks together fail a canary whose truth sits on the gate with probability at most
L, whatever their correlation (a look skipped, too thin to test, spends nothing).

L is the first window's pooled share (`pace.pooled_levels`: a^2 + ... + a^n + a^n): the
per-day bound (`pace.budget`) counts that share for every judged window, and a probe's first
window can never spend it (a run of one window is never pooled, `core.streak`). So the looks
leave the stated false rollbacks a day unchanged. A look needs `streak.MIN_DOF` degrees of
freedom and acceptance.minDrafts drafts (`streak.window_of`); a Pass still needs the whole
judged windows. Pure.
"""

from __future__ import annotations

import math
from dataclasses import replace

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import pace
from alphagate.core.model import AlphaWindow, Memory, Rollout, State
from alphagate.core.moves import Ctx
from alphagate.core.stats import normal_quantile, normal_sf, t_quantile
from alphagate.core.streak import MIN_DOF, Pooled
from alphagate.core.window import EPS, warmup_end


def total(confidence: float, windows: int) -> float:
    """The level all the looks of a probe's first window spend together: that window's
    unspendable pooled share (module docstring)."""
    return math.fsum(level for _, level in pace.pooled_levels(confidence, windows))


def spent(fraction: float, level: float) -> float:
    """O'Brien-Fleming-type spending: the level spent by information fraction `fraction`."""
    if not fraction > 0 or not level > 0:
        return 0.0
    z = normal_quantile(1.0 - level / 2.0)
    return min(level, 2.0 * normal_sf(z / math.sqrt(min(1.0, fraction))))


def fraction(spec: SpeculativeCanarySpec, memory: Memory, rollout: Rollout, now: float) -> float:
    """The share of a probe's first judged window elapsed at `now`; 0 unless the unit probes
    and has judged no window since the probe began (then the looks are over, or not yet)."""
    if memory.state is not State.PROBING or memory.streak_end > memory.since + EPS:
        return 0.0
    first = max(memory.streak_end, warmup_end(spec, rollout, memory) or -math.inf)
    f = (now - first) / spec.timing.window_seconds
    return f if 0.0 < f < 1.0 - EPS else 0.0


def test(spec: SpeculativeCanarySpec, alpha: AlphaWindow | None, f: float) -> Pooled | None:
    """The look at fraction `f` (its bound at this look's spending), or None when there is
    nothing to test (no alpha, too few dof, nothing left to spend)."""
    gate = spec.acceptance
    if alpha is None or not f > 0 or alpha.dof < MIN_DOF:
        return None
    step = spec.timing.interval_seconds / spec.timing.window_seconds
    whole = total(gate.confidence, gate.consecutive_windows)
    level = spent(f, whole) - spent(f - step, whole)
    if not level > 0:
        return None
    upper = alpha.value + t_quantile(1.0 - level, alpha.dof) * alpha.se
    fails = math.isfinite(upper) and upper < gate.disable_below
    band = gate.enable_above - gate.disable_below
    below = (gate.disable_below - alpha.value) / band if band > 0 else 0.0
    return Pooled(1, alpha.value, alpha.se, alpha.dof, level, upper, fails, max(0.0, below), f)


def apply(ctx: Ctx, alpha: AlphaWindow | None) -> Ctx:
    """The machine's context after a look (a window that counts nothing): a failing look
    rolls the probe back as a judged failing run would (`Ctx.pooled`)."""
    if ctx.unjudged is not None or ctx.rollout.in_progress:
        return ctx
    f = fraction(ctx.spec, ctx.memory, ctx.rollout, ctx.now)
    found = test(ctx.spec, alpha, f)
    if found is None or not found.fails:
        return ctx
    evidence = {**ctx.evidence, **found.fields()}
    deeper = max(ctx.shortfall, found.shortfall)
    return replace(ctx, pooled=found, judged=True, shortfall=deeper, evidence=evidence)

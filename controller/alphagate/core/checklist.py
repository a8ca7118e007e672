"""The checks one evaluation runs over a window: acceptance (the combined alpha with per-slice
floors, or each slice alone) and latency per slice, each from what the observation holds; a
failed pool is an ERROR check, a pool without drafts says why (`NoData`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import acceptance, checks, latency_check
from alphagate.core.model import (
    CheckResult,
    Estimate,
    Judgeability,
    NoData,
    Observation,
    PoolObservation,
    Role,
)


def slice_error(observation: Observation, name: str) -> str | None:
    """Why the slice's canary acceptance data cannot be trusted, or None."""
    canary = observation.pool(name, Role.CANARY)
    if canary is None:
        return f"no canary pool for slice {name} in the observation"
    if canary.error is not None:
        return f"canary pool of slice {name} failed: {canary.error}"
    bad = acceptance.problem(canary.acceptance)
    if bad is not None:
        return f"bad data on slice {name}: {bad}"
    return None


def no_data(observation: Observation, names: Sequence[str]) -> NoData | None:
    """Why the canary pools of `names` show no drafts, when none of them does (None: some
    slice has drafts, or a pool failed). An idle canary that exports spec-decode series is
    speculating with no traffic, never "off"."""
    pools = [observation.pool(n, Role.CANARY) for n in names]
    if any(p is None or p.error is not None or p.acceptance for p in pools):
        return None
    causes = {p.no_data for p in pools if p is not None}
    for cause in (NoData.SPARSE_SCRAPES, NoData.NO_TRAFFIC, NoData.NO_SPEC_SERIES):
        if cause in causes:
            return cause
    if pools and all(p is not None and p.spec_series is False for p in pools):
        return NoData.NO_SPEC_SERIES
    return NoData.UNKNOWN


def run(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    names: Sequence[str],
    estimates: dict[str, Estimate],
    combined: Estimate | None,
    per_slice: bool,
    suffix: bool,
    judgeable: dict[str, Judgeability],
) -> list[CheckResult]:
    """The window's checks: acceptance (combined with per-slice floors, or per slice) and
    latency per slice."""
    gate = spec.acceptance
    out: list[CheckResult] = []
    errors = {n: slice_error(observation, n) for n in names}
    if per_slice:
        for n in names:
            out.append(
                checks.check_acceptance(
                    estimates.get(n),
                    gate=gate,
                    slice=n if suffix else None,
                    error=errors[n],
                    no_data=no_data(observation, [n]),
                    judgeable=judgeable.get(n),
                )
            )
    else:
        failed = "; ".join(e for e in errors.values() if e is not None) or None
        out.append(
            checks.check_acceptance(
                combined,
                gate=gate,
                error=failed,
                no_data=no_data(observation, names),
                judgeable=next((judgeable[n] for n in names if n in judgeable), None),
            )
        )
        for s in spec.slices:
            if s.name in names and s.min_alpha is not None:
                out.append(
                    checks.check_floor(
                        estimates.get(s.name),
                        min_alpha=s.min_alpha,
                        gate=gate,
                        slice=s.name,
                        error=errors[s.name],
                    )
                )
    if spec.latency.enabled:
        for n in names:
            canary = observation.pool(n, Role.CANARY)
            out.append(
                latency_check.check_latency(
                    canary,
                    observation.pool(n, Role.BASELINE),
                    guard=spec.latency,
                    tokens_per_step=tokens_per_step(canary, estimates.get(n)),
                    slice=n if suffix else None,
                )
            )
    return out


def tokens_per_step(canary: PoolObservation | None, e: Estimate | None) -> float | None:
    """Tokens one inter-token-latency observation carries on the canary: 1 + accepted / steps.

    vLLM observes the ITL once per engine step per request, drafted or not; only steps with a
    draft are counted as drafts. So the mean acceptance length (1 + accepted / drafts)
    overstates it wherever some steps draft nothing (n-gram without a match: 1.35 against
    1.08 on the real capture). None when the canary's ITL count or acceptance is missing.
    """
    if canary is None or canary.itl is None or e is None:
        return None
    steps = canary.itl.total
    if not (math.isfinite(steps) and steps > 0 and math.isfinite(e.accepted_tokens)):
        return None
    return 1.0 + e.accepted_tokens / steps

"""The scenario suite: one simulated canary fleet per case, sized so the gate means something.

Every case is one traffic slice served by baseline pods (speculation off) and canary pods
(speculating with the shipped chat policy's config, K = 3). Load is closed loop: each pod has
``CONCURRENCY`` clients that send their next request as soon as the last one ends, so a pod's
generated tokens measure its speed and every pod restart loses tokens. At this load the
simulator's own break-even sits near the gate: a speculating pod generates about 7% fewer
tokens than a plain one at alpha 0.45, about as many at 0.53 and 17% more at 0.70 (measured
by ``calibrate``), so "off below 0.55, on above it" is also what maximises tokens and the
regret in tokens is a fair score. Low traffic is the one open-loop case (sparse arrivals:
there, speed does not change the tokens served, so its regret is ~0 by construction).

Timelines are given as fractions of the run so ``--hours`` scales every case. A case runs for
its own ``hours`` unless ``--hours`` overrides them all: an hour by default, a simulated day
for the cases whose targets are per day (restarts at a stationary 0.45, flips under a drift
that crosses the band), so their per-day figures are counted over a day, not extrapolated
from an hour. Stall episodes,
warm-up and injected latency regressions are applied by the loop (``Case.stalls``,
``Case.regression``), not by the scenario, because they follow the pods' lifecycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from alphagate_lab.sim.scenario import Scenario

GATE: Final = 0.55
CONCURRENCY: Final = 192
PROMPT_TOKENS: Final = 256
OUTPUT_TOKENS: Final = 512
LOAD_SECONDS: Final = 90.0
K: Final = 3
HOURS: Final = 1.0
"""Simulated hours of a case without its own."""
DAY: Final = 24.0
STALLS: Final[dict[str, Any]] = {"rate": 6.0, "duration": 30.0, "slowdown": 4.0}
"""The stalls case: six episodes an hour per pod, ~30 s each, steps 4x slower."""
SIM_STALLS: Final = "stalls" in Scenario.model_fields
"""Whether the simulator draws stall episodes itself (else the loop applies them)."""
SPEC: Final[dict[str, Any]] = {
    "method": "eagle3",
    "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "num_speculative_tokens": K,
}


def spec_config(k: int = K) -> dict[str, Any]:
    """The canary's speculative config at draft length ``k``."""
    return {**SPEC, "num_speculative_tokens": k}


def chain_alpha(p: float, decay: float, k: int) -> float:
    """alpha at draft length ``k`` of a chain whose position ``j`` (1-based) is reached with
    probability ``p ** (j + decay * j * (j - 1) / 2)``, the simulator's own shape (sim.acceptance).

    The traffic fixes ``p`` and ``decay``; alpha (accepted per drafted token) then depends on K,
    so a case whose best K moves gives the simulator the alpha of the K the canary runs."""
    return float(sum(p ** (j + decay * j * (j - 1) / 2) for j in range(1, k + 1))) / k


@dataclass(frozen=True)
class Case:
    """One scenario of the suite.

    ``alphas`` is the slice alpha as (fraction of the run, value) steps; ``outputs`` the
    median output length as steps too (a change of mix changes what is generated, not only
    how well it is drafted); ``regression`` a (start fraction, per-token slowdown of a
    speculating canary against the baseline); ``stalls`` turns on per-pod stall episodes
    (both roles alike).
    """

    name: str
    title: str
    alphas: tuple[tuple[float, float], ...]
    canaries: int = 2
    baselines: int = 1
    output_tokens: int = OUTPUT_TOKENS
    open_rate: float | None = None  # requests/s over the slice (open loop) instead of clients
    regression: tuple[float, float] | None = None
    stalls: bool = False
    slice_extra: dict[str, Any] = field(default_factory=dict)
    # Draft-length cases: the configured K and the traffic as (start fraction, p, decay) steps of
    # the acceptance chain (chain_alpha); the loop sets the slice's alpha for the K that runs.
    k: int = K
    chain: tuple[tuple[float, float, float], ...] = ()
    outputs: tuple[tuple[float, int], ...] = ()

    def chain_at(self, frac: float) -> tuple[float, float]:
        """(p, decay) of the chain at a fraction of the run."""
        p, decay = self.chain[0][1:]
        for start, p_, d_ in self.chain:
            if frac + 1e-12 >= start:
                p, decay = p_, d_
        return p, decay

    def alpha_at(self, frac: float, k: int | None = None) -> float:
        """The slice's alpha at a fraction of the run, at draft length ``k`` (default: the
        configured K)."""
        if not self.chain:
            value = self.alphas[0][1]
            for start, a in self.alphas:
                if frac + 1e-12 >= start:
                    value = a
            return value
        p, decay = self.chain_at(frac)
        return chain_alpha(p, decay, k or self.k)

    hours: float = HOURS  # simulated hours of a run, unless --hours overrides every case

    def scenario(self, hours: float) -> Scenario:
        duration = hours * 3600.0
        first = self.alpha_at(0.0)
        chat: dict[str, Any] = {
            "alpha": first,
            "prompt_tokens": PROMPT_TOKENS,
            "output_tokens": self.output_tokens,
            **self.slice_extra,
        }
        if self.open_rate is None:
            chat["concurrency"] = CONCURRENCY
        else:
            chat["arrival_rate"] = self.open_rate
        steps: dict[float, dict[str, Any]] = {}
        for frac, value in self.alphas[1:]:
            steps.setdefault(round(frac * duration, 3), {})["alpha"] = value
        for frac, tokens in self.outputs:
            steps.setdefault(round(frac * duration, 3), {})["output_tokens"] = tokens
        timeline = [{"at": at, "slices": {"chat": patch}} for at, patch in sorted(steps.items())]
        if self.chain:  # the loop sets alpha and decay as the chain and the K that runs say
            chat["decay"] = self.chain[0][2]
            timeline = []
        extra: dict[str, Any] = {}
        if SIM_STALLS and self.stalls:
            extra["stalls"] = dict(STALLS)
        return Scenario.model_validate(
            {
                **extra,
                "name": self.name,
                "description": self.title,
                "duration": duration,
                "slices": {"chat": chat},
                "pools": [
                    {
                        "name": "chat-baseline",
                        "role": "baseline",
                        "slice": "chat",
                        "replicas": self.baselines,
                        "load_time": LOAD_SECONDS,
                    },
                    {
                        "name": "chat-canary",
                        "role": "canary",
                        "slice": "chat",
                        "replicas": self.canaries,
                        "load_time": LOAD_SECONDS,
                        "speculative_config": spec_config(self.k),
                    },
                ],
                "timeline": timeline,
            }
        )

    def regression_start(self, hours: float) -> float | None:
        return None if self.regression is None else self.regression[0] * hours * 3600.0


def _ramp(start: float, end: float, a0: float, a1: float, steps: int) -> list[tuple[float, float]]:
    """Alpha moving from a0 to a1 between two fractions of the run, in small steps."""
    out = []
    for i in range(1, steps + 1):
        out.append((start + (end - start) * i / steps, round(a0 + (a1 - a0) * i / steps, 4)))
    return out


def _drift() -> tuple[tuple[float, float], ...]:
    # 0.68 -> 0.46 over the first half, back over the second: crosses the band twice.
    return ((0.0, 0.68), *_ramp(0.0, 0.5, 0.68, 0.46, 60), *_ramp(0.5, 1.0, 0.46, 0.68, 60))


MIX_CODE: Final = 0.7
"""The code share at the height of the mix shift."""
CODE_OUTPUT_RATIO: Final = 1.5625
"""Code answers run longer than chat turns: 400 against 256 tokens in the repository's own
chat-to-code scenario (scenarios/chat-to-code.yaml), applied to this suite's chat median."""


def _mix_share() -> list[tuple[float, float]]:
    # The code share: 0 -> 0.7 over 25-30% of the run, back to 0 over 60-65%, in small steps.
    return [*_ramp(0.25, 0.30, 0.0, MIX_CODE, 10), *_ramp(0.60, 0.65, MIX_CODE, 0.0, 10)]


def _mix() -> tuple[tuple[float, float], ...]:
    # 100% chat (0.70) -> 70% code (0.40): the pooled alpha falls to 0.49, then the mix
    # returns. Pooled alpha = share-weighted mean of the two (drafts per step alike).
    chat, code = 0.70, 0.40
    return ((0.0, chat), *((f, round((1 - s) * chat + s * code, 4)) for f, s in _mix_share()))


def _mix_outputs() -> tuple[tuple[float, int], ...]:
    # The same mix's output lengths: one log-normal whose median moves geometrically between
    # chat's and code's (a mixture of two log-normals with the same spread, to first order).
    return tuple((f, round(OUTPUT_TOKENS * CODE_OUTPUT_RATIO**s)) for f, s in _mix_share())


BEST_K_MOVES: Final = ((0.0, 0.92, 0.02), (1 / 3, 0.9, 0.6), (2 / 3, 0.92, 0.02))
"""Chat (every position accepts well; alpha 0.78 at K=5) -> code (acceptance falls fast along the
draft; alpha 0.61 at K=5, still above the gate) -> chat. At this load a draft position costs
about half a plain step, so the best K is 3 in chat and 2 in code."""

SUITE: Final[tuple[Case, ...]] = (
    Case("stationary-0.70", "alpha 0.70 all along (healthy)", ((0.0, 0.70),)),
    Case("stationary-0.62", "alpha 0.62 (above the band)", ((0.0, 0.62),)),
    Case("stationary-0.575", "alpha 0.575 (inside the 0.55-0.60 band)", ((0.0, 0.575),)),
    Case("stationary-0.50", "alpha 0.50 (below the gate)", ((0.0, 0.50),)),
    Case("stationary-0.45", "alpha 0.45 (well below), a day", ((0.0, 0.45),), hours=DAY),
    Case("step-0.70-0.40", "alpha steps 0.70 -> 0.40 at 25% of the run",
         ((0.0, 0.70), (0.25, 0.40))),
    Case("drift", "alpha drifts 0.68 -> 0.46 -> 0.68 over a day (crosses the band twice)",
         _drift(), hours=DAY),
    Case("mix-shift", "chat -> 70% code (pooled 0.49, outputs 1.37x longer) at 25-30%, back"
         " at 60-65%", _mix(), outputs=_mix_outputs()),
    Case("latency-1.5x", "alpha 0.70; from 25% the canary is 1.5x slower per token",
         ((0.0, 0.70),), regression=(0.25, 1.5)),
    Case("latency-2x", "alpha 0.70; from 25% the canary is 2x slower per token",
         ((0.0, 0.70),), regression=(0.25, 2.0)),
    Case("low-traffic", "alpha 0.65, ~0.05 requests/s per pod (open loop)",
         ((0.0, 0.65),), open_rate=0.2, slice_extra={"output_tokens": 300}),
    Case("stalls", "alpha 0.70, equal latency, stall episodes on every pod",
         ((0.0, 0.70),), stalls=True),
    Case("one-canary-pod", "alpha 0.62 on a single canary pod", ((0.0, 0.62),), canaries=1),
    Case("long-outputs", "alpha 0.62, outputs of 1,500 tokens", ((0.0, 0.62),),
         output_tokens=1500),
    Case("best-k-moves", "K=5; chat (best K 3) -> code, tail positions fail (best K 2) at 33%"
         " -> chat at 67%", ((0.0, 0.0),), k=5, chain=BEST_K_MOVES),
)  # fmt: skip

EXTRA_CASES: Final[tuple[Case, ...]] = (
    Case("mix-returns-alpha-not", "mix-shift's traffic, but when its output lengths return at"
         " 60-65% alpha stays at 0.49 (an early re-probe must not repeat)",
         tuple((f, a) for f, a in _mix() if f < 0.5), outputs=_mix_outputs()),
    Case("many-pods-low-traffic", "alpha 0.65 on 16 canary pods, ~0.02 requests/s per pod "
         "(open loop, ~6 requests per pod per 300 s window: the interval's coverage edge)",
         ((0.0, 0.65),), canaries=16, open_rate=0.34, slice_extra={"output_tokens": 300}),
)  # fmt: skip
"""Cases run only when named (``--cases``): checks of one rule, not part of the suite's score."""

BY_NAME: Final = {c.name: c for c in (*SUITE, *EXTRA_CASES)}

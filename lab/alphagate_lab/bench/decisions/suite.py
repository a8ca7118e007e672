"""The scenario suite: topologies users run, traffic nobody here wrote, truths that matter.

A case is one traffic slice served by baseline pods (speculation off) and canary pods running
the shipped chat policy's own ``speculativeConfig`` (``policies/general-chat-eagle3.yaml``,
read here: K and the gate come from the file, not from this module). A case combines

* a **topology** (``TOPOLOGIES``): one canary pod beside three baseline pods, 1:1, two canary
  pods with unequal traffic (70/30), sixteen low-traffic canary pods;
* a **traffic** model (``TRAFFIC``): the two real Azure LLM traces (conversation, code
  completion) replayed by the simulator's router, or Poisson arrivals with model lengths;
* a **truth**: alpha over time (fractions of the run, so ``--hours`` scales every case),
  optionally rare bad requests, stall episodes or an injected latency regression (uniform or
  tail-only, on vLLM's default buckets or a ~10% geometric layout the loop derives from the
  case's own healthy latency, set on canary and baseline alike).

Open loop throughout: arrivals do not wait for the pods, so what a decision costs is priced
in the policy's own terms (``score``), not in tokens served. Cases whose targets are per day
run a simulated day; they are run with the oracle and alphagate only (``policies``), since
every anchor rolls back for good at most once and a per-day rate means nothing for it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from alphagate_lab.bench.decisions import operations
from alphagate_lab.bench.decisions.operations import OpsEvent
from alphagate_lab.sim.scenario import Scenario
from alphagate_lab.sim.traces import load_trace

POLICIES_DIR: Final = Path(__file__).resolve().parents[4] / "policies"
SHIPPED_POLICY: Final = "general-chat-eagle3.yaml"


def _shipped() -> dict[str, Any]:
    data = yaml.safe_load((POLICIES_DIR / SHIPPED_POLICY).read_text(encoding="utf-8"))
    spec: dict[str, Any] = data["spec"]
    return spec


_SPEC: Final = _shipped()
SPEC: Final[dict[str, Any]] = dict(_SPEC["speculativeConfig"])
"""The shipped policy's speculative config: what the canary pods run."""
K: Final[int] = int(SPEC["num_speculative_tokens"])
GATE: Final[float] = float(_SPEC["acceptance"]["disableBelow"])
"""The truth's break-even: the shipped policy's own gate (the oracle speculates at or above)."""
LOAD_SECONDS: Final = 90.0
HOURS: Final = 1.0
"""Simulated hours of a case without its own."""
DAY: Final = 24.0
STALLS: Final[dict[str, Any]] = {"rate": 6.0, "duration": 30.0, "slowdown": 4.0}
"""The stalls case: six episodes an hour per pod, ~30 s each, steps 4x slower."""
SIM_STALLS: Final = True
"""The simulator draws stall episodes itself (the loop used to, before it could)."""

# Traffic of the legacy closed-loop cases (draft-length tuning, run only when named).
CONCURRENCY: Final = 192
PROMPT_TOKENS: Final = 256
OUTPUT_TOKENS: Final = 512

POISSON_OUTPUT: Final = 512
"""Poisson traffic's median output (log-normal, sigma 1): the suite's synthetic model."""
POISSON_PROMPT: Final = 1024
LOW_TRAFFIC_SCALE: Final = 0.25
"""The sixteen-pod topology keeps a quarter of the trace's requests (Poisson: of its rate)."""
TAIL_SHARE: Final = 0.03
"""A tail-only regression slows this share of the canary's requests."""
REGRESSION_AT: Final = 0.25
BAD_SHARE: Final = 0.07
"""Rare bad requests: 7% of requests at Beta(1, 4) (the review measured 5-8%)."""


def spec_config(k: int = K) -> dict[str, Any]:
    """The canary's speculative config at draft length ``k`` (the shipped one at K)."""
    return {**SPEC, "num_speculative_tokens": k}


def chain_alpha(p: float, decay: float, k: int) -> float:
    """alpha at draft length ``k`` of a chain whose position ``j`` (1-based) is reached with
    probability ``p ** (j + decay * j * (j - 1) / 2)``, the simulator's own shape (sim.acceptance).

    The traffic fixes ``p`` and ``decay``; alpha (accepted per drafted token) then depends on K,
    so a case whose best K moves gives the simulator the alpha of the K the canary runs."""
    return float(sum(p ** (j + decay * j * (j - 1) / 2) for j in range(1, k + 1))) / k


@dataclass(frozen=True)
class Topology:
    """Pods of the slice: canary pods with their router weights, and baseline pods."""

    title: str
    canary_weights: tuple[float, ...]
    baselines: int
    scale: float = 1.0  # share of the traffic model's requests this topology serves

    @property
    def canaries(self) -> int:
        return len(self.canary_weights)


TOPOLOGIES: Final[dict[str, Topology]] = {
    "1c3b": Topology("one canary pod beside three baseline pods", (1.0,), 3),
    "1c1b": Topology("one canary pod, one baseline pod", (1.0,), 1),
    "2c70": Topology("two canary pods at 70/30 of the canary traffic, two baseline", (1.4, 0.6), 2),
    "16c": Topology(
        "sixteen low-traffic canary pods, four baseline (a quarter of the traffic)",
        (1.0,) * 16,
        4,
        scale=LOW_TRAFFIC_SCALE,
    ),
    "4c4b": Topology("four canary pods, four baseline", (1.0,) * 4, 4),
    "legacy": Topology("two canary pods, one baseline (closed loop)", (1.0, 1.0), 1),
}

Traffic = Literal["conv", "code", "poisson", "closed"]
TRACE_NAMES: Final[dict[str, str]] = {"conv": "azure-conv-2023", "code": "azure-code-2023"}
TRAFFIC_TITLES: Final[dict[str, str]] = {
    "conv": "Azure conversation trace (5.5 req/s, outputs median 129)",
    "code": "Azure code-completion trace (2.6 req/s, outputs median 13, idle gaps)",
    "poisson": "Poisson at the conversation trace's rate, outputs log-normal median 512",
    "closed": f"closed loop, {CONCURRENCY} clients per pod (legacy)",
}


@dataclass(frozen=True)
class Regression:
    """An injected latency regression of a speculating canary, from ``at`` (fraction of the
    run): ``uniform`` slows every step so that its true mean time per output token becomes
    ``factor`` x the baseline's (its tokens cost that much more, and its P99 moves by the same
    step factor); ``tail`` slows ``TAIL_SHARE`` of its requests so that its true P99 per token
    becomes ``factor`` x the baseline's (the mean barely moves). ``layout`` is vLLM's default
    buckets or the ~10% geometric layout."""

    kind: Literal["uniform", "tail"]
    factor: float
    layout: Literal["default", "geometric"] = "default"
    at: float = REGRESSION_AT


@dataclass(frozen=True)
class Case:
    """One scenario of the suite (see the module docstring)."""

    name: str
    title: str
    topology: str
    traffic: Traffic
    alphas: tuple[tuple[float, float], ...]
    hours: float = HOURS
    regression: Regression | None = None
    stalls: bool = False
    bad_share: float = 0.0
    outputs: tuple[tuple[float, int], ...] = ()  # median output steps (Poisson only)
    policies: tuple[str, ...] | None = None  # None: every policy
    # Draft-length cases (legacy closed loop): the configured K and the acceptance chain.
    k: int = K
    chain: tuple[tuple[float, float, float], ...] = ()
    # Operations cases (operations.py): cluster events, pods that accept differently (the sd
    # of a canary pod's alpha offset), Poisson (prompt, median output) lengths.
    events: tuple[OpsEvent, ...] = ()
    canary_spread: float = 0.0
    lengths: tuple[int, int] | None = None

    @property
    def canaries(self) -> int:
        return TOPOLOGIES[self.topology].canaries

    @property
    def per_day(self) -> bool:
        """Its figures are per simulated day (run for a day, oracle and alphagate only)."""
        return self.hours >= DAY

    @property
    def scored(self) -> bool:
        """Counted in the suite's regret: no injected latency regression (the truth is then
        the P99 promise, which the regret's price does not weigh: scored by detection)."""
        return self.regression is None and not self.per_day

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

    def _slice(self) -> dict[str, Any]:
        topo = TOPOLOGIES[self.topology]
        chat: dict[str, Any] = {"alpha": self.alpha_at(0.0)}
        if self.traffic in TRACE_NAMES:
            chat["trace"] = {"name": TRACE_NAMES[self.traffic], "scale": topo.scale}
        elif self.traffic == "poisson":
            rate = load_trace(TRACE_NAMES["conv"]).rate * topo.scale
            chat |= {
                "arrival_rate": round(rate, 4),
                "prompt_tokens": POISSON_PROMPT,
                "output_tokens": POISSON_OUTPUT,
            }
        else:
            chat |= {
                "concurrency": CONCURRENCY,
                "prompt_tokens": PROMPT_TOKENS,
                "output_tokens": OUTPUT_TOKENS,
            }
        if self.lengths is not None:
            chat |= {"prompt_tokens": self.lengths[0], "output_tokens": self.lengths[1]}
        if self.bad_share > 0:
            chat["bad_requests"] = {"share": self.bad_share, "alpha": 0.2, "spread": 5.0}
        if self.chain:  # the loop sets alpha and decay as the chain and the K that runs say
            chat["decay"] = self.chain[0][2]
        return chat

    def scenario(self, hours: float, extra_args: tuple[str, ...] = ()) -> Scenario:
        """The fleet of this case for a run of ``hours``; ``extra_args`` go on every pod (the
        latency layout: the same bounds on canary and baseline)."""
        duration = hours * 3600.0
        topo = TOPOLOGIES[self.topology]
        steps: dict[float, dict[str, Any]] = {}
        if not self.chain:
            for frac, value in self.alphas[1:]:
                steps.setdefault(round(frac * duration, 3), {})["alpha"] = value
        for frac, tokens in self.outputs:
            steps.setdefault(round(frac * duration, 3), {})["output_tokens"] = tokens
        timeline: list[dict[str, Any]] = [
            {"at": at, "slices": {"chat": patch}} for at, patch in sorted(steps.items())
        ]
        rate = load_trace(TRACE_NAMES["conv"]).rate * topo.scale
        timeline += [e.timeline(duration, rate) for e in self.events]
        timeline.sort(key=lambda e: float(e["at"]))
        pool = {"slice": "chat", "load_time": LOAD_SECONDS, "extra_args": list(extra_args)}
        pools: list[dict[str, Any]] = [
            {"name": "chat-baseline", "role": "baseline", "replicas": topo.baselines, **pool}
        ]
        weights = topo.canary_weights
        groups = [(w, weights.count(w)) for w in dict.fromkeys(weights)]
        for i, (w, n) in enumerate(groups):
            pools.append(
                {
                    "name": "chat-canary" + ("" if i == 0 else f"-{chr(ord('a') + i)}"),
                    "role": "canary",
                    "replicas": n,
                    "traffic_weight": w,
                    "speculative_config": spec_config(self.k),
                    "alpha_offset_spread": self.canary_spread,
                    **pool,
                }
            )
        extra: dict[str, Any] = {"stalls": dict(STALLS)} if self.stalls else {}
        return Scenario.model_validate(
            {
                **extra,
                "name": self.name,
                "description": self.title,
                "duration": duration,
                "slices": {"chat": self._slice()},
                "pools": pools,
                "timeline": timeline,
            }
        )

    def regression_start(self, hours: float) -> float | None:
        return None if self.regression is None else self.regression.at * hours * 3600.0


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
chat-to-code scenario (scenarios/chat-to-code.yaml), applied to the Poisson median."""


def _mix_share() -> list[tuple[float, float]]:
    # The code share: 0 -> 0.7 over 25-30% of the run, back to 0 over 60-65%, in small steps.
    return [*_ramp(0.25, 0.30, 0.0, MIX_CODE, 10), *_ramp(0.60, 0.65, MIX_CODE, 0.0, 10)]


def _mix() -> tuple[tuple[float, float], ...]:
    # 100% chat (0.70) -> 70% code (0.40): the pooled alpha falls to 0.49, then the mix
    # returns. Pooled alpha = share-weighted mean of the two (drafts per step alike).
    chat, code = 0.70, 0.40
    return ((0.0, chat), *((f, round((1 - s) * chat + s * code, 4)) for f, s in _mix_share()))


def _mix_outputs(median: int = POISSON_OUTPUT) -> tuple[tuple[float, int], ...]:
    # The same mix's output lengths: one log-normal whose median moves geometrically between
    # chat's and code's (a mixture of two log-normals with the same spread, to first order).
    return tuple((f, round(median * CODE_OUTPUT_RATIO**s)) for f, s in _mix_share())


BEST_K_MOVES: Final = ((0.0, 0.92, 0.02), (1 / 3, 0.9, 0.6), (2 / 3, 0.92, 0.02))
"""Chat (every position accepts well; alpha 0.78 at K=5) -> code (acceptance falls fast along the
draft; alpha 0.61 at K=5, still above the gate) -> chat. At this load a draft position costs
about half a plain step, so the best K is 3 in chat and 2 in code."""

ALPHAGATE_ONLY: Final = ("oracle", "alphagate")
IN_BAND: Final = 0.57
"""In-band truth of the per-day cases: inside 0.55-0.60, where the oracle says "on"."""


def _stationary(topo: str, traffic: Traffic, alpha: float, **kw: Any) -> Case:
    t = TOPOLOGIES[topo].title
    return Case(
        f"{topo}-{traffic}-a{alpha:g}",
        f"alpha {alpha:g} all along; {t}; {TRAFFIC_TITLES[traffic]}",
        topo,
        traffic,
        ((0.0, alpha),),
        **kw,
    )


def _acceptance_cases() -> list[Case]:
    traffics: tuple[Traffic, ...] = ("conv", "code", "poisson")
    out = [_stationary("1c3b", traffic, a) for traffic in traffics for a in (0.70, 0.62, 0.45)]
    out += [
        Case(
            "1c3b-conv-step",
            "alpha steps 0.70 -> 0.40 at 25% of the run; one canary pod; conversation trace",
            "1c3b",
            "conv",
            ((0.0, 0.70), (0.25, 0.40)),
        ),
        Case(
            "1c3b-poisson-mix-shift",
            "chat -> 70% code (pooled 0.49, outputs 1.37x longer) at 25-30%, back at 60-65%;"
            " one canary pod; Poisson",
            "1c3b",
            "poisson",
            _mix(),
            outputs=_mix_outputs(),
        ),
        Case(
            "1c3b-poisson-mix-returns-alpha-not",
            "mix-shift's traffic, but when its output lengths return at 60-65% alpha stays at"
            " 0.49 (an early re-probe must not repeat); one canary pod; Poisson",
            "1c3b",
            "poisson",
            tuple((f, a) for f, a in _mix() if f < 0.5),
            outputs=_mix_outputs(),
        ),
        _stationary("2c70", "conv", 0.62),
        _stationary("2c70", "conv", 0.45),
        _stationary("1c1b", "code", 0.62),
        _stationary("1c1b", "code", 0.45),
        _stationary("16c", "conv", 0.62),
        _stationary("16c", "code", 0.45),
        Case(
            "16c-conv-bad-a0.62",
            f"alpha 0.62 with {BAD_SHARE:.0%} rare bad requests at Beta(1, 4); sixteen"
            " low-traffic canary pods; conversation trace",
            "16c",
            "conv",
            ((0.0, 0.62),),
            bad_share=BAD_SHARE,
        ),
        Case(
            "1c3b-conv-bad-a0.546",
            f"alpha 0.546 (below the gate) with {BAD_SHARE:.0%} rare bad requests at"
            " Beta(1, 4); one canary pod; conversation trace",
            "1c3b",
            "conv",
            ((0.0, 0.546),),
            bad_share=BAD_SHARE,
        ),
        Case(
            "1c3b-conv-stalls",
            "alpha 0.70, stall episodes on every pod (6 an hour, ~30 s, 4x slower); one canary"
            " pod; conversation trace",
            "1c3b",
            "conv",
            ((0.0, 0.70),),
            stalls=True,
        ),
    ]
    return out


def _latency_cases() -> list[Case]:
    out = []
    layouts: tuple[Literal["default", "geometric"], ...] = ("default", "geometric")
    kinds: tuple[Literal["uniform", "tail"], ...] = ("uniform", "tail")
    for layout in layouts:
        for kind in kinds:
            for f in (1.2, 1.5, 2.0):
                how = (
                    "every step slower"
                    if kind == "uniform"
                    else f"{TAIL_SHARE:.0%} of requests slower, mean nearly unchanged"
                )
                lay = "vLLM's default buckets" if layout == "default" else "~10% geometric buckets"
                out.append(
                    Case(
                        f"1c3b-conv-{kind}-{f:g}x-{layout[:3]}",
                        f"alpha 0.70; from 25% the canary's P99 per token is {f:g}x the"
                        f" baseline's ({how}); {lay}; one canary pod; conversation trace",
                        "1c3b",
                        "conv",
                        ((0.0, 0.70),),
                        regression=Regression(kind, f, layout),
                    )
                )
    return out


def _in_band_cases() -> list[Case]:
    return [
        Case(
            f"day-{topo}-{traffic}-a{IN_BAND:g}",
            f"alpha {IN_BAND:g} (inside the band: should stay on) for a simulated day;"
            f" {TOPOLOGIES[topo].title}; {TRAFFIC_TITLES[traffic]}",
            topo,
            traffic,
            ((0.0, IN_BAND),),
            hours=DAY,
            policies=ALPHAGATE_ONLY,
        )
        for topo in ("1c3b", "1c1b", "2c70", "16c")
        for traffic in ("conv", "code", "poisson")
    ]


SUITE: Final[tuple[Case, ...]] = (*_acceptance_cases(), *_latency_cases(), *_in_band_cases())

EXTRA_CASES: Final[tuple[Case, ...]] = (
    Case(
        "best-k-moves",
        "K=5; chat (best K 3) -> code, tail positions fail (best K 2) at 33% -> chat at 67%"
        " (closed loop: the draft-length tuner's case)",
        "legacy",
        "closed",
        ((0.0, 0.0),),
        k=5,
        chain=BEST_K_MOVES,
    ),
    Case(
        "1c3b-poisson-drift",
        "alpha drifts 0.68 -> 0.46 -> 0.68 over a day (crosses the band twice); Poisson",
        "1c3b",
        "poisson",
        _drift(),
        hours=DAY,
    ),
)
"""Cases run only when named (``--cases``): not part of the suite's figures."""

OPERATIONS: Final[tuple[Case, ...]] = tuple(Case(**spec) for spec in operations.specs())
"""Cluster events the suite's truths lack (``--cases operations``; operations.py)."""

BY_NAME: Final = {c.name: c for c in (*SUITE, *EXTRA_CASES, *OPERATIONS)}


@functools.lru_cache(maxsize=1)
def group_names() -> dict[str, tuple[str, ...]]:
    """Named groups for ``--cases``: acceptance, latency, per-day, operations."""
    return {
        "acceptance": tuple(c.name for c in SUITE if c.scored),
        "latency": tuple(c.name for c in SUITE if c.regression is not None),
        "per-day": tuple(c.name for c in SUITE if c.per_day),
        "operations": tuple(c.name for c in OPERATIONS),
    }

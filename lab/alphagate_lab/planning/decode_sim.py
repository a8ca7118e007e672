"""A seeded decode-loop simulation: what speculation does to throughput and to the tail.

Each engine step serves a full batch of `concurrency` requests (a finished request is replaced
at once; prefill is not modelled, this is decode only). With speculation on, every request in
the step gets a draft of K tokens; position i is accepted with probability `p` (the per-position
acceptance rate) until the first rejection, and the target's verify pass adds one token of its
own (the correction or bonus token), as vLLM does. So a request gains 1 + accepted tokens per
step, and the alpha vLLM would report (accepted / proposed) is lower than `p`.

Step time model (the same roofline as :func:`alphagate_lab.planning.speedup.overhead_at`, so the
simulation and the closed form can check each other)::

    plain step:        W * (1 + (c) / ridge)                      * jitter
    speculative step:  W * (1 + draft_overhead + c*(K+1) / ridge) * jitter

`W` is the weight-read time of one step, `ridge` the tokens per step at which compute equals
that read. Every one of the K+1 positions is verified and paid for, accepted or not, so a step
in which a draft was rejected early costs a full speculative step for a single token: that is
where the tail comes from. `jitter` is a mean-one log-normal, shared (same random numbers)
between the runs with and without speculation so the comparison is paired.

Reported per run: tokens per target pass; mean and P99 time per engine step (what vLLM's
`vllm:inter_token_latency_seconds` observes, once per request per step); mean and P99 time per
token (each token carries its step's time divided by the tokens that step emitted for its
request); P99 of per-request time per output token (what
`vllm:request_time_per_output_token_seconds` observes); tokens per second.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from alphagate.core.speedup import DEFAULT_RIDGE_TOKENS
from alphagate_lab.planning.speedup import alpha_from_position_rate, breakeven_alpha_at, speedup_at

DEFAULT_SWEEP: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything one simulated run depends on; equal configs give equal results."""

    alpha: float = 0.8  # per-position acceptance probability p
    k: int = 5
    overhead: float = 0.1  # draft cost as a fraction of W (the small-batch epsilon)
    concurrency: int = 64
    steps: int = 1000
    seed: int = 0
    weight_ms: float = 20.0
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS
    jitter: float = 0.05  # sigma of the log-normal step-time noise
    output_tokens: float = 256.0  # mean decode length of a request (geometric)

    def __post_init__(self) -> None:
        if not (0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha must be within [0, 1], got {self.alpha}")
        if self.k < 1:
            raise ValueError(f"K must be at least 1, got {self.k}")
        if not math.isfinite(self.overhead) or self.overhead < 0:
            raise ValueError(f"overhead must be >= 0, got {self.overhead}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not (1 <= self.steps <= 1_000_000):
            raise ValueError(f"steps must be within [1, 1000000], got {self.steps}")
        if self.weight_ms <= 0 or self.ridge_tokens <= 0:
            raise ValueError("weight_ms and ridge_tokens must be > 0")
        if not (0.0 <= self.jitter <= 2.0):
            raise ValueError(f"jitter must be within [0, 2], got {self.jitter}")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens must be at least 1, got {self.output_tokens}")


@dataclass(frozen=True, slots=True)
class RunStats:
    """One run (speculation on or off) at one concurrency."""

    speculative: bool
    concurrency: int
    steps: int
    tokens: int
    tokens_per_pass: float
    measured_alpha: float | None  # accepted / proposed, as vLLM reports it; None when off
    mean_ms_per_token: float
    p99_ms_per_token: float
    mean_ms_per_step: float
    p99_ms_per_step: float
    p99_request_tpot_ms: float | None  # None when no request finished
    requests_finished: int
    tokens_per_second: float


@dataclass(frozen=True, slots=True)
class Comparison:
    """The same workload with and without speculation, paired on the same random numbers."""

    config: SimConfig
    off: RunStats
    on: RunStats
    speedup: float  # tokens/s on / off
    predicted_speedup: float  # closed form at the measured alpha
    breakeven_alpha: float  # closed form at this concurrency
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def pays(self) -> bool:
        return self.speedup > 1.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pays"] = self.pays
        return out


def _weighted_quantile(
    values: NDArray[np.float64], weights: NDArray[np.float64], q: float
) -> float:
    """Quantile of a weighted sample (lower value at the crossing, like a histogram bound)."""
    mask = weights > 0
    v, w = values[mask], weights[mask]
    if v.size == 0:
        return math.nan
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    idx = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(v[min(idx, v.size - 1)])


def _draw_lengths(rng: np.random.Generator, n: int, mean: float) -> NDArray[np.int64]:
    if mean <= 1.0:
        return np.ones(n, dtype=np.int64)
    return rng.geometric(1.0 / mean, size=n).astype(np.int64)


def run(config: SimConfig, *, speculative: bool) -> RunStats:
    """Simulate `config.steps` engine steps at a full batch; deterministic per config."""
    c, k, steps = config.concurrency, config.k, config.steps
    # Paired randomness: lengths and jitter come from the same stream in both runs.
    env = np.random.default_rng([config.seed, c, 0])
    acc_rng = np.random.default_rng([config.seed, c, 1])
    jitter = np.exp(config.jitter * env.standard_normal(steps) - config.jitter**2 / 2)
    # A pool of request lengths, drawn up front so both runs see the same requests in order.
    pool = _draw_lengths(env, 2 * c + 1024, config.output_tokens)
    next_req = c
    remaining = pool[:c].copy()
    decode_ms = np.zeros(c)
    decode_tokens = np.zeros(c, dtype=np.int64)

    positions = c * (k + 1) if speculative else c
    base_ms = config.weight_ms * (
        1.0 + (config.overhead if speculative else 0.0) + positions / config.ridge_tokens
    )
    step_ms = base_ms * jitter

    emitted_counts = np.zeros((steps, k + 2), dtype=np.int64)  # per step: requests emitting e
    tpots: list[NDArray[np.float64]] = []
    accepted_total = 0
    tokens_total = 0
    p = config.alpha
    for t in range(steps):
        if speculative:
            if p >= 1.0:
                accepted = np.full(c, k, dtype=np.int64)
            elif p <= 0.0:
                accepted = np.zeros(c, dtype=np.int64)
            else:
                accepted = np.minimum(acc_rng.geometric(1.0 - p, size=c) - 1, k)
            emitted = np.minimum(1 + accepted, remaining)
            accepted_total += int((emitted - 1).sum())
        else:
            emitted = np.ones(c, dtype=np.int64)
        tokens_total += int(emitted.sum())
        emitted_counts[t] = np.bincount(emitted, minlength=k + 2)[: k + 2]
        remaining -= emitted
        decode_ms += step_ms[t]
        decode_tokens += emitted
        done = np.flatnonzero(remaining <= 0)
        if done.size:
            tpots.append(decode_ms[done] / decode_tokens[done])
            if next_req + done.size > pool.size:  # refill the pool (rare: very short outputs)
                pool = np.concatenate([pool, _draw_lengths(env, pool.size, config.output_tokens)])
            remaining[done] = pool[next_req : next_req + done.size]
            next_req += done.size
            decode_ms[done] = 0.0
            decode_tokens[done] = 0

    total_ms = float(step_ms.sum())
    e = np.arange(k + 2, dtype=np.float64)
    per_token_values = (step_ms[:, None] / np.maximum(e, 1.0)[None, :]).ravel()
    per_token_weights = (emitted_counts * e[None, :]).astype(np.float64).ravel()
    finished = np.concatenate(tpots) if tpots else np.zeros(0)
    drafted = steps * c * k if speculative else 0
    return RunStats(
        speculative=speculative,
        concurrency=c,
        steps=steps,
        tokens=tokens_total,
        tokens_per_pass=tokens_total / (steps * c),
        measured_alpha=(accepted_total / drafted) if speculative else None,
        mean_ms_per_token=total_ms * c / tokens_total,
        p99_ms_per_token=_weighted_quantile(per_token_values, per_token_weights, 0.99),
        mean_ms_per_step=total_ms / steps,
        p99_ms_per_step=float(np.quantile(step_ms, 0.99, method="inverted_cdf")),
        p99_request_tpot_ms=(
            float(np.quantile(finished, 0.99, method="inverted_cdf")) if finished.size else None
        ),
        requests_finished=int(finished.size),
        tokens_per_second=tokens_total / (total_ms / 1000.0),
    )


def compare(config: SimConfig) -> Comparison:
    """Run the workload with and without speculation and set the closed form beside them."""
    off = run(config, speculative=False)
    on = run(config, speculative=True)
    measured = on.measured_alpha if on.measured_alpha is not None else 0.0
    kw = {"ridge_tokens": config.ridge_tokens}
    return Comparison(
        config=config,
        off=off,
        on=on,
        speedup=on.tokens_per_second / off.tokens_per_second,
        predicted_speedup=speedup_at(measured, config.k, config.overhead, config.concurrency, **kw),
        breakeven_alpha=breakeven_alpha_at(config.k, config.overhead, config.concurrency, **kw),
        extra={"vllm_alpha_expected": alpha_from_position_rate(config.alpha, config.k)},
    )


def sweep(config: SimConfig, concurrencies: tuple[int, ...] = DEFAULT_SWEEP) -> list[Comparison]:
    """The same workload at each concurrency (plus config.concurrency), sorted."""
    levels = sorted({*concurrencies, config.concurrency})
    return [compare(_with(config, concurrency=c)) for c in levels]


def stops_paying_at(results: list[Comparison]) -> int | None:
    """The lowest simulated concurrency at which speculation no longer pays, if any."""
    for r in results:
        if not r.pays:
            return r.config.concurrency
    return None


def _with(config: SimConfig, **changes: Any) -> SimConfig:
    values = asdict(config)
    values.update(changes)
    return SimConfig(**values)

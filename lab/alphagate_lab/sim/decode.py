"""What a simulated engine is and is asked, as data: its cost constants, stall episodes and
the load of a tick in; the step-time formula; what a tick really did out (`TickTruth`). The
engine itself, and why each part is there, is in `model`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class DecodeParams:
    """Cost constants of one engine; defaults resemble an 8B model on one datacenter GPU."""

    t_base: float = 0.010
    t_token: float = 0.00004
    t_draft: float = 0.0008
    t_draft_token: float = 0.000005
    token_budget: int = 2048
    max_num_seqs: int = 256
    jitter: float = 0.12
    prefill_per_token: float = 0.00002


@dataclass(frozen=True)
class Stalls:
    """Episodes in which a pod's steps run ``slowdown`` times slower (0 per hour: none).

    Episodes start as a Poisson process (``rate_per_hour``) and last a log-normal time around
    ``duration`` seconds.
    """

    rate_per_hour: float = 0.0
    duration: float = 30.0
    slowdown: float = 4.0


@dataclass(frozen=True, eq=False)
class Load:
    """What one pod is asked to serve during a tick (its slice's traffic, per pod).

    Open loop draws Poisson ``arrival_rate`` arrivals with model lengths, unless the router
    dealt replayed requests: ``arrivals`` (seconds into the tick, ascending) with their
    ``arrival_output`` and ``arrival_prompt`` token counts. ``bad_share`` of new requests are
    bad ones (their acceptance drawn around ``bad_alpha`` with concentration ``bad_spread``),
    the others around the alpha that keeps the drafts' mean at ``alpha``.
    """

    alpha: float
    arrival_rate: float = 0.0
    concurrency: int | None = None
    alpha_noise: float = 0.01
    decay: float = 0.15
    draft_fill: float = 1.0
    request_spread: float = 6.0
    prompt_tokens: int = 512
    output_tokens: int = 256
    output_sigma: float = 1.0
    max_output_tokens: int = 8192
    arrivals: FloatArray | None = None
    arrival_output: FloatArray | None = None
    arrival_prompt: FloatArray | None = None
    bad_share: float = 0.0
    bad_alpha: float = 0.2
    bad_spread: float = 5.0


def output_lengths(z: FloatArray, load: Load) -> FloatArray:
    """Output lengths (tokens) for standard normal draws ``z``: log-normal around the median
    ``output_tokens`` with spread ``output_sigma``, at least 1, capped at ``max_output_tokens``.
    """
    if load.output_sigma <= 0:
        return np.full(z.size, float(min(load.output_tokens, load.max_output_tokens)))
    out: FloatArray = load.output_sigma * z  # the same operations, in place
    np.exp(out, out=out)
    out *= load.output_tokens
    np.rint(out, out=out)
    np.maximum(out, 1.0, out=out)
    np.minimum(out, float(load.max_output_tokens), out=out)
    return out


def step_time(batch: int, k: int, params: DecodeParams, scale: float = 1.0) -> tuple[float, int]:
    """Mean duration of one engine step over ``batch`` requests, and its number of passes.

    ``k`` is the number of speculative tokens; 0 means speculation is off.
    """
    if batch <= 0:
        return 0.0, 0
    tokens = batch * (1 + k)
    passes = max(1, math.ceil(tokens / params.token_budget))
    t = passes * params.t_base + params.t_token * tokens
    if k:
        t += k * (params.t_draft + params.t_draft_token * batch)
    return scale * t, passes


@dataclass(frozen=True)
class TickTruth:
    """What really happened in a tick, for checking estimators and scoring decisions.

    ``alpha`` is what the pod is set to converge to now (slice alpha, pod offset, wander);
    ``batch_alpha`` is the drafts-weighted acceptance of the requests that were in flight
    (what this tick's counters show, up to sampling noise). ``drafted_alpha`` is what they show
    in expectation over the requests' own draws: the set alpha each in-flight request was
    drawn around at its admission, weighted by its drafts in the tick. In steady state it is
    the set alpha; after a change it lags it by a request's life (requests keep theirs).
    ``realised_alpha`` is the same with the pod's own wander in: the alpha each in-flight
    request's acceptance was really drawn around at its admission (set alpha, pod offset and
    the wander then), weighted by its drafts: what the pod's counters show up to the requests'
    own draws.
    ``time_per_token`` and ``tpot_p99`` are the mean and 99th percentile of the per-token
    latency the running requests got; ``generated`` counts the tokens of the tick.
    """

    alpha: float
    batch: float
    steps: int
    passes: int
    mean_step: float
    tokens_per_step: float
    time_per_token: float
    batch_alpha: float = 0.0
    drafted_alpha: float = 0.0
    realised_alpha: float = 0.0
    tpot_p99: float = 0.0
    generated: int = 0
    finished: int = 0
    stalled: float = 0.0

"""Seeded decode model of one vLLM engine, with and without speculative decoding.

This is the physics behind every simulated pod. It is deliberately simple, but each part is
there because the controller's decisions depend on it:

* **Step time.** One engine step verifies every running request once. A forward pass costs a
  fixed ``t_base`` (weight reads: why decode is memory bound at small batch) plus ``t_token``
  per token in the pass. Plain decode puts ``B`` tokens in the pass; speculation with ``K``
  draft tokens puts ``B * (1 + K)`` and adds ``K`` drafter forwards
  (``t_draft + t_draft_token * B`` each). When the tokens exceed ``token_budget``
  (vLLM's ``max_num_batched_tokens``) the step is split into passes that run one after the
  other, each paying ``t_base`` again: in a full batch the verify passes serialise. Step
  durations get log-normal jitter (``jitter``), and a step that carries a new request's
  prefill chunk is longer by that prefill (the stutter a streaming user sees).
  So step time grows with batch size and K; at small batch speculation costs little extra
  per step, at large batch it costs a multiple. A slow AR(1) "slowness" (batch composition,
  context lengths) multiplies step times so throughput wanders like a real engine's.
* **Acceptance.** Each draft proposes K tokens. Position ``i`` is accepted with probability
  ``p ** (1 + decay * i)`` given that all earlier ones were; the first rejection ends the
  draft. ``p`` is solved so that the expected accepted tokens per draft is ``K * alpha``, so
  the counters' ``accepted / draft_tokens`` converges to the slice's alpha. Accepted counts
  per tick are drawn as one multinomial over ``0..K`` accepted tokens, so
  ``per_pos`` is non-increasing and sums to ``accepted`` exactly as in vLLM. ``draft_fill``
  < 1 models proposers (n-gram) that find no draft on some steps: those steps count no draft.
  A pod's effective alpha wanders around the slice's alpha (an AR(1) process with standard
  deviation ``alpha_noise`` and a 30 s correlation time, plus a fixed per-pod offset).
* **Observations, as vLLM makes them.** ``vllm:inter_token_latency_seconds`` gets one
  observation per engine step per running request (the step duration), whatever the number
  of tokens the step emitted (1 + accepted). Each request emits ``1 + A`` tokens per step.
  Per finished request, ``vllm:request_time_per_output_token_seconds`` gets
  decode time / (tokens - 1). Requests differ: a request's own acceptance is drawn from a
  Beta around the pod's alpha (concentration ``request_spread``), so a request with poor
  acceptance pays the long speculative step for one token. That is why the mean time per
  output token falls with good alpha while per-step ITL rises, and why, under a full batch
  where steps split into passes, the P99 per-token latency of a speculating pod can exceed
  the baseline's although its mean is lower (``scenarios/p99-regression.yaml``).
* **Load.** Either open loop (Poisson arrivals at ``arrival_rate`` per pod, queued when
  ``max_num_seqs`` are running) or closed loop (``concurrency`` clients per pod, each sending
  its next request when the last finished). Output lengths are geometric with mean
  ``output_tokens`` (memoryless, so finishing needs no per-request state); prompts have mean
  ``prompt_tokens``. The queue is integrated exactly (``dB/dt = arrivals - lam * B``) in
  sub-steps of at most a second, so results do not depend on the tick length.

Everything is aggregate per tick (1 s in real time, 15 s for fast runs): one draw per
quantity per tick; up to 256 sampled step durations for the ITL histogram and up to 64
sampled requests for the per-request histograms, each weighted to stand for its share.
Fractional counts carry to the next tick. A 24 h fleet therefore runs in seconds. All
randomness comes from the ``numpy.random.Generator`` given to the engine, so a seed fixes
the run.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from alphagate import vllm

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Correlation time (s) of the pod's alpha wander.
ALPHA_NOISE_TAU = 30.0
#: Correlation time (s) of an engine's slowness (batch composition, context lengths).
SLOW_TAU = 20.0
#: Fraction of finished requests that stop on max_tokens rather than on a stop token.
LENGTH_FINISH_FRACTION = 0.25
#: Cap on a simulated queue wait, so an overloaded pod cannot produce absurd TTFTs.
MAX_QUEUE_WAIT = 600.0


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
class Load:
    """What one pod is asked to serve during a tick (its slice's traffic, per pod)."""

    alpha: float
    arrival_rate: float = 0.0
    concurrency: int | None = None
    alpha_noise: float = 0.01
    decay: float = 0.15
    draft_fill: float = 1.0
    request_spread: float = 6.0
    prompt_tokens: int = 512
    output_tokens: int = 256


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


def _ge_exponents(k: int, decay: float) -> FloatArray:
    """Exponents e_j with P(A >= j) = p ** e_j (e_0 = 0)."""
    j = np.arange(k + 1, dtype=np.float64)
    return np.asarray(j + decay * j * (j - 1) / 2, dtype=np.float64)


class AcceptanceTable:
    """Accepted-token distributions over a fine alpha grid, for one (K, decay).

    Row ``i`` is the distribution of accepted tokens per draft whose mean is
    ``K * i / GRID``, found by bisection on the first-position acceptance ``p``.
    """

    GRID = 2000

    def __init__(self, k: int, decay: float) -> None:
        self.k = k
        self.decay = decay
        expo = _ge_exponents(k, decay)
        alphas = np.linspace(0.0, 1.0, self.GRID + 1)
        lo = np.zeros_like(alphas)
        hi = np.ones_like(alphas)
        for _ in range(50):
            mid = (lo + hi) / 2
            mean = (mid[:, None] ** expo[None, 1:]).sum(axis=1) / k
            below = mean < alphas
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        p = (lo + hi) / 2
        p[0], p[-1] = 0.0, 1.0
        ge = p[:, None] ** expo[None, :]
        ge[:, 0] = 1.0
        probs = ge - np.concatenate([ge[:, 1:], np.zeros((ge.shape[0], 1))], axis=1)
        probs = np.clip(probs, 0.0, None)
        self.rows: FloatArray = probs / probs.sum(axis=1, keepdims=True)

    def probs(self, alpha: float) -> FloatArray:
        """Distribution of accepted tokens per draft whose mean is ``k * alpha`` (to 1/GRID)."""
        i = round(min(max(alpha, 0.0), 1.0) * self.GRID)
        row: FloatArray = self.rows[i]
        return row


@functools.lru_cache(maxsize=64)
def acceptance_table(k: int, decay: float) -> AcceptanceTable:
    """Shared, cached table (building one takes a few milliseconds)."""
    return AcceptanceTable(k, decay)


class Histograms:
    """The state of a pod's vLLM histograms: per-bucket weights (``le`` buckets, then +Inf)
    and sums, for several families kept in one array.

    Weights are floats because a tick observes a sample of its steps and requests, each
    standing for several; exposure rounds the cumulative counts, which keeps them integral,
    monotone in ``le`` and non-decreasing over time. Observations are binned lazily, once
    per read and for all families at once, because binning dominated the cost of a tick.
    """

    def __init__(self, families: dict[str, tuple[float, ...]]) -> None:
        self.names = list(families)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.bounds = [np.asarray(b, dtype=np.float64) for b in families.values()]
        self.sizes = [len(b) + 1 for b in families.values()]
        self.offsets = [0, *itertools.accumulate(self.sizes)][:-1]
        self._starts = np.asarray(self.offsets, dtype=np.int64)
        total = sum(self.sizes)
        self.counts: FloatArray = np.zeros(total, dtype=np.float64)
        self.sums: FloatArray = np.zeros(len(self.names), dtype=np.float64)
        self._pending: list[tuple[int, FloatArray, float]] = []
        self._cache: dict[str, tuple[list[int], float]] | None = None

    def observe(self, name: str, values: FloatArray, weight: float = 1.0) -> None:
        """Add each value ``weight`` times (a value equal to a bound falls in that bucket)."""
        if values.size and weight > 0:
            self._pending.append((self.index[name], values, weight))
            self._cache = None

    def observe_constant(self, name: str, value: float, n: float) -> None:
        """Add ``value`` ``n`` times, without sampling."""
        if n <= 0:
            return
        h = self.index[name]
        i = bisect.bisect_left(self.bounds[h].tolist(), value)
        self.counts[self.offsets[h] + i] += n
        self.sums[h] += value * n
        self._cache = None

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        idx = np.concatenate(
            [self.bounds[h].searchsorted(v, side="left") + self.offsets[h] for h, v, _ in pending]
        )
        sizes = [v.size for _, v, _ in pending]
        weights = np.repeat([w for _, _, w in pending], sizes)
        values = np.concatenate([v for _, v, _ in pending])
        hist_ids = np.repeat([h for h, _, _ in pending], sizes)
        self.counts += np.bincount(idx, weights=weights, minlength=self.counts.size)
        self.sums += np.bincount(hist_ids, weights=values * weights, minlength=self.sums.size)
        pending.clear()

    def read(self) -> dict[str, tuple[list[int], float]]:
        """Per family: cumulative bucket counts as exposed (last is ``+Inf``) and the sum."""
        if self._cache is None:
            self._flush()
            cum = np.cumsum(self.counts)
            before = np.concatenate(([0.0], cum))[self._starts]
            flat = np.rint(cum - np.repeat(before, self.sizes)).astype(np.int64).tolist()
            sums = self.sums.tolist()
            self._cache = {
                name: (flat[off : off + size], sums[h])
                for h, (name, off, size) in enumerate(
                    zip(self.names, self.offsets, self.sizes, strict=True)
                )
            }
        return self._cache


def _histograms() -> Histograms:
    return Histograms(
        {
            vllm.TTFT: vllm.TTFT_BUCKETS,
            vllm.ITL: vllm.ITL_BUCKETS,
            vllm.TPOT: vllm.TPOT_BUCKETS,
            vllm.E2E: vllm.E2E_BUCKETS,
            vllm.QUEUE_TIME: vllm.QUEUE_TIME_BUCKETS,
            vllm.DECODE_TIME: vllm.DECODE_TIME_BUCKETS,
        }
    )


@dataclass
class EngineCounters:
    """Everything a vLLM process counts since it started; a restart makes a fresh one.

    ``accept_counts[j]`` counts drafts with exactly ``j`` accepted tokens; vLLM's per-position
    counter is its reverse cumulative sum (:meth:`per_pos`).
    """

    k: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accept_counts: IntArray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    generation_tokens: int = 0
    prompt_tokens: int = 0
    success: dict[str, int] = field(default_factory=lambda: dict.fromkeys(vllm.FINISH_REASONS, 0))
    running: int = 0
    waiting: int = 0
    histograms: Histograms = field(default_factory=_histograms)

    def __post_init__(self) -> None:
        if self.accept_counts.size != self.k + 1:
            self.accept_counts = np.zeros(self.k + 1, dtype=np.int64)

    def per_pos(self) -> list[int]:
        """``per_pos[i]`` = drafts with at least ``i + 1`` accepted tokens."""
        out: list[int] = np.cumsum(self.accept_counts[::-1])[::-1][1:].tolist()
        return out


@dataclass(frozen=True)
class TickTruth:
    """What really happened in a tick, for checking estimators against."""

    alpha: float
    batch: float
    steps: int
    passes: int
    mean_step: float
    tokens_per_step: float
    time_per_token: float


#: Longest stretch of the deterministic queue integration inside a tick (s).
SUBSTEP = 1.0
#: Most step durations sampled per tick for the ITL histogram (each stands for several).
MAX_STEP_SAMPLES = 256
#: Most finished/admitted requests sampled per tick for the per-request histograms.
MAX_REQUEST_SAMPLES = 64


class Engine:
    """Queue and batch state of one vLLM engine, advanced one tick at a time.

    Within a tick the queue (arrivals, admission, finishes) is integrated deterministically
    in sub-steps of at most one second, so the batch size does not depend on the tick length;
    the randomness (arrivals, step jitter, acceptance, per-request spread) is drawn once per
    tick. Fractional counts carry over to the next tick instead of being rounded away.
    """

    def __init__(
        self,
        params: DecodeParams,
        rng: np.random.Generator,
        *,
        k: int,
        alpha_offset: float = 0.0,
    ) -> None:
        self.params = params
        self.rng = rng
        self.k = k
        self.alpha_offset = alpha_offset
        self.running = 0.0
        self.waiting = 0.0
        self.noise = 0.0
        self.slow = 0.0
        self._positions = np.arange(k + 1, dtype=np.int64)
        self._step_cache: dict[tuple[int, float], tuple[float, int]] = {}
        self._carry_obs = 0.0
        self._carry_admit = 0.0
        self._carry_finish = 0.0
        self._carry_steps = 0.0

    def tick(self, dt: float, load: Load, c: EngineCounters, *, scale: float = 1.0) -> TickTruth:
        """Advance ``dt`` seconds under ``load``, adding what vLLM would count into ``c``."""
        rng = self.rng
        p = self.params
        k = self.k
        sigma = p.jitter
        fill = load.draft_fill

        # Alpha wander and engine slowness: AR(1) processes whose stationary standard deviations
        # (alpha_noise; jitter / 3 in log step time) do not depend on the tick length.
        z0, z1 = rng.standard_normal(2).tolist()
        rho = math.exp(-dt / ALPHA_NOISE_TAU)
        if load.alpha_noise > 0:
            self.noise = rho * self.noise + math.sqrt(1 - rho * rho) * load.alpha_noise * z0
        else:
            self.noise = 0.0
        rho = math.exp(-dt / SLOW_TAU)
        self.slow = rho * self.slow + math.sqrt(1 - rho * rho) * (sigma / 3) * z1
        slow = math.exp(self.slow)
        alpha = min(max(load.alpha + self.alpha_offset + self.noise, 0.0), 1.0)
        tps = 1.0 + fill * k * alpha if k else 1.0
        n_out = max(load.output_tokens, 2)
        log_keep = math.log1p(-1.0 / n_out)
        prefill_one = load.prompt_tokens * p.prefill_per_token * scale

        arrivals = 0.0
        if load.concurrency is None and load.arrival_rate > 0:
            arrivals = float(rng.poisson(load.arrival_rate * dt))
        backlog_before = self.waiting

        # Deterministic queue integration over sub-steps.
        n_sub = max(1, math.ceil(dt / SUBSTEP - 1e-9))
        h = dt / n_sub
        run, wait = self.running, self.waiting
        obs = steps = step_sum = admitted = finished = batch_time = 0.0
        passes_max = 0
        step_cache = self._step_cache
        if len(step_cache) > 4096:
            step_cache.clear()
        cap = float(p.max_num_seqs)
        conc = load.concurrency
        closed = conc is not None
        rate_in = 0.0 if closed else arrivals / dt
        for _ in range(n_sub):
            if conc is not None:
                clients = run + wait
                if clients < conc:
                    wait += conc - clients
                elif clients > conc:
                    wait -= min(wait, clients - conc)
            admit = min(wait, max(cap - run, 0.0))
            wait -= admit
            run += admit
            if run <= 1e-9 and rate_in <= 0:
                admitted += admit
                continue
            key = (max(round(run), 1), scale)
            cached = step_cache.get(key)
            if cached is None:
                cached = step_cache[key] = step_time(key[0], k, p, scale)
            st, passes = cached
            st *= slow
            passes_max = max(passes_max, passes)
            lam = -log_keep * tps / st  # finishes per running request per second
            # Prefill chunks of new requests take part of the sub-step from decoding.
            expected_new = admit + (run * lam * h if closed or wait > 1e-9 else rate_in * h)
            prefill = min(expected_new * prefill_one, 0.5 * h)
            lam *= (h - prefill) / h
            if conc is not None:
                # Closed loop: a client sends its next request as soon as the last one ends,
                # unless there are more clients than wanted (then it leaves).
                fin = run * lam * h
                refill = max(fin - max(run + wait - conc, 0.0), 0.0)
                integral = run * h
                end = run - fin + refill
                arrived = refill
            elif wait > 1e-9:
                # Saturated: each finish is replaced at once from the queue.
                fin = run * lam * h
                refill = min(fin, wait + rate_in * h)
                wait += rate_in * h - refill
                integral = run * h
                end = run - fin + refill
                arrived = refill
            else:
                # Open loop below capacity: dB/dt = arrivals - lam * B, solved exactly.
                decay = math.exp(-lam * h)
                eq = rate_in / lam
                end = eq + (run - eq) * decay
                integral = eq * h + (run - eq) * (1.0 - decay) / lam
                arrived = rate_in * h
                if end > cap:
                    wait += end - cap
                    arrived -= end - cap
                    end = cap
                fin = run + arrived - end
            admitted += admit + arrived
            n = (h - prefill) / st
            steps += n
            step_sum += n * st
            obs += integral * (h - prefill) / h / st
            batch_time += integral
            finished += fin
            run = max(end, 0.0)
        self.running, self.waiting = run, wait
        c.running, c.waiting = round(run), round(wait)

        if steps <= 0:
            return TickTruth(alpha, 0.0, 0, 0, 0.0, tps, 0.0)

        base = step_sum / steps
        n_obs = int(obs + self._carry_obs)
        self._carry_obs += obs - n_obs
        n_steps = int(steps + self._carry_steps)
        self._carry_steps += steps - n_steps
        n_admit = int(admitted + self._carry_admit)
        self._carry_admit += admitted - n_admit
        n_fin = int(finished + self._carry_finish)
        self._carry_finish += finished - n_fin

        # One batch of log-normal jitter for steps and first tokens.
        m_steps = min(max(n_steps, 1), MAX_STEP_SAMPLES)
        m_adm = min(n_admit, MAX_REQUEST_SAMPLES)
        m_fin = min(n_fin, MAX_REQUEST_SAMPLES)
        jit = np.exp(rng.standard_normal(m_steps + m_adm + m_fin) * sigma - sigma * sigma / 2)

        # ITL: one observation per step per running request, the step's duration. Steps that
        # carry a new request's prefill chunk are longer by that prefill.
        durations = jit[:m_steps] * base
        if admitted and prefill_one:
            m = round(m_steps * min(1.0, admitted / steps))
            if m:
                durations[:m] += prefill_one
        c.histograms.observe(vllm.ITL, durations, obs / m_steps)
        mean_step = float(np.add.reduce(durations)) / m_steps

        # Speculation counters: every step of every running request verifies one draft.
        accepted = 0
        if k and n_obs:
            n_drafts = n_obs if fill >= 1.0 else int(rng.binomial(n_obs, fill))
            counts = rng.multinomial(n_drafts, acceptance_table(k, load.decay).probs(alpha))
            accepted = int(counts @ self._positions)
            c.drafts += n_drafts
            c.draft_tokens += n_drafts * k
            c.accepted += accepted
            c.accept_counts += counts
        c.generation_tokens += n_obs + accepted + n_admit
        c.prompt_tokens += n_admit * load.prompt_tokens

        first = prefill_one + base
        # First tokens of admitted requests: queueing, then prefill.
        if m_adm:
            w = n_admit / m_adm
            prefill_t = jit[m_steps : m_steps + m_adm] * first
            if backlog_before > 0.5 and finished > 0:
                mean_wait = min(backlog_before / (finished / dt), MAX_QUEUE_WAIT)
                queue = rng.exponential(mean_wait, m_adm)
                c.histograms.observe(vllm.QUEUE_TIME, queue, w)
                c.histograms.observe(vllm.TTFT, queue + prefill_t, w)
            else:
                c.histograms.observe_constant(vllm.QUEUE_TIME, 0.0, float(n_admit))
                c.histograms.observe(vllm.TTFT, prefill_t, w)

        # Finished requests: length, own acceptance, per-token time, end-to-end.
        if m_fin:
            w = n_fin / m_fin
            n_tokens = rng.geometric(1.0 / n_out, m_fin) + 1.0
            if k:
                kappa = load.request_spread
                a_r = rng.beta(max(alpha, 1e-3) * kappa, max(1.0 - alpha, 1e-3) * kappa, m_fin)
                tps_r = a_r * (fill * k) + 1.0
            else:
                tps_r = np.ones(m_fin)
            s = math.sqrt(sigma * sigma * tps / n_out + 0.0004)
            tpot = np.exp(rng.standard_normal(m_fin) * s - s * s / 2) * mean_step / tps_r
            decode = tpot * (n_tokens - 1.0)
            c.histograms.observe(vllm.TPOT, tpot, w)
            c.histograms.observe(vllm.DECODE_TIME, decode, w)
            c.histograms.observe(vllm.E2E, jit[m_steps + m_adm :] * first + decode, w)
            n_length = round(n_fin * LENGTH_FINISH_FRACTION)
            c.success["length"] += n_length
            c.success["stop"] += n_fin - n_length

        return TickTruth(
            alpha=alpha,
            batch=batch_time / dt,
            steps=n_steps,
            passes=passes_max,
            mean_step=mean_step,
            tokens_per_step=tps,
            time_per_token=mean_step / tps,
        )

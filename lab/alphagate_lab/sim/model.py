"""Seeded decode model of one vLLM engine, request by request, with and without speculation.

This is the physics behind every simulated pod. It is deliberately simple, but each part is
there because the controller's decisions depend on it:

* **Requests in flight.** The engine tracks every running request: its own acceptance, its
  output length and what is left of it, when it arrived and when its first token came. A
  request keeps its acceptance for its whole life (drawn at admission around the pod's
  alpha, see :mod:`alphagate_lab.sim.acceptance`), and output lengths are log-normal (a median
  and a long tail, capped at ``max_output_tokens``), so a long request spans many scrapes and
  carries its acceptance from one window into the next, as in real traffic.
* **Step time.** One engine step verifies every running request once. A forward pass costs a
  fixed ``t_base`` plus ``t_token`` per token in the pass. Plain decode puts ``B`` tokens in
  the pass; speculation with ``K`` draft tokens puts ``B * (1 + K)`` and adds ``K`` drafter
  forwards (``t_draft + t_draft_token * B`` each). Past ``token_budget`` (vLLM's
  ``max_num_batched_tokens``) the step splits into passes that run one after the other,
  each paying ``t_base`` again. A slow AR(1) "slowness" multiplies step times, prefill chunks
  of new requests take their share of the engine's time, and **stall episodes** (GC,
  preemption, a noisy neighbour: :class:`Stalls`) make every step several times slower for
  tens of seconds.
* **Acceptance.** Every step of a running request verifies one draft (a share ``draft_fill``
  of steps for proposers such as n-gram that find no draft on some steps); the draft stops
  at its first rejection. Per request and tick the accepted counts are one multinomial over
  ``0..K`` accepted tokens with that request's own distribution, so ``per_pos`` is
  non-increasing and sums to ``accepted`` exactly as in vLLM. The pod's alpha wanders around
  the slice's (AR(1), ``alpha_noise``, 30 s) plus a fixed per-pod offset; requests admitted
  now are drawn around the current value.
* **Observations, as vLLM makes them.** ``vllm:inter_token_latency_seconds`` gets one
  observation per engine step per running request (the step duration, whatever the tokens it
  emitted). Per finished request, ``vllm:request_time_per_output_token_seconds`` gets its own
  decode time / (tokens - 1): a request with poor acceptance pays the long speculative step
  for one token, and one that lived through a stall is slow. That is why the mean time per
  token falls with good alpha while per-step ITL rises, and why under a full batch the P99
  per-token latency of a speculating pod can exceed the baseline's although its mean is lower.
* **Load.** Open loop (Poisson arrivals at ``arrival_rate`` per pod, queued FIFO when
  ``max_num_seqs`` are running) or closed loop (``concurrency`` clients per pod, each sending
  its next request when the last finished).

A tick (1 s in real time, 15 s for fast runs) is one vectorised pass over the requests in
flight: the step rate is constant within a tick except inside a stall, requests admitted in
the tick start at their admission instant, and slots freed by finishing requests admit the
queue in order (in a few rounds when the tick is longer than a request). All randomness comes
from the ``numpy.random.Generator`` given to the engine, so a seed fixes the run. What a
request is when admitted is :mod:`alphagate_lab.sim.admission`; what a tick counts and
observes, :mod:`alphagate_lab.sim.tick_account`.
"""

from __future__ import annotations

import math

import numpy as np

from alphagate_lab.sim.admission import admit
from alphagate_lab.sim.counters import EngineCounters
from alphagate_lab.sim.decode import DecodeParams, Load, Stalls, TickTruth, step_time
from alphagate_lab.sim.inflight import (
    ACC,
    REM,
    S_DONE,
    S_END,
    S_START,
    S_USED,
    SLOW,
    FloatArray,
    no_requests,
)
from alphagate_lab.sim.tick_account import TickRun, account

__all__ = ["Engine"]

#: Correlation time (s) of the pod's alpha wander.
ALPHA_NOISE_TAU = 30.0
#: Correlation time (s) of an engine's slowness (batch composition, context lengths).
SLOW_TAU = 20.0
#: Spread (log scale) of a stall's duration around its median.
STALL_SIGMA = 0.5
#: Most admission rounds inside one tick (a round admits into slots freed by the last one).
MAX_ROUNDS = 64


class Engine:
    """Requests in flight, queue and counters of one vLLM engine, advanced tick by tick."""

    def __init__(
        self,
        params: DecodeParams,
        rng: np.random.Generator,
        *,
        k: int,
        alpha_offset: float = 0.0,
        stalls: Stalls | None = None,
    ) -> None:
        self.params = params
        self.rng = rng
        self.k = k
        self.alpha_offset = alpha_offset
        self.stalls = stalls or Stalls()
        self.t = 0.0
        self.noise = 0.0
        self.slow = 0.0
        self.req: FloatArray = no_requests()
        self.queue: FloatArray = np.zeros(0)  # arrival times of waiting requests
        self.queue_x: FloatArray = np.zeros((2, 0))  # their lengths and prompts (Q_LEN ...)
        self.tail_share = 0.0  # share of new requests the tail-only regression slows
        self.tail_factor = 1.0
        self._prompt_tokens = 0.0  # prompt tokens admitted in the tick
        #: Time per output token of each request finished in the last tick (all of them, not
        #: the histogram's sample): the exact tail, for calibrating latency regressions.
        self.finished_tpot: FloatArray = np.zeros(0)
        self.mean_batch = 0.0
        self.last_admitted = 0.0
        self.stall_start = math.inf
        self.stall_end = math.inf
        self._positions = np.arange(k + 1, dtype=np.float64)
        self._step_cache: dict[tuple[int, float], tuple[float, int]] = {}
        self._schedule_stall(0.0)

    @property
    def running(self) -> int:
        return int(self.req.shape[1])

    @property
    def waiting(self) -> int:
        return int(self.queue.size)

    @property
    def in_flight_alpha(self) -> FloatArray:
        """Own acceptance of each running request."""
        out: FloatArray = self.req[ACC].copy()
        return out

    # --- stalls -----------------------------------------------------------------------------
    def _schedule_stall(self, after: float) -> None:
        s = self.stalls
        if s.rate_per_hour <= 0 or s.slowdown <= 1.0:
            self.stall_start = self.stall_end = math.inf
            return
        start = after + float(self.rng.exponential(3600.0 / s.rate_per_hour))
        length = s.duration * math.exp(STALL_SIGMA * float(self.rng.standard_normal()))
        self.stall_start, self.stall_end = start, start + length

    def _clock(self, dt: float, st: float) -> tuple[FloatArray, FloatArray, float, float]:
        """Breakpoints (local time, steps done) of the tick's step clock, time stalled and
        steps in all. Without a stall (most ticks) the clock is linear and its breakpoints
        are never read: empty, not two arrays built per tick."""
        a = min(max(self.stall_start - self.t, 0.0), dt)
        b = min(max(self.stall_end - self.t, 0.0), dt)
        if b <= a:
            return _LINEAR, _LINEAR, 0.0, dt / st
        f = self.stalls.slowdown
        s_a = a / st
        s_b = s_a + (b - a) / (f * st)
        s_total = s_b + (dt - b) / st
        return np.array([0.0, a, b, dt]), np.array([0.0, s_a, s_b, s_total]), b - a, s_total

    # --- one tick ---------------------------------------------------------------------------
    def tick(self, dt: float, load: Load, c: EngineCounters, *, scale: float = 1.0) -> TickTruth:
        """Advance ``dt`` seconds under ``load``, adding what vLLM would count into ``c``."""
        rng = self.rng
        p = self.params
        k = self.k
        sigma = p.jitter
        per_draft = load.draft_fill * k
        t0 = self.t

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
        alpha = min(max(load.alpha + self.alpha_offset + self.noise, 0.0), 1.0)
        prefill_one = load.prompt_tokens * p.prefill_per_token * scale

        # Candidates for admission (local times): the queue, then this tick's arrivals.
        req = self.req
        running = req.shape[1]
        closed = load.concurrency is not None
        queue = self.queue
        px = self.queue_x  # lengths and prompts of `pending`, column by column
        suppress = 0
        if closed:
            conc = int(load.concurrency or 0)
            clients = running + queue.size
            if clients < conc:
                queue = np.concatenate([queue, np.full(conc - clients, t0)])
                px = np.concatenate([px, _unknown(conc - clients)], axis=1)
            elif clients > conc:
                drop = min(queue.size, clients - conc)
                queue = queue[: queue.size - drop]
                px = px[:, : px.shape[1] - drop]
                suppress = clients - conc - drop  # finishing clients that do not come back
            pending = queue - t0
        else:
            if load.arrivals is not None:  # replayed requests the router dealt to this pod
                new = np.asarray(load.arrivals, dtype=np.float64)
                lengths = load.arrival_output if load.arrival_output is not None else new * np.nan
                prompts = load.arrival_prompt if load.arrival_prompt is not None else new * np.nan
                new_x = np.stack([lengths, prompts])
            else:
                n_arr = int(rng.poisson(load.arrival_rate * dt)) if load.arrival_rate > 0 else 0
                if n_arr:
                    new = rng.random(n_arr)
                    new.sort()  # in place: np.sort's wrapper copies
                    new *= dt
                    new_x = _unknown(n_arr)
                else:  # no draw either way; nothing writes into these (read-only)
                    new, new_x = _NO_ARRIVALS, _NO_ARRIVALS_X
            pending = np.concatenate([queue - t0, new]) if queue.size else new
            px = np.concatenate([px, new_x], axis=1) if queue.size else new_x

        # Step time of the tick: batch estimate, prefill share, slowness, stall.
        b_est = max(1, round(0.5 * (running + self.mean_batch)))
        key = (b_est, scale)
        cached = self._step_cache.get(key)
        if cached is None:
            if len(self._step_cache) > 4096:
                self._step_cache.clear()
            cached = self._step_cache[key] = step_time(b_est, k, p, scale)
        st, passes = cached
        st *= math.exp(self.slow)
        expected_new = self.last_admitted if closed else pending.size
        prefill_frac = min(expected_new * prefill_one / dt, 0.5)
        bp_t, bp_s, stalled, s_total = self._clock(dt, st / (1.0 - prefill_frac))
        plain = stalled == 0.0

        # Round 0: the running requests and those the free slots admit at once; each later
        # round admits the queue into the slots that the round before freed.
        cohort, start = req, np.zeros(running) if running else _NO_ARRIVALS
        cohorts: list[FloatArray] = []
        segs: list[FloatArray] = []
        adm: list[FloatArray] = []  # (queue wait, time to first token) per admitted request
        n = min(pending.size, max(p.max_num_seqs - running, 0))
        admitted = n
        if n:
            new, new_start, waits = self._admit(pending[:n], pending[:n], px[:, :n], t0, dt,
                                                alpha, load, prefill_one)  # fmt: skip
            adm.append(waits)
            pending, px = pending[n:], px[:, n:]
            if running:
                cohort = np.concatenate([req, new], axis=1)
                start = np.concatenate([start, new_start])
            else:
                cohort, start = new, new_start
        slots: FloatArray = _NO_ARRIVALS  # replaced, never written into
        rounds = 0
        while True:
            rounds += 1
            if cohort.shape[1]:
                s0 = start * (s_total / dt) if plain else np.interp(start, bp_t, bp_s)
                steps = cohort[REM] * cohort[SLOW] / (1.0 + per_draft * cohort[ACC])
                s1 = np.minimum(s0 + steps, s_total)
                seg = np.empty((4, start.size))
                seg[S_START] = start
                seg[S_USED] = s1 - s0
                seg[S_END] = s1 * (dt / s_total) if plain else np.interp(s1, bp_s, bp_t)
                seg[S_DONE] = s1 < s_total
                cohorts.append(cohort)
                segs.append(seg)
                if closed or pending.size:
                    freed = seg[S_END][seg[S_DONE] > 0]  # a fresh array: sorted in place
                    freed.sort()
                    if closed and freed.size:
                        back = freed[suppress:]
                        suppress = max(suppress - freed.size, 0)
                        pending = np.concatenate([pending, back])
                        px = np.concatenate([px, _unknown(back.size)], axis=1)
                        order = np.argsort(pending, kind="stable")
                        pending, px = pending[order], px[:, order]
                    slots = np.concatenate([slots, freed])
                    slots.sort()
            n = min(pending.size, slots.size)
            if n == 0 or rounds >= MAX_ROUNDS:
                break
            at = np.maximum(pending[:n], slots[:n])
            cohort, start, waits = self._admit(at, pending[:n], px[:, :n], t0, dt, alpha, load,
                                               prefill_one)  # fmt: skip
            adm.append(waits)
            slots, pending, px = slots[n:], pending[n:], px[:, n:]
            admitted += n
        self.queue = pending + t0 if pending.size else _NO_ARRIVALS
        self.queue_x = px
        self.last_admitted = float(admitted)
        self.t = t0 + dt
        if self.stall_end <= self.t:
            self._schedule_stall(self.stall_end)
        run = TickRun(cohorts, segs, admitted, adm, dt=dt, t0=t0, st=st, passes=passes,
                      s_total=s_total, bp_s=bp_s, stalled=stalled)  # fmt: skip
        done = account(
            rng, c, run, current=self.req, k=k, positions=self._positions, jitter=sigma,
            slowdown=self.stalls.slowdown, alpha=alpha, load=load, prefill_one=prefill_one,
            prompt_tokens=self._prompt_tokens, waiting=self.waiting,
        )  # fmt: skip
        self._prompt_tokens = 0.0
        self.req = done.survivors
        self.mean_batch = done.mean_batch
        self.finished_tpot = done.finished_tpot
        return done.truth

    def _admit(
        self,
        at: FloatArray,
        arrived: FloatArray,
        x: FloatArray,
        t0: float,
        dt: float,
        alpha: float,
        load: Load,
        prefill_one: float,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Admit requests (see `admission.admit`), counting their prompt tokens."""
        new = admit(
            self.rng, at, arrived, x, t0=t0, dt=dt, alpha=alpha, load=load,
            prefill_one=prefill_one, k=self.k, alpha_offset=self.alpha_offset,
            jitter=self.params.jitter, tail_share=self.tail_share, tail_factor=self.tail_factor,
        )  # fmt: skip
        self._prompt_tokens += new.prompt_tokens
        return new.requests, new.start, new.waits


#: The breakpoints of a linear step clock: never read (see Engine._clock).
_LINEAR: FloatArray = np.zeros(0)
#: No arrivals in a tick (their times and queue columns), no slots, no queue.
_NO_ARRIVALS: FloatArray = np.zeros(0)
_NO_ARRIVALS_X: FloatArray = np.zeros((2, 0))
for _empty in (_LINEAR, _NO_ARRIVALS, _NO_ARRIVALS_X):
    _empty.flags.writeable = False


def _unknown(n: int) -> FloatArray:
    """Queue columns (length, prompt) of ``n`` requests whose model draws both (np.full, less
    its wrapper)."""
    out = np.empty((2, n))
    out.fill(np.nan)
    return out

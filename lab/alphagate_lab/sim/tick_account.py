"""Accounting for one engine tick: the acceptances drawn for the steps each request ran, what
vLLM would count and observe (queue time, TTFT, ITL, per-request TPOT, decode and end-to-end
times, finish reasons), and the tick's truth. Apart from the tick itself, which works out who
ran and for how long; this turns that into numbers, and keeps the survivors.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from alphagate import vllm
from alphagate_lab.sim.acceptance import AcceptanceTable, IntArray, acceptance_table
from alphagate_lab.sim.counters import EngineCounters
from alphagate_lab.sim.decode import Load, TickTruth
from alphagate_lab.sim.inflight import (
    ACC,
    ARR,
    DRAWN,
    FIRST,
    LEN,
    REM,
    S_DONE,
    S_END,
    S_START,
    S_USED,
    SET,
    SLOW,
    STEPS,
    FloatArray,
    no_requests,
)

#: Most step durations sampled per tick for the ITL histogram (each stands for several).
MAX_STEP_SAMPLES = 256
#: Most finished/admitted requests observed per tick in the per-request histograms.
MAX_REQUEST_SAMPLES = 256

#: Most requests whose acceptances are drawn one multinomial call each (see _accept_counts).
FEW_REQUESTS = 16

_sum = np.add.reduce  # ndarray.sum without its Python wrapper: the same reduction


class TickRun(NamedTuple):
    """What the tick worked out: each admission round's requests (``cohorts``) and their
    segments (``segs``: start, steps used, end, finished), how many were admitted and their
    (queue wait, TTFT) (``adm``), and the step clock: its length ``dt`` from engine time
    ``t0``, the step time ``st`` in ``passes`` passes, ``s_total`` steps in all, its
    breakpoints in steps ``bp_s`` and the time it ``stalled``. A tuple: built every tick."""

    cohorts: list[FloatArray]
    segs: list[FloatArray]
    admitted: int
    adm: list[FloatArray]
    dt: float
    t0: float
    st: float
    passes: int
    s_total: float
    bp_s: FloatArray
    stalled: float


class Accounted(NamedTuple):
    """The tick's truth, the requests still in flight, the mean batch, and the time per output
    token of every request that finished (the exact tail, not the histogram's sample)."""

    truth: TickTruth
    survivors: FloatArray
    mean_batch: float
    finished_tpot: FloatArray


def account(
    rng: np.random.Generator,
    c: EngineCounters,
    run: TickRun,
    *,
    current: FloatArray,
    k: int,
    positions: FloatArray,
    jitter: float,
    slowdown: float,
    alpha: float,
    load: Load,
    prefill_one: float,
    prompt_tokens: float,
    waiting: int,
) -> Accounted:
    """Draw the tick's acceptances, count and observe everything, keep the survivors."""
    sigma = jitter
    hist = c.histograms
    cohorts, segs, adm, admitted = run.cohorts, run.segs, run.adm, run.admitted
    dt, t0, st, s_total, bp_s, stalled = run.dt, run.t0, run.st, run.s_total, run.bp_s, run.stalled
    finished_tpot: FloatArray = np.zeros(0)

    # First tokens of admitted requests: queueing, then prefill.
    if admitted:
        wait_ttft = adm[0] if len(adm) == 1 else np.concatenate(adm, axis=1)
        w, picked = _sample(rng, wait_ttft)
        hist.observe(vllm.QUEUE_TIME, picked[0], w)
        hist.observe(vllm.TTFT, picked[1], w)
    c.prompt_tokens += round(prompt_tokens)

    # ITL: one observation per step per running request, the step's duration. Steps that
    # carry a new request's prefill chunk are longer by it; steps in a stall are slower.
    m = min(max(int(s_total), 1), MAX_STEP_SAMPLES)
    durations = rng.standard_normal(m)  # exp(z * sigma - sigma^2 / 2) * st, in place
    durations *= sigma
    durations -= sigma * sigma / 2
    np.exp(durations, out=durations)
    durations *= st
    if stalled > 0:
        m_stall = round(m * float(bp_s[2] - bp_s[1]) / s_total)
        durations[:m_stall] *= slowdown
    if admitted and prefill_one:
        m_pref = round(m * min(1.0, admitted / max(s_total, 1e-9)))
        durations[m - m_pref :] += prefill_one
    mean_step = float(_sum(durations)) / m
    tps_set = 1.0 + k * load.draft_fill * alpha

    if not cohorts:
        c.generation_tokens += admitted
        c.running, c.waiting = 0, waiting
        truth = TickTruth(alpha, 0.0, 0, 0, 0.0, tps_set, 0.0, batch_alpha=alpha,
                          drafted_alpha=alpha, realised_alpha=alpha, generated=admitted,
                          stalled=stalled / dt)  # fmt: skip
        return Accounted(truth, no_requests(), 0.0, finished_tpot)

    req = cohorts[0] if len(cohorts) == 1 else np.concatenate(cohorts, axis=1)
    seg = segs[0] if len(segs) == 1 else np.concatenate(segs, axis=1)
    used = seg[S_USED]
    done = seg[S_DONE] > 0
    n = used.size
    d = used / req[SLOW]
    d += rng.random(n)
    np.floor(d, out=d)
    total_steps = float(sum(d.tolist()))  # whole numbers: exact in any order, as _sum's
    acc = req[ACC]
    accepted = 0.0
    tokens = d
    if k and total_steps > 0:
        di = d.astype(np.int64)
        drafts = di if load.draft_fill >= 1.0 else rng.binomial(di, load.draft_fill)
        counts = _accept_counts(rng, drafts, acc, acceptance_table(k, load.decay))
        accepted_r = counts @ positions
        accepted = float(sum(accepted_r.tolist()))  # whole numbers, as above
        n_drafts = sum(drafts.tolist())
        c.drafts += n_drafts
        c.draft_tokens += n_drafts * k
        c.accepted += int(accepted)
        c.accept_counts += counts[0] if n == 1 else _sum(counts, axis=0)
        tokens = accepted_r
        tokens += d
    rem = req[REM]
    gen = np.minimum(tokens, rem)  # np.where(done, rem, ...), without its wrapper
    np.copyto(gen, rem, where=done)
    req = req.copy() if req is current else req
    req[REM] = rem - gen
    req[STEPS] += d
    ended = req[REM] <= 0
    ended &= ~done  # finished in this tick's accounting, not by its segment
    end = seg[S_END].copy()  # np.where(ended, dt, ...), without its wrapper
    np.copyto(end, dt, where=ended)
    fin = ended
    fin |= done
    generated = admitted + int(_sum(gen))
    c.generation_tokens += generated
    if total_steps > 0:
        hist.observe(vllm.ITL, durations, total_steps / m)

    # Finished requests: per-token time, decode time, end-to-end, finish reason.
    n_fin = int(np.count_nonzero(fin))
    if n_fin:
        every = n_fin == n  # often all of them (short requests): no boolean indexing
        f = req if every else req[:, fin]
        t_end = t0 + (end if every else end[fin])
        length = f[LEN]
        obs = np.empty((3, n_fin))  # per-token time, decode time, end-to-end
        decode = np.subtract(t_end, f[FIRST], out=obs[1])
        np.maximum(decode, 0.0, out=decode)
        s = np.maximum(f[STEPS], 1.0)  # sqrt(sigma^2 / max(steps, 1) + 0.0004), in place
        np.divide(sigma * sigma, s, out=s)
        s += 0.0004
        np.sqrt(s, out=s)
        jit = rng.standard_normal(n_fin)  # exp(z * s - s^2 / 2), in place
        jit *= s
        s *= s
        s /= 2
        jit -= s
        np.exp(jit, out=jit)
        np.maximum(length - 1.0, 1.0, out=obs[0])
        np.divide(decode, obs[0], out=obs[0])
        obs[0] *= jit
        np.subtract(t_end, f[ARR], out=obs[2])
        long = length > 1
        if np.count_nonzero(long) == n_fin:  # the usual case: no boolean indexing
            finished_tpot = obs[0].copy()
            w, picked = _sample(rng, obs)
        else:
            finished_tpot = obs[0][long]
            w, picked = _sample(rng, obs[:, long])
        hist.observe(vllm.TPOT, picked[0], w)
        hist.observe(vllm.DECODE_TIME, picked[1], w)
        hist.observe(vllm.E2E, picked[2], w)
        hist.observe(vllm.REQUEST_GENERATION_TOKENS, length)  # every one: no draw
        n_length = int(np.count_nonzero(length >= load.max_output_tokens))
        c.success["length"] += n_length
        c.success["stop"] += n_fin - n_length

    # Truth of the tick, then keep the survivors.
    busy = end - seg[S_START]
    np.maximum(busy, 0.0, out=busy)
    busy_sum = float(_sum(busy))
    batch = busy_sum / dt
    if total_steps > 0:
        batch_alpha = float(acc @ d) / total_steps if k else alpha
        drafted_alpha = float(req[SET] @ d) / total_steps
        realised_alpha = float(req[DRAWN] @ d) / total_steps
        tps = (total_steps + accepted) / total_steps
        time_per_token = busy_sum / (total_steps + accepted)
        ok = used > 0
        kf = k * load.draft_fill
        if np.count_nonzero(ok) == n:  # the usual case: no boolean indexing
            per_token = busy * req[SLOW]
            per_token /= used
            per_token /= 1.0 + kf * acc
        else:
            per_token = busy[ok] * req[SLOW][ok] / used[ok] / (1.0 + kf * acc[ok])
        i = max(math.ceil(0.99 * per_token.size) - 1, 0)
        per_token.sort()
        p99 = float(per_token[i])
    else:
        batch_alpha, tps, time_per_token, p99 = alpha, tps_set, mean_step / tps_set, 0.0
        drafted_alpha = realised_alpha = alpha
    # Always a fresh array in the layout the boolean index gives: the dot products above
    # sum in an order that depends on the rows' strides.
    survivors = no_requests() if n_fin == n else req[:, ~fin]
    c.running, c.waiting = int(survivors.shape[1]), waiting
    truth = TickTruth(
        alpha=alpha,
        batch=batch,
        steps=int(s_total),
        passes=run.passes,
        mean_step=mean_step,
        tokens_per_step=tps,
        time_per_token=time_per_token,
        batch_alpha=batch_alpha,
        drafted_alpha=drafted_alpha,
        realised_alpha=realised_alpha,
        tpot_p99=p99,
        generated=generated,
        finished=n_fin,
        stalled=stalled / dt,
    )
    return Accounted(truth, survivors, batch, finished_tpot)


def _accept_counts(
    rng: np.random.Generator, drafts: IntArray, acc: FloatArray, table: AcceptanceTable
) -> IntArray:
    """Accepted-token counts per request: one multinomial over its own table row.

    For a few requests, one scalar-row call each: numpy draws a multinomial with a row per
    request request by request from the same generator, so the draws are the same, and the
    array form's checks and gather cost far more than the draws on a handful of rows."""
    n = drafts.size
    if n > FEW_REQUESTS:
        out: IntArray = rng.multinomial(drafts, table.rows[table.row_index(acc)])
        return out
    rows, grid = table.rows, table.GRID
    counts: IntArray = np.empty((n, table.k + 1), dtype=np.int64)
    for i, (a, m) in enumerate(zip(acc.tolist(), drafts.tolist(), strict=True)):
        # round() is half to even, as np.rint in AcceptanceTable.row_index.
        counts[i] = rng.multinomial(m, rows[round(min(max(a, 0.0), 1.0) * grid)])
    return counts


def _sample(rng: np.random.Generator, rows: FloatArray) -> tuple[float, FloatArray]:
    """At most MAX_REQUEST_SAMPLES columns of ``rows``, and the weight each stands for."""
    n = rows.shape[1]
    if n <= MAX_REQUEST_SAMPLES:
        return 1.0, rows
    pick = rng.choice(n, MAX_REQUEST_SAMPLES, replace=False)
    return n / MAX_REQUEST_SAMPLES, rows[:, pick]

"""How a slice's traffic reaches its pods: the `Load` its spec gives each pod, and a replayed
trace dealt request by request to the ready pods by the slice's router.

Apart from the fleet because it is the one place a slice's spec becomes a pod's workload;
the fleet decides which pods are ready and when a tick starts.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from alphagate_lab.sim.decode import Load
from alphagate_lab.sim.pod import SimPod
from alphagate_lab.sim.router import Router
from alphagate_lab.sim.scenario import SliceSpec
from alphagate_lab.sim.traces import Replay, load_trace, seed_offset


def slice_load(sl: SliceSpec) -> Load:
    """The load every pod of the slice serves, before its arrivals are set."""
    bad = sl.bad_requests
    return Load(
        alpha=sl.alpha,
        concurrency=sl.concurrency,
        alpha_noise=sl.alpha_noise,
        decay=sl.decay,
        draft_fill=sl.draft_fill,
        request_spread=sl.request_spread,
        prompt_tokens=sl.prompt_tokens,
        output_tokens=sl.output_tokens,
        output_sigma=sl.output_sigma,
        max_output_tokens=sl.max_output_tokens,
        bad_share=bad.share if bad is not None else 0.0,
        bad_alpha=bad.alpha if bad is not None else 0.2,
        bad_spread=bad.spread if bad is not None else 5.0,
    )


class TraceDealer:
    """Slices replaying a trace: their replay and router, built at first use (seeded from the
    fleet's seed and the slice's name), and the requests that found no ready pod."""

    def __init__(self, seed: int, slices: Iterable[str]) -> None:
        self.seed = seed
        self._replays: dict[str, Replay] = {}
        self._routers: dict[str, Router] = {}
        #: Replayed requests that found no ready pod of their slice (lost, as a router 503s).
        self.dropped: dict[str, int] = dict.fromkeys(slices, 0)

    def replay(self, name: str, sl: SliceSpec) -> Replay:
        replay = self._replays.get(name)
        if replay is None:
            assert sl.trace is not None
            trace = load_trace(sl.trace.name)
            crc = zlib.crc32(name.encode())
            offset = sl.trace.offset
            if offset is None:
                offset = seed_offset(trace, self.seed * 7919 + crc % 7919)
            replay = Replay(trace, offset=offset, scale=sl.trace.scale, seed=self.seed ^ crc)
            self._replays[name] = replay
            self._routers[name] = Router(sl.trace.router)
        return replay

    def deal(
        self,
        name: str,
        sl: SliceSpec,
        pods: list[SimPod],
        base: Load,
        *,
        now: float,
        tick: float,
    ) -> dict[str, Load]:
        """The trace's requests of the coming tick, dealt to the ready pods by the router."""
        replay = self.replay(name, sl)
        times, prompts, outputs = replay.between(now, now + tick)
        if not pods:
            self.dropped[name] += int(times.size)
            return {}
        pods = sorted(pods, key=lambda p: p.name)
        which = self._routers[name].deal(
            times.size,
            [p.name for p in pods],
            [p.spec.traffic_weight for p in pods],
            [p.engine.running + p.engine.waiting for p in pods],
        )
        mean_prompt = float(replay.prompt.mean()) if replay.prompt.size else sl.prompt_tokens
        out: dict[str, Load] = {}
        for i, pod in enumerate(pods):
            mine = which == i
            p = prompts[mine]
            out[pod.name] = replace(
                base,
                arrivals=times[mine] - now,
                arrival_output=np.minimum(outputs[mine], sl.max_output_tokens),
                arrival_prompt=p,
                prompt_tokens=max(1, round(float(p.mean()) if p.size else mean_prompt)),
            )
        return out

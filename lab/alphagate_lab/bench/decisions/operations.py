"""Operations cases: what a cluster does to a canary while alphagate judges it.

The suite's truths are acceptance and latency; a real cluster adds its own events, which no
truth there has: the baseline scales out and back (an HPA), the canary pod restarts (counters
reset, the model reloads) once, in its first bad window, or every few minutes (a crash loop),
a baseline pod restarts, traffic stops for 20-25 minutes and comes back (a maintenance or a
night), canary pods accept differently from one another, long prompts with short answers
(retrieval), a canary scaled in while it is bad. Each case runs the shipped policy
unmodified; the figures that matter are the suite's own (false rollbacks, delay, exceptions):
no such event may flip a healthy canary, and none may keep a bad one on.

Run only when named (``--cases operations``): they are not in the suite's figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

BASELINE: Final = "chat-baseline"
CANARY: Final = "chat-canary"


@dataclass(frozen=True)
class OpsEvent:
    """One cluster event at a fraction of the run: pools restarted, pools scaled to a replica
    count, or the Poisson arrivals set to a share of the case's rate (0: traffic stops)."""

    at: float
    restart: tuple[str, ...] = ()
    replicas: tuple[tuple[str, int], ...] = ()
    rate_share: float | None = None

    def timeline(self, duration: float, rate: float) -> dict[str, Any]:
        """The simulator's timeline event for a run of ``duration`` seconds whose Poisson
        arrivals come at ``rate`` per second."""
        event: dict[str, Any] = {"at": round(self.at * duration, 3), "note": "operations"}
        if self.restart:
            event["restart"] = list(self.restart)
        if self.replicas:
            event["pools"] = {pool: {"replicas": n} for pool, n in self.replicas}
        if self.rate_share is not None:
            event["slices"] = {"chat": {"arrival_rate": round(rate * self.rate_share, 4)}}
        return event


def _restarts(pool: str, minutes: range) -> tuple[OpsEvent, ...]:
    return tuple(OpsEvent(m / 60, restart=(pool,)) for m in minutes)


def specs() -> list[dict[str, Any]]:
    """The cases, as keyword arguments of ``suite.Case`` (which builds them: no import cycle)."""
    silence = (OpsEvent(20 / 60, rate_share=0.0), OpsEvent(40 / 60, rate_share=1.0))
    return [
        _spec(
            "ops-hpa-conv-a0.7",
            "alpha 0.70; the baseline scales 3 -> 9 pods at 20 min and back at 40 (an HPA)",
            "1c3b",
            "conv",
            ((0.0, 0.70),),
            events=(
                OpsEvent(1 / 3, replicas=((BASELINE, 9),)),
                OpsEvent(2 / 3, replicas=((BASELINE, 3),)),
            ),
        ),
        _spec(
            "ops-restart-conv-a0.7",
            "alpha 0.70; the canary pod restarts at 25 and 45 min (counters reset, reload)",
            "1c3b",
            "conv",
            ((0.0, 0.70),),
            events=_restarts(CANARY, range(25, 46, 20)),
        ),
        _spec(
            "ops-crashloop-conv-a0.7",
            "alpha 0.70; the canary pod restarts every 6 min from 10 min (a crash loop)",
            "1c3b",
            "conv",
            ((0.0, 0.70),),
            events=_restarts(CANARY, range(10, 60, 6)),
        ),
        _spec(
            "ops-baseline-restart-code-a0.7",
            "alpha 0.70; a baseline pod restarts at 20 and 40 min (its latency counters reset);"
            " code trace",
            "1c3b",
            "code",
            ((0.0, 0.70),),
            events=_restarts(BASELINE, range(20, 41, 20)),
        ),
        _spec(
            "ops-restart-in-bad-window",
            "alpha 0.70 -> 0.45 at 20 min; the canary pod restarts 1 min later, inside its"
            " first bad window; Poisson",
            "1c3b",
            "poisson",
            ((0.0, 0.70), (1 / 3, 0.45)),
            events=(OpsEvent(21 / 60, restart=(CANARY,)),),
        ),
        _spec(
            "ops-crashloop-code-a0.45",
            "alpha 0.45 all along; the canary pod restarts every 8 min from 4 min; code trace",
            "1c3b",
            "code",
            ((0.0, 0.45),),
            events=_restarts(CANARY, range(4, 60, 8)),
        ),
        _spec(
            "ops-silence-poisson-a0.7",
            "alpha 0.70; no traffic from 20 to 40 min (a maintenance, a night); Poisson",
            "1c3b",
            "poisson",
            ((0.0, 0.70),),
            events=silence,
        ),
        _spec(
            "ops-silence-then-bad",
            "alpha 0.70, falls to 0.45 at 30 min while no traffic flows (20-40 min); Poisson",
            "1c3b",
            "poisson",
            ((0.0, 0.70), (0.5, 0.45)),
            events=silence,
        ),
        _spec(
            "ops-uneven-pods-conv-a0.66",
            "alpha 0.66 on average; four canary pods accept differently (sd 0.06 between"
            " pods); four baseline pods",
            "4c4b",
            "conv",
            ((0.0, 0.66),),
            canary_spread=0.06,
        ),
        _spec(
            "ops-uneven-pods-conv-a0.45",
            "alpha 0.45 on average; four canary pods accept differently (sd 0.06 between"
            " pods); four baseline pods",
            "4c4b",
            "conv",
            ((0.0, 0.45),),
            canary_spread=0.06,
        ),
        _spec(
            "ops-scale-in-bad",
            "alpha 0.70 -> 0.45 at 20 min; the four canary pods scale in to one at 25 min; Poisson",
            "4c4b",
            "poisson",
            ((0.0, 0.70), (1 / 3, 0.45)),
            events=(OpsEvent(25 / 60, replicas=((CANARY, 1),)),),
        ),
        _spec(
            "ops-retrieval-poisson-a0.7",
            "alpha 0.70; prompts of 4,000 tokens, answers of median 64 (retrieval); Poisson",
            "1c3b",
            "poisson",
            ((0.0, 0.70),),
            lengths=(4000, 64),
        ),
    ]


def _spec(
    name: str,
    title: str,
    topology: str,
    traffic: str,
    alphas: tuple[tuple[float, float], ...],
    **kw: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "title": title,
        "topology": topology,
        "traffic": traffic,
        "alphas": alphas,
        **kw,
    }

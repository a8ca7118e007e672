"""Simulated fleets and canaries shared by the Prometheus batching tests: a canary and a
baseline pool per slice, short equal outputs and alike requests, so each slice's alpha is what
it was set to and the tests can tell the slices apart by it.

BATCH_FLEET is the one fleet the session's shared Prometheus scrapes (the `fleet_prometheus`
fixture, tests/conftest.py): three slices, read by tests/sources/test_sources_prombatch_it.py
and tests/kube/test_kube_prometheus_batch.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alphagate.config import SpeculativeCanarySpec
from alphagate_lab.sim.scenario import Scenario


def per_slice_fleet(
    name: str,
    seed: int,
    slices: Sequence[str],
    alphas: Sequence[float],
    *,
    rate: float = 30,
    canary_pods: int = 2,
) -> Scenario:
    """`canary_pods` canary pods (n-gram, K = 4) and one baseline pod per slice, `rate`
    requests/s in all."""
    return Scenario.model_validate(
        {
            "name": name,
            "seed": seed,
            "tick": 0.5,
            "traffic": {"rate": rate},
            "slices": {
                s: {"alpha": a, "output_tokens": 64, "output_sigma": 0, "request_spread": 1e4}
                for s, a in zip(slices, alphas, strict=True)
            },
            "pools": [
                pool
                for s in slices
                for pool in (
                    {
                        "name": f"{s}-canary",
                        "role": "canary",
                        "slice": s,
                        "replicas": canary_pods,
                        "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
                    },
                    {"name": f"{s}-baseline", "role": "baseline", "slice": s, "replicas": 1},
                )
            ],
        }
    )


def slice_spec(slice_name: str, *, interval: float, window: float) -> SpeculativeCanarySpec:
    """A canary of one slice read through Prometheus, its pools selected by role and slice
    (the labels the simulated pods carry)."""

    def pool(role: str) -> dict[str, Any]:
        return {"matchLabels": {"role": role, "slice": slice_name}}

    return SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": f"{slice_name}-canary"},
            "baseline": {"name": f"{slice_name}-baseline"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {"name": slice_name, "canary": pool("canary"), "baseline": pool("baseline")}
            ],
            "source": {"kind": "prometheus", "prometheus": {"timeoutSeconds": 5}},
            # a real Prometheus over a simulated fleet for tens of seconds: seconds, not minutes
            "timing": {"intervalSeconds": interval, "windowSeconds": window},
        }
    )


BATCH_SLICES: tuple[str, ...] = ("chat", "code", "docs")
BATCH_ALPHAS: tuple[float, ...] = (0.7, 0.5, 0.6)
BATCH_INTERVAL = 3.0  # the canaries' interval; their window is four of them
BATCH_FLEET = per_slice_fleet("batch", 5, BATCH_SLICES, BATCH_ALPHAS)

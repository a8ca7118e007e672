"""Simulated fleets shared by the Prometheus batching tests: one canary and one baseline pool
per slice, short equal outputs and alike requests, so each slice's alpha is what it was set to
and the tests can tell the slices apart by it."""

from __future__ import annotations

from collections.abc import Sequence

from alphagate.sim.scenario import Scenario


def per_slice_fleet(
    name: str, seed: int, slices: Sequence[str], alphas: Sequence[float]
) -> Scenario:
    """Two canary pods (n-gram, K = 4) and one baseline pod per slice, 30 requests/s in all."""
    return Scenario.model_validate(
        {
            "name": name,
            "seed": seed,
            "tick": 0.5,
            "traffic": {"rate": 30},
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
                        "replicas": 2,
                        "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
                    },
                    {"name": f"{s}-baseline", "role": "baseline", "slice": s, "replicas": 1},
                )
            ],
        }
    )

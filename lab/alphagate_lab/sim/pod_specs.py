"""The `PodSpec` of a simulated pod, from the scenario: a pool's pod (its per-pod alpha offset
drawn from the seed and the pod's name, so a pod's offset does not depend on creation order),
or a pod a kubelet creates from a Deployment's container args.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np

from alphagate.errors import ScenarioError
from alphagate_lab.sim.pod import PodSpec, Role, parse_speculative_args, spec_args
from alphagate_lab.sim.scenario import PoolSpec, Scenario


def pool_pod_spec(scenario: Scenario, pool: PoolSpec, name: str, *, seed: int) -> PodSpec:
    """The spec of the pod ``name`` of ``pool``."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode()), 0xA1FA])
    offset = pool.alpha_offset
    if pool.alpha_offset_spread > 0:
        offset += float(rng.normal(0.0, pool.alpha_offset_spread))
    decode = pool.decode or scenario.decode
    return PodSpec(
        name=name,
        deployment=pool.name,
        role=pool.role,
        slice=pool.slice,
        namespace=pool.namespace,
        args=tuple(pool.extra_args) + tuple(spec_args(pool.speculative_config)),
        model_name=scenario.model_name,
        load_time=pool.load_time,
        latency_scale=pool.latency_scale,
        traffic_weight=pool.traffic_weight,
        alpha_offset=offset,
        params=decode.params(),
        stalls=(pool.stalls or scenario.stalls).params(),
    )


def deployment_pod_spec(
    scenario: Scenario,
    pool: PoolSpec | None,
    name: str,
    *,
    seed: int,
    deployment: str,
    args: list[str],
    role: Role | None,
    slice: str | None,
    namespace: str | None,
    load_time: float | None,
) -> PodSpec:
    """The spec of a pod a kubelet creates from ``deployment``'s container ``args``: the
    scenario's ``pool`` of that name gives the defaults; without one, ``role`` and ``slice``
    are required. Raises ScenarioError on bad args."""
    if pool is not None:
        base = pool_pod_spec(scenario, pool, name, seed=seed)
    else:
        if role is None or slice is None:
            raise ScenarioError(
                f"pod {name!r}: deployment {deployment!r} is not a scenario pool; "
                "give its role and slice"
            )
        base = PodSpec(
            name=name,
            deployment=deployment,
            role=role,
            slice=slice,
            model_name=scenario.model_name,
            params=scenario.decode.params(),
            stalls=scenario.stalls.params(),
        )
    parse_speculative_args(list(args))  # refuse bad args before anything is created
    return replace(
        base,
        args=tuple(args),
        role=role or base.role,
        slice=slice or base.slice,
        namespace=namespace or base.namespace,
        load_time=base.load_time if load_time is None else load_time,
    )

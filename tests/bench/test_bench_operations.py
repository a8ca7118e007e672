"""The operations cases: cluster events reach the simulated fleet, and the shipped policy
neither flips on them nor lets them hide a bad canary."""

from __future__ import annotations

from alphagate_lab.bench.decisions import loop, suite
from alphagate_lab.bench.decisions.operations import BASELINE, CANARY


def _events(name: str) -> list[tuple[float, dict[str, object]]]:
    sc = suite.BY_NAME[name].scenario(1.0)
    return [(e.at, e.model_dump(exclude_defaults=True, exclude={"at"})) for e in sc.timeline]


def test_every_operations_case_is_named_in_its_group_and_not_in_the_suite() -> None:
    ops = suite.group_names()["operations"]
    assert len(ops) == len(suite.OPERATIONS) >= 10
    assert not set(ops) & {c.name for c in suite.SUITE}


def test_cluster_events_reach_the_simulators_timeline() -> None:
    assert _events("ops-hpa-conv-a0.7") == [
        (1200.0, {"note": "operations", "pools": {BASELINE: {"replicas": 9}}}),
        (2400.0, {"note": "operations", "pools": {BASELINE: {"replicas": 3}}}),
    ]
    crash = _events("ops-crashloop-conv-a0.7")
    assert [at for at, _ in crash] == [m * 60.0 for m in range(10, 60, 6)]
    assert all(e["restart"] == [CANARY] for _, e in crash)
    sc = suite.BY_NAME["ops-silence-then-bad"].scenario(1.0)
    patches = [(e.at, e.slices["chat"]) for e in sc.timeline if "chat" in e.slices]
    rates = [(at, p.arrival_rate) for at, p in patches if p.arrival_rate is not None]
    alphas = [(at, p.alpha) for at, p in patches if p.alpha is not None]
    rate = sc.slices["chat"].arrival_rate
    assert rate is not None and rate > 1  # the case's own rate comes back, not a share of it
    assert rates == [(1200.0, 0.0), (2400.0, rate)]
    assert alphas == [(1800.0, 0.45)]


def test_uneven_pods_and_retrieval_lengths_reach_the_pools_and_the_slice() -> None:
    uneven = suite.BY_NAME["ops-uneven-pods-conv-a0.45"].scenario(1.0)
    spreads = {p.role: p.alpha_offset_spread for p in uneven.pools}
    assert spreads == {"canary": 0.06, "baseline": 0.0}
    rag = suite.BY_NAME["ops-retrieval-poisson-a0.7"].scenario(1.0).slices["chat"]
    assert (rag.prompt_tokens, rag.output_tokens) == (4000, 64)


def test_a_silence_flips_nothing_and_the_bad_canary_it_hid_is_rolled_back_after() -> None:
    """No traffic from 20 to 40 min, alpha falls to 0.45 at 30 min: nothing to judge in the
    silence (missing data never flips), then two bad windows of returned traffic roll back."""
    r = loop.run("ops-silence-then-bad", 2, "alphagate", 1.0)
    quiet = [d for t, d in zip(r.t, r.drafts, strict=True) if 1500 <= t < 2400]
    assert quiet and sum(quiet) == 0  # the fleet really was silent
    disables = [t for t, kind in r.flips if kind == "disable"]
    assert disables and all(t > 2400 for t in disables)
    assert disables[0] <= 2400 + 3 * 330  # within three windows of the traffic's return


def test_a_crash_looping_healthy_canary_is_never_rolled_back() -> None:
    r = loop.run("ops-crashloop-conv-a0.7", 3, "alphagate", 1.0)
    assert r.flips == [] and r.exceptions == []
    assert min(r.ready) == 0  # the restarts happened: the pod was down between them

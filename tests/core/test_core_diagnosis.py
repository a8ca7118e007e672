"""The P99 trap diagnosis and the when-not-to-speculate conditions."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from alphagate.core.diagnosis import (
    Cause,
    Context,
    Mitigation,
    Shape,
    Support,
    compare,
    diagnose,
    diagnose_changes,
    shape_of,
)
from alphagate.core.draft_length import CostSource, DraftCost, recommend
from alphagate.core.model import AcceptanceSample, Buckets, Estimate
from alphagate.core.suitability import Condition, Finding, output_length
from alphagate_lab.planning.workload import Workload, assess

REAL = Path(__file__).resolve().parents[1] / "sources" / "data" / "vllm-real-metrics.txt"
INF = math.inf


def _alpha(value: float, half: float = 0.02) -> Estimate:
    return Estimate(value, value - half, value + half, 0.95, 5000, 25000, value * 25000, 20, "t")


def _falling_draft(k: int = 5) -> list[AcceptanceSample]:
    """Full-length drafts whose acceptance collapses after position 1."""
    rng = random.Random(7)
    cond = (0.85, 0.7, 0.1, 0.1, 0.1)[:k]
    out = []
    for b in range(10):
        per = [0] * k
        for _ in range(300):
            for i in range(k):
                if rng.random() >= cond[i]:
                    break
                per[i] += 1
        out.append(
            AcceptanceSample(300, 300 * k, sum(per), tuple(map(float, per)), pod=f"p{b % 2}")
        )
    return out


def test_shapes() -> None:
    assert shape_of(-0.25, 0.15) is Shape.MEAN_BETTER_TAIL_WORSE
    assert shape_of(0.10, -0.2) is Shape.MEAN_WORSE_TAIL_BETTER
    assert shape_of(-0.2, -0.1) is Shape.BOTH_BETTER
    assert shape_of(0.2, 0.01) is Shape.BOTH_WORSE
    assert shape_of(0.01, -0.02) is Shape.UNCHANGED
    assert shape_of(math.nan, 0.1) is Shape.UNKNOWN


def test_exercise_4_full_batch_long_draft_ranks_shorter_draft_and_cap_first() -> None:
    """Mean -25%, P99 +15% after EAGLE-3 at K=5 on a full batch with a collapsing tail."""
    draft = recommend(_falling_draft(), k=5, cost=DraftCost(0.1, CostSource.POLICY))
    ctx = Context(method="eagle3", k=5, alpha=_alpha(0.45), draft=draft, running_per_pod=240.0)
    d = diagnose_changes(-0.25, 0.15, ctx)
    assert d.shape is Shape.MEAN_BETTER_TAIL_WORSE and d.mixed
    assert d.causes[0] is Cause.REJECTION_PASSES
    assert {Cause.BATCH_SATURATED, Cause.DRAFT_TOO_LONG} <= set(d.causes)
    top = [m.mitigation for m in d.mitigations[:2]]
    assert top == [Mitigation.SHORTER_DRAFT, Mitigation.CAP_CONCURRENCY]
    assert all(m.support is Support.STRONG for m in d.mitigations[:2])
    # nothing measured about prompts: n-gram has no support
    ngram = next(m for m in d.mitigations if m.mitigation is Mitigation.NGRAM_FOR_PREFIX_HEAVY)
    assert ngram.support is Support.NONE
    assert d.evidence()["latency_shape"] == "meanBetterTailWorse"


def test_light_batch_prefix_heavy_low_slice_ranks_other_mitigations() -> None:
    ctx = Context(
        method="eagle3",
        k=3,
        alpha=_alpha(0.62),
        running_per_pod=4.0,
        prompt_per_output=12.0,
        slice_alphas={"chat": 0.72, "code": 0.38},
    )
    d = diagnose_changes(-0.2, 0.12, ctx)
    by = {m.mitigation: m.support for m in d.mitigations}
    assert by[Mitigation.CAP_CONCURRENCY] is Support.NONE
    assert by[Mitigation.NGRAM_FOR_PREFIX_HEAVY] is Support.STRONG
    assert by[Mitigation.DOMAIN_HEAD] is Support.STRONG
    assert by[Mitigation.SHORTER_DRAFT] is Support.NONE
    assert Cause.LOW_ACCEPTANCE in d.causes and Cause.BATCH_SATURATED not in d.causes
    # ranked: strong before none
    supports = [m.support for m in d.mitigations]
    assert supports == sorted(supports, reverse=True)


def test_reverse_shape_blames_draft_overhead() -> None:
    ctx = Context(method="draft_model", k=4, alpha=_alpha(0.3))
    d = diagnose_changes(0.08, -0.1, ctx)
    assert d.shape is Shape.MEAN_WORSE_TAIL_BETTER
    assert d.causes[0] is Cause.DRAFT_OVERHEAD and Cause.LOW_ACCEPTANCE in d.causes


def test_not_mixed_gives_no_mitigations() -> None:
    d = diagnose_changes(-0.3, -0.1, Context(method="eagle3", k=3))
    assert d.shape is Shape.BOTH_BETTER and d.mitigations == () and not d.mixed


def test_compare_from_histograms() -> None:
    bounds = (0.01, 0.025, 0.05, 0.075, 0.1, INF)
    base = Buckets(bounds, (0.0, 100.0, 980.0, 1000.0, 1000.0, 1000.0), 32.0)
    canary = Buckets(bounds, (300.0, 700.0, 940.0, 980.0, 1000.0, 1000.0), 24.0)
    c = compare(canary, base, 0.99)
    assert c.mean_change == pytest.approx(-0.25)
    assert c.tail_change > 0.05
    d = diagnose(c, Context(method="eagle3", k=3))
    assert d.shape is Shape.MEAN_BETTER_TAIL_WORSE
    assert compare(None, base, 0.99).mean_change != compare(None, base, 0.99).mean_change


def _capture_lengths() -> Buckets:
    """vllm:request_generation_tokens of the real capture, read by prometheus_client."""
    fams = {f.name: f for f in text_string_to_metric_families(REAL.read_text())}
    fam = fams["vllm:request_generation_tokens"]
    buckets: dict[float, float] = {}
    total = math.nan
    for smp in fam.samples:
        if smp.labels.get("model_name") != "tiny-chat":
            continue
        if smp.name.endswith("_bucket"):
            buckets[float(smp.labels["le"])] = smp.value
        elif smp.name.endswith("_sum"):
            total = smp.value
    bounds = tuple(sorted(buckets))
    return Buckets(bounds, tuple(buckets[b] for b in bounds), total)


def test_real_capture_outputs_are_too_short() -> None:
    real = _capture_lengths()
    assert real.total == 31 and real.sum == 1305
    bounds, counts = real.bounds, real.counts
    f = output_length(real)
    assert f.condition is Condition.SHORT_OUTPUTS and f.finding is Finding.HOLDS
    assert f.evidence["mean_output_tokens"] == pytest.approx(1305 / 31)
    long = output_length(Buckets(bounds, counts, 31 * 80.0))
    assert long.finding is Finding.CLEAR
    few = output_length(Buckets(bounds, tuple(c / 10 for c in counts), 130.5))
    assert few.finding is Finding.UNKNOWN
    assert output_length(None).finding is Finding.UNKNOWN


def test_described_workloads() -> None:
    short, batch, domain = assess(
        Workload(
            mean_output_tokens=30,
            concurrency=1,
            offline=True,
            specialised_domain=True,
            domain_trained_head=False,
        )
    )
    assert (short.condition, batch.condition, domain.condition) == (
        Condition.SHORT_OUTPUTS,
        Condition.BATCH1_OFFLINE,
        Condition.DOMAIN_WITHOUT_HEAD,
    )
    assert short.holds and batch.holds and domain.holds
    ok = assess(
        Workload(
            mean_output_tokens=400,
            concurrency=64,
            offline=False,
            specialised_domain=True,
            domain_trained_head=True,
        )
    )
    assert [f.finding for f in ok] == [Finding.CLEAR] * 3
    assert [f.finding for f in assess(Workload())] == [Finding.UNKNOWN] * 3

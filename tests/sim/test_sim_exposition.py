"""The simulated /metrics page against a real vLLM capture, parsed by the same parser."""

from __future__ import annotations

from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from alphagate import vllm
from alphagate_lab.sim.decode import Load
from alphagate_lab.sim.exposition import client_render, render
from alphagate_lab.sim.pod import PodSnapshot, PodSpec, SimPod, spec_args

EAGLE = {"method": "eagle3", "model": "x/EAGLE3", "num_speculative_tokens": 4}

# Families the issue requires, by parser family name.
REQUIRED = {
    vllm.base(vllm.SPEC_DRAFTS),
    vllm.base(vllm.SPEC_DRAFT_TOKENS),
    vllm.base(vllm.SPEC_ACCEPTED),
    vllm.base(vllm.SPEC_PER_POS),
    vllm.ITL,
    vllm.TPOT,
    vllm.TTFT,
    vllm.E2E,
    vllm.base(vllm.GENERATION_TOKENS),
    vllm.base(vllm.PROMPT_TOKENS),
    vllm.base(vllm.REQUEST_SUCCESS),
    vllm.RUNNING,
    vllm.WAITING,
}


def _served_pod(args: list[str], seconds: int = 60) -> SimPod:
    spec = PodSpec(name="p-0", deployment="p", role="canary", slice="chat", args=tuple(args))
    pod = SimPod(spec, seed=3, now=0.0, epoch0=1.8e9, ready=True)
    for _ in range(seconds):
        pod.tick(1.0, Load(alpha=0.6, arrival_rate=4.0))
    return pod


def _shape(text: str) -> dict[str, dict[str, object]]:
    """Per vllm: family: type, HELP, sample names, label names per sample name, le bounds."""
    out: dict[str, dict[str, object]] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(vllm.PREFIX):
            continue
        labels: dict[str, set[str]] = defaultdict(set)
        les: set[str] = set()
        for s in fam.samples:
            labels[s.name].update(k for k in s.labels if k != vllm.LE)
            if vllm.LE in s.labels:
                les.add(s.labels[vllm.LE])
        out[fam.name] = {
            "type": fam.type,
            "help": fam.documentation,
            "samples": set(labels),
            "labels": {k: frozenset(v) for k, v in labels.items()},
            "le": sorted(les, key=float),
        }
    return out


@pytest.fixture(scope="module")
def page() -> str:
    pod = _served_pod(spec_args(EAGLE))
    return render(pod.snapshot(60.0)).decode()


def test_same_families_labels_and_buckets_as_real_vllm(real_capture: str, page: str) -> None:
    real, sim = _shape(real_capture), _shape(page)
    assert sim, "no vllm: family parsed from the simulated page"
    missing = {name for name in sim if name not in real}
    assert not missing, f"families not in the real capture: {sorted(missing)}"
    for name, shape in sim.items():
        if name == vllm.REQUEST_GENERATION_TOKENS:
            # vLLM sizes this one by max_model_len (1, 2, 5, 10 ... up to it): the capture's
            # tiny model stops at 500, the simulated 8192-token model at 5000.
            got, want = dict(shape), dict(real[name])
            les, real_les = got.pop("le"), want.pop("le")
            assert got == want, f"{name} differs from real vLLM"
            assert isinstance(les, list) and isinstance(real_les, list)
            assert les[: len(real_les) - 1] == real_les[:-1] and les[-1] == "+Inf", les
            assert [float(x) for x in les[:-1]] == list(vllm.one_two_five_buckets(8192))
            continue
        assert shape == real[name], f"{name} differs from real vLLM"
    for name in REQUIRED:
        assert name in real and name in sim, name
        assert name + "_created" in sim or sim[name]["type"] == "gauge", name
    assert sim[vllm.ITL]["le"] == [*map(repr, vllm.ITL_BUCKETS), "+Inf"]


def test_sample_lines_keep_colons_and_suffixes(page: str) -> None:
    names = {line.split("{")[0] for line in page.splitlines() if line and line[0] != "#"}
    assert vllm.SPEC_DRAFTS in names and vllm.GENERATION_TOKENS in names
    assert vllm.ITL + vllm.BUCKET in names and vllm.ITL + vllm.COUNT in names
    assert vllm.base(vllm.SPEC_DRAFTS) + vllm.CREATED in names
    assert not any(n.startswith(vllm.ESCAPED_PREFIX) for n in names)


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_are_consistent_like_vllm(page: str) -> None:
    v = _values(page)
    key = (("engine", "0"), ("model_name", "llama-3.1-8b-instruct"))
    drafts, tokens = v[(vllm.SPEC_DRAFTS, key)], v[(vllm.SPEC_DRAFT_TOKENS, key)]
    accepted = v[(vllm.SPEC_ACCEPTED, key)]
    per_pos = [v[(vllm.SPEC_PER_POS, (*key, ("position", str(i))))] for i in range(4)]
    assert drafts > 1000
    assert tokens == 4 * drafts
    assert sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True)
    itl_count = v[(vllm.ITL + vllm.COUNT, key)]
    assert itl_count >= drafts  # one ITL observation per step per request, one draft each
    gen = v[(vllm.GENERATION_TOKENS, key)]
    assert gen >= itl_count + accepted
    for fam in (vllm.ITL, vllm.TPOT, vllm.TTFT, vllm.E2E):
        buckets = [
            value
            for (name, labels), value in v.items()
            if name == fam + vllm.BUCKET and dict(labels)["engine"] == "0"
        ]
        assert buckets == sorted(buckets), fam
        assert buckets[-1] == v[(fam + vllm.COUNT, key)], fam
    successes = sum(value for (name, _), value in v.items() if name == vllm.REQUEST_SUCCESS)
    assert successes == v[(vllm.TPOT + vllm.COUNT, key)]


def test_speculation_off_has_no_spec_series() -> None:
    pod = _served_pod([])
    text = render(pod.snapshot(60.0)).decode()
    assert vllm.SPEC_PREFIX not in text
    assert vllm.GENERATION_TOKENS in text and vllm.ITL in text


def test_multiprocess_variant_has_no_created_series() -> None:
    pod = _served_pod(spec_args(EAGLE), seconds=5)
    text = render(pod.snapshot(5.0), created=False).decode()
    assert vllm.CREATED not in text
    assert vllm.SPEC_DRAFTS in text


def test_snapshot_json_round_trip_renders_the_same_page() -> None:
    pod = _served_pod(spec_args(EAGLE), seconds=20)
    snap = pod.snapshot(20.0)
    again = PodSnapshot.from_json(snap.to_json(), t=snap.t, time=snap.time)
    assert render(again) == render(snap)


@pytest.mark.parametrize("created", [True, False])
@pytest.mark.parametrize(
    ("args", "seconds", "model"),
    [
        (spec_args(EAGLE), 60, "llama-3.1-8b-instruct"),
        ([], 60, "llama-3.1-8b-instruct"),
        (spec_args(EAGLE), 0, "llama-3.1-8b-instruct"),  # nothing counted yet
        (spec_args(EAGLE), 3000, 'a "quoted" \\ model\nname'),  # counts past 1e6, escapes
    ],
)
def test_page_is_prometheus_client_page_byte_for_byte(
    args: list[str], seconds: int, model: str, created: bool
) -> None:
    spec = PodSpec(
        name="p-0", deployment="p", role="canary", slice="chat", args=tuple(args), model_name=model
    )
    pod = SimPod(spec, seed=3, now=0.0, epoch0=1.8e9, ready=True)
    for _ in range(seconds):
        pod.tick(1.0, Load(alpha=0.6, arrival_rate=4.0))
    snap = pod.snapshot(float(seconds))
    assert render(snap, created=created) == client_render(snap, created=created)

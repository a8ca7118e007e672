"""The `alphagate.io/memory` annotation carries its schema version: what the actuator writes
says which version it is, an older unversioned annotation (what earlier controllers wrote)
still resumes, and a newer version than this controller knows is not guessed at."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alphagate.config import DeploymentRef, WorkloadKind
from alphagate.core.latency_run import LatencyRun, TailCount
from alphagate.core.model import AlphaWindow, Memory, State, Transition
from alphagate.core.spread import Spread
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube
from alphagate.kube.workload import (
    ANN_MEMORY,
    MEMORY_SCHEMA_VERSION,
    memory_annotation,
    read_memory,
    workload_state,
)
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

REF = DeploymentRef(name="canary", container="vllm")
NOW = 1_800_000_000.0
CFG = {"method": "ngram", "num_speculative_tokens": 4}
MEMORY = Memory(
    state=State.ROLLED_BACK,
    since=NOW,
    fail_streak=2,
    cooldown_index=1,
    cooldown_until=NOW + 600,
    flip_times=(NOW - 60, NOW),
    last_alpha={"chat": 0.41},
    history=(Transition(from_state=State.ON, to_state=State.ROLLED_BACK, reason="r", at=NOW),),
    last_flip_at=NOW,
    record=3,
)


def _deployment(annotations: dict[str, str]) -> dict[str, Any]:
    obj = DeploymentTemplate("canary", "ns", args=["--model", "/m"], replicas=1).build()
    obj["metadata"]["annotations"] = annotations
    return obj


def test_the_written_annotation_names_its_schema_version_and_reads_back() -> None:
    text = memory_annotation(MEMORY)
    assert next(iter(json.loads(text))) == "schemaVersion"  # first, for a reader of the YAML
    assert json.loads(text)["schemaVersion"] == MEMORY_SCHEMA_VERSION == 3
    assert read_memory(text) == MEMORY


def test_the_latency_run_reads_back_and_a_version_2_annotation_without_it_resumes() -> None:
    # the latency guard's pooled tail counts (core/latency_run.py): a defaulted field, so no
    # schema bump; an annotation written before it resumes with no windows to pool
    run = LatencyRun(
        windows=(TailCount(start=NOW - 300, end=NOW, above=9.6, total=400, expected=0.01),)
    )
    with_run = MEMORY.model_copy(update={"latency_run": run})
    assert read_memory(memory_annotation(with_run)) == with_run
    older = {**json.loads(memory_annotation(MEMORY)), "schemaVersion": 2}
    del older["latency_run"]
    older.pop("run", None)
    resumed = read_memory(json.dumps(older))
    assert resumed.latency_run == LatencyRun()


@pytest.mark.parametrize("version", [1, 2])
def test_the_fail_run_is_kept_and_an_older_annotation_reads_with_an_empty_run(
    version: int,
) -> None:
    # version 3 added Memory.run (core/streak.py): the judged windows a fail streak pools
    run = (AlphaWindow(end=NOW - 300, value=0.48, tokens=7_800, se=0.033, dof=5.0),)
    probing = MEMORY.model_copy(update={"state": State.PROBING, "run": run})
    assert read_memory(memory_annotation(probing)) == probing
    # what a version 1 or 2 controller wrote: no "run" key
    old = {**json.loads(memory_annotation(MEMORY)), "schemaVersion": version}
    old.pop("run")
    resumed = read_memory(json.dumps(old))
    assert resumed is not None and resumed.run == () and resumed == MEMORY


def test_an_older_unversioned_annotation_still_resumes() -> None:
    unversioned = MEMORY.model_dump_json()  # what controllers before the version wrote
    assert "schemaVersion" not in unversioned
    state = workload_state(_deployment({ANN_MEMORY: unversioned}), "vllm", WorkloadKind.DEPLOYMENT)
    assert state.memory == MEMORY


@pytest.mark.parametrize("version", [None, 1])
def test_a_version_1_spread_is_dropped_and_the_rest_resumes(version: int | None) -> None:
    # version 1 (and the unversioned annotation) learned the variance unscaled: read on the
    # alpha (1 - alpha) scale it would be ~30x too small at alpha 0.97 (core/spread.py)
    learned = MEMORY.model_copy(
        update={"spread": {"chat": Spread(scaled_variance=0.02, windows=5.0, at=NOW)}}
    )
    body = json.loads(learned.model_dump_json())
    body["spread"] = {"chat": {"variance": 0.02, "windows": 5.0, "at": NOW}}  # v1's shape
    if version is not None:
        body = {"schemaVersion": version, **body}
    got = read_memory(json.dumps(body))
    assert got == MEMORY and got.spread == {}
    # this version's own spread is kept
    assert read_memory(memory_annotation(learned)) == learned


@pytest.mark.parametrize("version", [MEMORY_SCHEMA_VERSION + 1, "1", None])
def test_a_version_this_controller_does_not_know_is_not_guessed_at(version: object) -> None:
    text = json.dumps({**json.loads(memory_annotation(MEMORY)), "schemaVersion": version})
    assert read_memory(text) is None
    assert (
        workload_state(_deployment({ANN_MEMORY: text}), "vllm", WorkloadKind.DEPLOYMENT).memory
        is None
    )


@pytest.mark.parametrize("raw", ["", "not json", "[1, 2]", '{"state": "Sideways"}'])
def test_an_unreadable_annotation_reads_as_none(raw: str) -> None:
    assert read_memory(raw) is None


def test_the_actuator_writes_the_versioned_annotation(apiserver: ApiServer, kube: Kube) -> None:
    apiserver.put(_deployment({}))
    act = Actuator(kube.api_client, wait_initial=0.001, wait_max=0.01)
    act.apply("ns", REF, speculative_config=CFG, state="Probing", memory=MEMORY, now=NOW)
    raw = apiserver.get("deployments", "ns", "canary", group="apps")["metadata"]["annotations"][
        ANN_MEMORY
    ]
    assert json.loads(raw)["schemaVersion"] == MEMORY_SCHEMA_VERSION
    assert act.read("ns", REF).memory == MEMORY.model_copy(update={"record": 1})

"""The API server double, exercised through the real kubernetes client over HTTP."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from alphagate.config import GROUP, PLURAL, VERSION
from alphagate.kube.client import Kube
from alphagate.kube.crd import build_crd
from alphagate_lab.sandbox.apiserver import (
    ApiServer,
    DeploymentTemplate,
    Rbac,
    RolloutCompleter,
    label_selector,
    strategic_merge_patch,
)


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    """These tests are about the double itself: its client may do anything unless a test
    narrows `rbac` (elsewhere the controller is held to the shipped Roles)."""
    with ApiServer() as server:
        yield server


def cr(name: str = "c", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeCanary",
        "metadata": {"name": name},
        "spec": spec if spec is not None else {"a": 1},
        "status": {"state": "ignored on create"},
    }


def reason(exc: client.ApiException) -> str:
    return str(json.loads(exc.body)["reason"])


def test_create_read_and_typed_deserialisation(kube: Kube) -> None:
    created = kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
    assert created.metadata.generation == 1
    assert created.metadata.resource_version
    dep = kube.apps.read_namespaced_deployment("d", "ns")
    assert isinstance(dep, client.V1Deployment)
    # the default kubelet completed the rollout
    assert dep.status.observed_generation == 1
    assert dep.status.updated_replicas == dep.status.available_replicas == 1
    with pytest.raises(client.ApiException) as err:
        kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
    assert err.value.status == 409 and reason(err.value) == "AlreadyExists"
    with pytest.raises(client.ApiException) as err:
        kube.apps.read_namespaced_deployment("missing", "ns")
    assert err.value.status == 404 and reason(err.value) == "NotFound"


def test_stale_resource_version_is_409_and_fresh_one_applies(kube: Kube) -> None:
    kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
    dep = kube.apps.read_namespaced_deployment("d", "ns")
    rv = dep.metadata.resource_version
    kube.apps.patch_namespaced_deployment("d", "ns", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(client.ApiException) as err:
        kube.apps.patch_namespaced_deployment(
            "d", "ns", {"metadata": {"resourceVersion": rv, "labels": {"x": "2"}}}
        )
    assert err.value.status == 409 and reason(err.value) == "Conflict"
    dep.metadata.labels = {"x": "3"}
    with pytest.raises(client.ApiException) as err:
        kube.apps.replace_namespaced_deployment("d", "ns", dep)  # PUT with a stale rv
    assert err.value.status == 409
    fresh = kube.apps.read_namespaced_deployment("d", "ns")
    out = kube.apps.patch_namespaced_deployment(
        "d",
        "ns",
        {"metadata": {"resourceVersion": fresh.metadata.resource_version, "labels": {"x": "4"}}},
    )
    assert out.metadata.labels["x"] == "4"
    assert int(out.metadata.resource_version) > int(fresh.metadata.resource_version)


def test_generation_bumps_on_spec_change_only(kube: Kube) -> None:
    kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
    out = kube.apps.patch_namespaced_deployment(
        "d", "ns", {"metadata": {"annotations": {"a": "b"}}}
    )
    assert out.metadata.generation == 1
    out = kube.apps.patch_namespaced_deployment(
        "d",
        "ns",
        {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["x"]}]}}}},
    )
    assert out.metadata.generation == 2
    assert out.spec.template.spec.containers[0].image  # strategic merge kept the image
    before = out.metadata.resource_version
    same = kube.apps.patch_namespaced_deployment(
        "d", "ns", {"metadata": {"annotations": {"a": "b"}}}
    )
    assert same.metadata.resource_version != before  # the kubelet hook wrote status meanwhile
    again = kube.apps.patch_namespaced_deployment(
        "d", "ns", {"metadata": {"annotations": {"a": "b"}}}
    )
    assert again.metadata.resource_version == same.metadata.resource_version  # no-op: no bump


def test_status_subresource_semantics(kube: Kube) -> None:
    c = kube.custom
    created = c.create_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL, cr())
    assert "status" not in created and created["metadata"]["generation"] == 1
    # /status changes only status
    out = c.patch_namespaced_custom_object_status(
        GROUP, VERSION, "ns", PLURAL, "c", {"status": {"state": "On"}, "spec": {"a": 99}}
    )
    assert out["status"] == {"state": "On"} and out["spec"] == {"a": 1}
    assert out["metadata"]["generation"] == 1
    # the main resource ignores status, bumps generation on spec change
    out = c.patch_namespaced_custom_object(
        GROUP, VERSION, "ns", PLURAL, "c", {"status": {"state": "Off"}, "spec": {"a": 2}}
    )
    assert out["status"] == {"state": "On"} and out["spec"] == {"a": 2}
    assert out["metadata"]["generation"] == 2
    # labels do not bump generation
    out = c.patch_namespaced_custom_object(
        GROUP, VERSION, "ns", PLURAL, "c", {"metadata": {"labels": {"k": "v"}}}
    )
    assert out["metadata"]["generation"] == 2
    # PUT /status with a stale resourceVersion conflicts too
    stale = dict(created)
    stale["status"] = {"state": "Probing"}
    with pytest.raises(client.ApiException) as err:
        c.replace_namespaced_custom_object_status(GROUP, VERSION, "ns", PLURAL, "c", stale)
    assert err.value.status == 409


def test_json_patch_with_test_op(kube: Kube) -> None:
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL, cr())
    ops = [
        {"op": "test", "path": "/spec/a", "value": 1},
        {"op": "replace", "path": "/spec/a", "value": 5},
    ]
    out = kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ns", PLURAL, "c", ops, _content_type="application/json-patch+json"
    )
    assert out["spec"]["a"] == 5
    with pytest.raises(client.ApiException) as err:  # the test op now fails
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, "ns", PLURAL, "c", ops, _content_type="application/json-patch+json"
        )
    assert err.value.status == 422


def test_strategic_merge_by_container_name() -> None:
    doc = {"containers": [{"name": "a", "image": "i", "args": ["1"]}, {"name": "b", "image": "j"}]}
    out = strategic_merge_patch(
        {"spec": doc}, {"spec": {"containers": [{"name": "b", "args": ["2"]}]}}
    )
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "i", "args": ["1"]},
        {"name": "b", "image": "j", "args": ["2"]},
    ]
    out = strategic_merge_patch(out, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["b"]


def test_rbac_forbids_and_names_the_permission(apiserver: ApiServer, kube: Kube) -> None:
    kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
    apiserver.rbac.deny("patch", "apps", "deployments")
    with pytest.raises(client.ApiException) as err:
        kube.apps.patch_namespaced_deployment("d", "ns", {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 403
    assert (
        'cannot patch resource "deployments" in API group "apps"'
        in json.loads(err.value.body)["message"]
    )
    kube.apps.read_namespaced_deployment("d", "ns")  # get still allowed
    apiserver.rbac = Rbac().allow(["get", "list"], "apps", "deployments")
    with pytest.raises(client.ApiException) as err:
        kube.core.list_namespaced_pod("ns")
    assert err.value.status == 403


def test_the_controller_and_people_are_held_to_their_own_rules(apiserver: ApiServer) -> None:
    apiserver.rbac = Rbac().allow("get", "apps", "deployments")  # the controller's grants
    person = Kube.from_configuration(apiserver.configuration(as_controller=False))
    controller = Kube.from_configuration(apiserver.configuration())
    try:
        person.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
        controller.apps.read_namespaced_deployment("d", "ns")
        with pytest.raises(client.ApiException) as err:
            controller.apps.delete_namespaced_deployment("d", "ns")
        assert err.value.status == 403
        assert "system:serviceaccount:alphagate:alphagate" in json.loads(err.value.body)["message"]
        person.apps.delete_namespaced_deployment("d", "ns")  # people: everything by default
    finally:
        person.close()
        controller.close()


@pytest.mark.parametrize("reply", [504, 0])
def test_a_fault_after_the_write_lands_it_and_loses_the_reply(
    apiserver: ApiServer, kube: Kube, reply: int
) -> None:
    kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
    fault = apiserver.faults.add("PATCH", r"/deployments/d$", reply, after=True)
    with pytest.raises(Exception) as err:  # 504, or the connection closed without an answer
        kube.apps.patch_namespaced_deployment("d", "ns", {"metadata": {"labels": {"a": "b"}}})
    if reply:
        assert isinstance(err.value, client.ApiException) and err.value.status == reply
    assert fault.hits == 1
    assert apiserver.get("deployments", "ns", "d", group="apps")["metadata"]["labels"]["a"] == "b"
    (logged,) = apiserver.requests_matching(method="PATCH", name="d")
    assert logged.status == reply


def test_faults_fire_n_times_then_stop(apiserver: ApiServer, kube: Kube) -> None:
    kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns").build())
    fault = apiserver.faults.add("GET", r"/deployments/d$", 500, times=2)
    for _ in range(2):
        with pytest.raises(client.ApiException) as err:
            kube.apps.read_namespaced_deployment("d", "ns")
        assert err.value.status == 500
    kube.apps.read_namespaced_deployment("d", "ns")
    assert fault.hits == 2
    assert [r.status for r in apiserver.requests_matching(method="GET", name="d")] == [
        500,
        500,
        200,
    ]


def test_list_with_label_and_field_selectors(apiserver: ApiServer, kube: Kube) -> None:
    for name, track in (("a", "canary"), ("b", "baseline"), ("c", "canary")):
        apiserver.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "ns", "labels": {"track": track}},
            }
        )
    pods = kube.core.list_namespaced_pod("ns", label_selector="track=canary")
    assert [p.metadata.name for p in pods.items] == ["a", "c"]
    pods = kube.core.list_namespaced_pod("ns", label_selector="track in (baseline,x)")
    assert [p.metadata.name for p in pods.items] == ["b"]
    pods = kube.core.list_pod_for_all_namespaces(field_selector="metadata.name=c")
    assert [p.metadata.name for p in pods.items] == ["c"]
    assert label_selector("a,!b,c!=d")({"a": "1", "c": "e"})
    assert not label_selector("a,!b")({"a": "1", "b": "2"})


def test_watch_streams_from_a_resource_version(kube: Kube) -> None:
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL, cr("one"))
    listed = kube.custom.list_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL)
    rv = listed["metadata"]["resourceVersion"]
    done = threading.Event()

    def writer() -> None:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL, cr("two"))
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL, "one")
        done.set()

    w = watch.Watch()
    seen: list[tuple[str, str]] = []
    threading.Thread(target=writer, daemon=True).start()
    for ev in w.stream(
        kube.custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "ns",
        PLURAL,
        resource_version=rv,
        timeout_seconds=5,
    ):
        seen.append((ev["type"], ev["object"]["metadata"]["name"]))
        if len(seen) == 2:
            w.stop()
    assert done.wait(5)
    assert seen == [("ADDED", "two"), ("DELETED", "one")]


def test_watch_from_expired_version_is_410() -> None:
    with ApiServer(watch_history=3) as server:
        k = Kube.from_configuration(server.configuration())
        for i in range(6):
            server.put(cr(f"c{i}") | {"metadata": {"name": f"c{i}", "namespace": "ns"}})
        with pytest.raises(client.ApiException) as err:
            for _ in watch.Watch().stream(
                k.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "ns",
                PLURAL,
                resource_version="1",
                timeout_seconds=2,
            ):
                pass
        assert err.value.status == 410


def test_installed_crd_validates_custom_resources(kube: Kube) -> None:
    ext = client.ApiextensionsV1Api(kube.api_client)
    ext.create_custom_resource_definition(build_crd())
    with pytest.raises(client.ApiException) as err:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL, cr(spec={"a": 1}))
    assert err.value.status == 422
    assert "spec" in json.loads(err.value.body)["message"]


def test_delayed_kubelet_reports_rollout_in_progress_then_complete(
    apiserver: ApiServer, kube: Kube
) -> None:
    apiserver.kubelet = RolloutCompleter(delay_seconds=0.2)
    kube.apps.create_namespaced_deployment("ns", DeploymentTemplate("d", "ns", replicas=2).build())
    dep = kube.apps.read_namespaced_deployment("d", "ns")
    assert dep.status.updated_replicas == 0 and dep.status.observed_generation == 1
    w = watch.Watch()
    for ev in w.stream(
        kube.apps.list_namespaced_deployment,
        "ns",
        resource_version=dep.metadata.resource_version,
        timeout_seconds=5,
    ):
        if ev["object"].status.updated_replicas == 2:
            w.stop()
    final = kube.apps.read_namespaced_deployment("d", "ns")
    assert final.status.updated_replicas == final.status.available_replicas == 2


def test_discovery_endpoints(apiserver: ApiServer, kube: Kube) -> None:
    groups = client.ApisApi(kube.api_client).get_api_versions()
    assert GROUP in [g.name for g in groups.groups]
    res = client.CoordinationV1Api(kube.api_client).get_api_resources()
    assert "leases" in [r.name for r in res.resources]


def _raw(apiserver: ApiServer, head: bytes) -> bytes:
    """What the double answers to a request head sent as is (bounded: 5 s, one answer)."""
    with socket.create_connection(("127.0.0.1", apiserver.port), timeout=5) as sock:
        sock.sendall(head)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


def test_request_heads_are_read_as_http_server_reads_them(apiserver: ApiServer) -> None:
    """The double reads request heads itself (`requestline`, without the email parser): a
    well-formed one on a kept-alive connection is served; a header line without a colon,
    too many headers and a too-long line are refused with http.server's statuses."""
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    try:
        for _ in range(2):  # HTTP/1.1 keeps the connection for the second request
            conn.request("GET", "/version", headers={"X-Folded": "a:b:c"})
            answer = conn.getresponse()
            assert answer.status == 200 and json.loads(answer.read())["major"]
    finally:
        conn.close()
    get = b"GET /version HTTP/1.1\r\nHost: x\r\n"
    assert _raw(apiserver, get + b"no colon here\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _raw(apiserver, get + b" folded: value\r\n\r\n").startswith(b"HTTP/1.1 400")
    many = b"".join(b"X-%d: v\r\n" % i for i in range(101))
    assert _raw(apiserver, get + many + b"\r\n").startswith(b"HTTP/1.1 431")
    long = b"X-Long: " + b"v" * 70_000 + b"\r\n"
    assert _raw(apiserver, get + long + b"\r\n").startswith(b"HTTP/1.1 431")

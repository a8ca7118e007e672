"""`alphagate crd`, the control commands and `alphagate status`, against the API double."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from alphagate.cli import app
from alphagate.config import GROUP, VERSION
from alphagate.kube.crd import render_crd
from alphagate.kube.status.commands import ANN_COMMAND, ANN_COMMAND_ID, pending_command
from alphagate.kube.status.evidence import LatencyEvidence, SliceEvidence
from alphagate.kube.status.fields import ConditionType, rfc3339, set_condition
from alphagate.kube.status.resource import CanaryStatus, Decision
from alphagate_lab.sandbox.apiserver import ApiServer

runner = CliRunner()
NOW = 1_800_000_000.0


def run(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "220", "NO_COLOR": "1"})


def flat(text: str) -> str:
    return " ".join(text.split())


def seed(apiserver: ApiServer) -> None:
    apiserver.put(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SpeculativeCanary",
            "metadata": {"name": "chat", "namespace": "llm"},
            "spec": {"mode": "enforce", "target": {"name": "chat-canary"}},
            "status": CanaryStatus(
                state="RolledBack",
                speculation_on=False,
                combined_alpha=0.412,
                combined_lower=0.38,
                combined_upper=0.44,
                p99_ratio=1.04,
                last_evaluated=rfc3339(NOW),
                slices=[
                    SliceEvidence(
                        name="code",
                        weight=0.3,
                        alpha=0.412,
                        lower=0.38,
                        upper=0.44,
                        drafts=900,
                        verdict="Fail",
                        reason="upper bound 0.44 < 0.55",
                    ),
                ],
                latency=[
                    LatencyEvidence(
                        check="latency",
                        verdict="Pass",
                        canary_p99_seconds=0.052,
                        baseline_p99_seconds=0.05,
                        ratio=1.04,
                    )
                ],
                last_decision=Decision(
                    at=rfc3339(NOW),
                    action="disable",
                    verdict="Fail",
                    reason="alpha 0.41 below the gate",
                    summary="disable: alpha 0.41 < 0.55",
                    state="RolledBack",
                    applied=True,
                ),
                conditions=set_condition([], ConditionType.READY, True, "Evaluated", now=NOW),
            ).dump(),
        }
    )


def test_crd_command_prints_and_checks(tmp_path: Path) -> None:
    result = run("crd")
    assert result.exit_code == 0 and result.stdout == render_crd()
    target = tmp_path / "crd.yaml"
    assert run("crd", "-o", str(target)).exit_code == 0
    assert run("crd", "--check", str(target)).exit_code == 0
    target.write_text(render_crd().replace("speccanary", "sc"))
    bad = run("crd", "--check", str(target))
    assert bad.exit_code == 1 and "drifted" in bad.stderr


def test_pause_writes_command_annotations(apiserver: ApiServer) -> None:
    seed(apiserver)
    result = run("pause", "chat", "-n", "llm", "--server", apiserver.url)
    assert result.exit_code == 0, result.output
    assert "pause requested" in result.stdout
    obj = apiserver.get("speculativecanaries", "llm", "chat")
    ann = obj["metadata"]["annotations"]
    assert ann[ANN_COMMAND] == "pause" and ann[ANN_COMMAND_ID]
    assert obj["metadata"]["generation"] == 1  # metadata only: no spec change
    assert pending_command(obj, CanaryStatus()) == ("pause", ann[ANN_COMMAND_ID])
    # a second command gets a new id, so it is a new request
    run("pause", "chat", "-n", "llm", "--server", apiserver.url)
    ann2 = apiserver.get("speculativecanaries", "llm", "chat")["metadata"]["annotations"]
    assert ann2[ANN_COMMAND_ID] != ann[ANN_COMMAND_ID]


def test_command_wait_times_out_without_a_controller(apiserver: ApiServer) -> None:
    seed(apiserver)
    result = run("enable", "chat", "-n", "llm", "--server", apiserver.url, "--wait", "0.3")
    assert result.exit_code == 1
    assert "not handled within" in result.stderr


def test_command_on_missing_canary_is_a_clear_error(apiserver: ApiServer) -> None:
    result = run("disable", "nope", "-n", "llm", "--server", apiserver.url)
    assert result.exit_code == 1
    assert "annotate speculativecanaries.alphagate.io llm/nope: HTTP 404" in str(result.exception)


def test_status_list_and_detail(apiserver: ApiServer) -> None:
    seed(apiserver)
    listed = run("status", "-n", "llm", "--server", apiserver.url)
    assert listed.exit_code == 0, listed.output
    out = flat(listed.stdout)
    assert re.search(
        r"llm chat enforce RolledBack off 0\.412 \[0\.380, 0\.440\] 1\.04 "
        r"disable: alpha 0\.41 < 0\.55",
        out,
    ), out
    detail = run("status", "chat", "-n", "llm", "--server", apiserver.url)
    assert detail.exit_code == 0, detail.output
    out = flat(detail.stdout)
    assert "state RolledBack" in out
    assert "code 0.30 0.412 [0.380, 0.440] 900" in out
    assert "52.0 ms 50.0 ms 1.04" in out
    assert "last decision: disable (Fail, applied" in out
    js = run("status", "chat", "-n", "llm", "--server", apiserver.url, "--json")
    assert '"combinedAlpha": 0.412' in js.stdout


def test_status_of_nothing(apiserver: ApiServer) -> None:
    result = run("status", "-A", "--server", apiserver.url)
    assert result.exit_code == 0 and "no SpeculativeCanary" in result.stdout

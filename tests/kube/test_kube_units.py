"""Why a unit's decision was not applied travels as a type: the shell branches on the error's
class and on `FailureReason`, never on reason text."""

from __future__ import annotations

import pytest

from alphagate.errors import (
    AlphagateError,
    ApiBudgetError,
    ConflictError,
    KubeError,
    NotLeaderError,
    RecordChangedError,
)
from alphagate.kube.events import Reason
from alphagate.kube.units import FailureReason, event_reason, failure_reason


@pytest.mark.parametrize(
    ("exc", "reason", "event"),
    [
        (NotLeaderError("lost the lease"), FailureReason.NOT_LEADER, Reason.PATCH_FAILED),
        (RecordChangedError("moved"), FailureReason.RECORD_CHANGED, Reason.PATCH_FAILED),
        (
            ConflictError("409"),
            FailureReason.CONFLICT_RETRIES_EXHAUSTED,
            Reason.CONFLICT_RETRIES_EXHAUSTED,
        ),
        (
            ApiBudgetError("spent", scope="namespace"),
            FailureReason.NAMESPACE_API_BUDGET_EXCEEDED,
            Reason.API_BUDGET_EXCEEDED,
        ),
        (KubeError("500", status=500), FailureReason.PATCH_FAILED, Reason.PATCH_FAILED),
    ],
    ids=["not-leader", "record-changed", "conflict", "api-budget", "other"],
)
def test_a_failure_is_classified_by_its_type(
    exc: AlphagateError, reason: FailureReason, event: Reason
) -> None:
    assert failure_reason(exc) is reason
    assert event_reason(exc) is event


def test_a_kube_error_whose_reason_text_says_not_leader_is_not_taken_for_one() -> None:
    # only the type says "this replica may no longer act"
    assert failure_reason(KubeError("x", reason="NotLeader")) is FailureReason.PATCH_FAILED
    assert isinstance(NotLeaderError("x"), KubeError)

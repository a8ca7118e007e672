"""Reading and claiming a unit's Deployments before it is judged, and resuming its Memory.

One canary per Deployment: before any flip a canary claims its Deployments
(`Actuator.claim`); a claim is only taken over from a canary that no longer exists. The
Memory resumes from the newest of this process's, the status's and the Deployments' record
(`kube.record`), so a lost reply or a replica that died mid-flip neither loses nor repeats it.
"""

from __future__ import annotations

from typing import Any

from alphagate.config import GROUP, PLURAL, VERSION
from alphagate.core.model import Memory
from alphagate.errors import ClaimedError, KubeError, NotFoundError
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube, call
from alphagate.kube.events import EventRecorder, ObjectRef, Reason
from alphagate.kube.record import Origin, resume
from alphagate.kube.units import Unit, UnitOutcome, combined_rollout, event_reason, failure_reason
from alphagate.kube.workload import WorkloadState
from alphagate.shell.outcome import Prepared


def canary_exists(kube: Kube, owner: str) -> bool:
    """Whether the SpeculativeCanary `namespace/name` that claimed a Deployment still
    exists (any answer but 404 counts as yes: a claim is only taken from the gone)."""
    namespace, _, name = owner.partition("/")
    try:
        call(
            f"read {PLURAL}.{GROUP} {owner}",
            lambda: kube.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            ),
        )
    except NotFoundError:
        return False
    except KubeError:
        return True
    return True


def prepare(
    kube: Kube,
    actuator: Actuator,
    events: EventRecorder,
    unit: Unit,
    *,
    ref: ObjectRef,
    cached: Memory | None,
    stored: Memory | None,
    now: float,
    log: Any,
    claim_as: str = "",
) -> Prepared:
    """Read (and, with `claim_as`, claim) the unit's Deployments and resume its memory
    from the newest record (never judge without knowing what runs); a failed read or a
    Deployment another canary owns is kept as the unit's outcome."""
    uo = UnitOutcome(unit)
    ulog = log.bind(unit=unit.name) if unit.name else log
    deps: list[WorkloadState] = []
    try:
        for dref in unit.deployments:
            if not claim_as:  # dry-run: nothing is written, nothing claimed
                deps.append(actuator.read(ref.namespace, dref))
                continue
            try:
                dep, stale = actuator.claim(
                    ref.namespace,
                    dref,
                    owner=claim_as,
                    owner_exists=lambda owner: canary_exists(kube, owner),
                )
            except ClaimedError:
                raise
            except KubeError as exc:  # API trouble: the patch claims it (ANN_OWNER) later
                ulog.warning("claim_failed", deployment=dref.name, error=str(exc))
                dep, stale = actuator.read(ref.namespace, dref), ""
            deps.append(dep)
            if stale:
                events.normal(
                    ref,
                    Reason.CLAIM_TAKEN_OVER,
                    f"{dep.what} was claimed by SpeculativeCanary {stale}, which no longer "
                    f"exists; {claim_as} owns it now",
                )
    except KubeError as exc:
        uo.error, uo.error_reason = exc, failure_reason(exc)
        uo.memory = cached or stored
        events.warning(ref, event_reason(exc), str(exc))
        ulog.warning("deployment_read_failed", error=str(exc))
        return Prepared(uo, ulog)
    resumed = resume(cached, stored, deps)
    memory = resumed.memory
    uo.memory_origin = resumed.text
    known = cached or stored
    if resumed.origin is Origin.RECORD and known is not None:
        ulog.info(
            "resumed_from_record",
            origin=resumed.text,
            state=memory.state.value,
            record=memory.record,
            known=known.record,
        )
        events.normal(
            ref,
            Reason.RESUMED_FROM_RECORD,
            f"Deployment {resumed.deployment}'s record (generation {memory.record}, state "
            f"{memory.state.value}) is newer than this controller's memory (generation "
            f"{known.record}, state {known.state.value}): a reply was lost or a controller "
            "stopped mid-flip; continuing from the record, nothing is flipped again",
        )
    if resumed.unreadable:
        ulog.warning("record_unreadable", deployment=resumed.unreadable, record=memory.record)
    rollout = combined_rollout(actuator, deps, now)
    return Prepared(uo, ulog, deps, memory, rollout)

"""Which Memory a unit continues from: the Deployment's record is the truth.

Every write of a canary Deployment's record (its `alphagate.io/*` annotations: the state, the
speculation flag, the Memory) bumps the record's generation (`alphagate.io/record`), and the
Memory written with it carries that generation (`Memory.record`). A Memory this process
remembers, or the one in the resource's status, continues some generation of that record.
When a Deployment's record is newer than that generation, someone wrote it since: a reply
that was lost after the patch landed, a controller that died before its status write, or
another replica (a leader change mid-flip). The record's Memory then wins, so the decision it
recorded is neither lost nor made (and flipped) a second time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from alphagate.core.model import Memory
from alphagate.kube.workload import WorkloadState


class Origin(StrEnum):
    PROCESS = "process"  # this process's last evaluation
    STATUS = "status"  # the resource's status
    RECORD = "record"  # a Deployment's record (newer than both)
    NEW = "new"  # nothing anywhere: a new canary


@dataclass(frozen=True, slots=True)
class Resumed:
    """The Memory to continue from, where it came from, and which Deployment's record (if
    the record won). `unreadable` names a Deployment whose newer record could not be read."""

    memory: Memory
    origin: Origin
    deployment: str = ""
    unreadable: str = ""

    @property
    def text(self) -> str:
        return f"record on {self.deployment}" if self.deployment else self.origin.value


def resume(
    cached: Memory | None, stored: Memory | None, deployments: Sequence[WorkloadState]
) -> Resumed:
    """This process's Memory, else the status's; a newer Deployment record wins (the newest of
    several). A newer record whose Memory cannot be read (edited by hand) keeps the base
    Memory, moved to that generation so the next write is not refused forever.
    """
    base, origin = (cached, Origin.PROCESS) if cached is not None else (stored, Origin.STATUS)
    newest = max(deployments, key=lambda d: d.record, default=None)
    if base is not None and (newest is None or newest.record <= base.record):
        return Resumed(base, origin)
    recorded = newest.memory if newest is not None else None
    if newest is not None and recorded is not None:
        return Resumed(
            recorded.model_copy(update={"record": newest.record}), Origin.RECORD, newest.name
        )
    top = newest.record if newest is not None else 0
    lost = newest.name if newest is not None and top > 0 else ""
    if base is None:  # nothing readable anywhere: start afresh at the record's generation
        return Resumed(Memory(record=top), Origin.NEW, unreadable=lost)
    return Resumed(base.model_copy(update={"record": top}), origin, unreadable=lost)


def written(memory: Memory, records: Sequence[int]) -> Memory:
    top = max(records, default=memory.record)
    return memory if top <= memory.record else memory.model_copy(update={"record": top})


__all__ = ["Origin", "Resumed", "resume", "written"]

"""How the replicas split the canaries, recorded where every replica reads it: one owner per
canary, always.

A replica runs either leader election or sharding (`--shards N`). Two replicas that disagree
would each own canaries by their own rule: `--shards 3` beside `--shards 4` (a rolling change of
the flag) makes the same canary shard 1 for one and shard 2 for the other, so both act on it;
a leader beside a sharded replica acts on its canaries too. So the way the work is split is
recorded on the coordination Lease (the leader
Lease, named by `--lease-name`, is also the sharded replicas' record) in two annotations, and a
replica acts only while that Lease records its own configuration and it has renewed it itself
within its renew deadline. A replica whose configuration disagrees with a live record refuses
to own anything (a `Refusal`: a Warning Event on the Lease, the `alphagate_ownership_refused`
gauge, a log line) until the record's replicas are gone: the last of them releases the Lease on
a clean stop (or it expires `lease_duration` after its last renewal), and the next
configuration takes it over with a write that carries its resourceVersion, so only one wins.

Why one renewal is enough: a replica acts until `renew_deadline` after the start of the round
in which it last wrote the record; another configuration takes the record only after seeing it
unchanged for `lease_duration` (longer) on its own clock, or released by the last replica of
the old configuration (a replica announces itself on its member Lease a round before its first
write of the record, and the release is refused with a 409 if anyone wrote since the releaser
looked). This module holds the vocabulary; `kube.lease` and `kube.shards` enforce it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

DEFAULT_LEASE_NAME: Final = "alphagate-controller"
"""The coordination Lease (`--lease-name`): here, not in `kube.lease`, so the `run` command's
options load without the kubernetes client."""

ANN_MODE: Final = "alphagate.io/coordination"
"""`leader` or `sharded`: how the replicas that hold this Lease split the canaries."""
ANN_SHARDS: Final = "alphagate.io/shards"
"""The shard count (`0` with leader election)."""
GROUP_LABEL: Final = "alphagate.io/shard-group"
"""On every Lease of one group (the record, shard and member Leases): its name."""
ROLE_LABEL: Final = "alphagate.io/lease-role"
RECORD_ROLE: Final = "record"
"""The role of the coordination Lease (shards are `shard`, replicas `member`)."""


class Mode(StrEnum):
    LEADER = "leader"
    SHARDED = "sharded"


@dataclass(frozen=True, slots=True)
class Coordination:
    mode: Mode
    shards: int = 0

    @classmethod
    def leader(cls) -> Coordination:
        return cls(Mode.LEADER, 0)

    @classmethod
    def sharded(cls, shards: int) -> Coordination:
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        return cls(Mode.SHARDED, shards)

    @classmethod
    def recorded(cls, annotations: Mapping[str, str] | None) -> Coordination | None:
        """What a Lease's annotations record. No annotation: a leader Lease written by an
        alphagate from before the record (leader election). An unreadable one: None (it
        agrees with nobody)."""
        annotations = annotations or {}
        mode = annotations.get(ANN_MODE)
        if mode is None:
            return cls.leader()
        raw = annotations.get(ANN_SHARDS, "")
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 6):
            return None
        try:
            got = cls(Mode(mode), int(raw))
        except ValueError:
            return None
        if (got.mode is Mode.LEADER) != (got.shards == 0):
            return None
        return got

    def annotations(self) -> dict[str, str]:
        return {ANN_MODE: self.mode.value, ANN_SHARDS: str(self.shards)}

    def __str__(self) -> str:
        if self.mode is Mode.LEADER:
            return "leader election"
        return f"{self.shards} shard{'s' if self.shards != 1 else ''}"


@dataclass(frozen=True, slots=True)
class Refusal:
    lease: str  # namespace/name of the coordination Lease
    ours: Coordination
    recorded: Coordination | None  # None: the annotations are unreadable
    holder: str  # who renewed the record last

    @property
    def message(self) -> str:
        """Stable text (no times), so repeats bump one Event's count."""
        theirs = str(self.recorded) if self.recorded is not None else "an unreadable record"
        return (
            f"this replica runs {self.ours} but Lease {self.lease} records {theirs} (renewed by "
            f"{self.holder or 'nobody'}): it owns no canary until the replicas of that record "
            "are gone (their last one releases the Lease, or it expires), so no canary has two "
            "owners. Run every replica with the same --shards / --leader-elect"
        )


def tell_refusal(
    log: Any,
    refusal: Refusal | None,
    ours: Coordination,
    on_refusal: Callable[[Refusal | None], None] | None,
) -> None:
    """The same words from the leader elector and the shard rounds."""
    if refusal is not None:
        log.warning(
            "ownership_refused",
            recorded=str(refusal.recorded),
            ours=str(refusal.ours),
            holder=refusal.holder,
            message=refusal.message,
        )
    else:
        log.info("ownership_agreed", ours=str(ours))
    guarded(log, "refusal_callback_failed", on_refusal, refusal)


def guarded(log: Any, event: str, callback: Callable[..., None] | None, *args: Any) -> None:
    """The election and the shard rounds outlive their callbacks' bugs (logged as `event`)."""
    if callback is None:
        return
    try:
        callback(*args)
    except Exception as exc:  # noqa: BLE001 - last resort: a callback bug must not stop owning or refusing
        log.error(event, error=repr(exc), error_type=type(exc).__name__)


__all__ = [
    "ANN_MODE",
    "ANN_SHARDS",
    "DEFAULT_LEASE_NAME",
    "GROUP_LABEL",
    "RECORD_ROLE",
    "ROLE_LABEL",
    "Coordination",
    "Mode",
    "Refusal",
    "guarded",
    "tell_refusal",
]

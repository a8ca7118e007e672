"""What one evaluation writes back: SourceHealthy from its read, then its status and metrics,
or, for a spec that is invalid, the invalid status and one InvalidSpec Event per new message.

The reconciler's last step (`Reconciler._finish`, `_prepare`); a failed write is logged and
told as a Warning Event, never raised: the next evaluation writes again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from alphagate.core.model import Memory, Observation
from alphagate.errors import ForbiddenError, KubeError
from alphagate.kube.events import EventRecorder, ObjectRef, Reason
from alphagate.kube.status.fields import Condition, ConditionType, set_condition
from alphagate.kube.status.resource import CanaryStatus, CommandRecord
from alphagate.kube.status.writer import StatusWriter
from alphagate.kube.status_builder import build_status, invalid_status
from alphagate.shell.outcome import Outcome, Pending, source_budgets, source_failures
from alphagate.shell.reporting import METRIC_ERRORS, Recorder, export
from alphagate.shell.timing_warnings import TimingWarnings


def source_health(
    p: Pending, observation: Observation, recorder: Recorder, timing: TimingWarnings
) -> list[Condition]:
    """Count the read's failures and spent budgets; SourceHealthy and timing warnings."""
    namespace, name = p.out.namespace, p.out.name
    failures = source_failures(observation)
    errors = [text for _, text in failures]
    budgets = source_budgets(observation)
    for kind, _ in failures:
        with contextlib.suppress(*METRIC_ERRORS):
            recorder.source_error(kind, namespace=namespace, canary=name)
    for budget in budgets:
        with contextlib.suppress(*METRIC_ERRORS):
            recorder.budget_exceeded(budget, namespace=namespace, canary=name)
    conditions = set_condition(
        p.conditions,
        ConditionType.SOURCE_HEALTHY,
        not errors,
        ("BudgetExceeded" if budgets else "SourceErrors") if errors else "Observed",
        "; ".join(errors)[:1024] if errors else f"read {len(observation.pools)} pools",
        now=p.now,
        generation=p.generation,
    )
    return timing.check(
        p.spec,
        observation,
        conditions,
        ref=p.ref,
        generation=p.generation,
        now=p.now,
        log=p.log,
    )


@dataclass(frozen=True, slots=True)
class StatusOut:
    """Where an evaluation's status, Warning Events and metrics go, and the log for failures.
    `forced_dry_run`: the controller runs with --dry-run (status says so)."""

    writer: StatusWriter
    events: EventRecorder
    recorder: Recorder
    log: Any
    forced_dry_run: bool = False

    def write(
        self,
        p: Pending,
        conditions: list[Condition],
        memories: dict[str, Memory],
        command_record: CommandRecord | None,
        *,
        owned: bool,
    ) -> None:
        """Build and write the status (unless the shard moved, `owned` False, and nothing was
        done), then export the evaluation's metrics."""
        out, log = p.out, p.log
        namespace, name = out.namespace, out.name
        status = build_status(
            p.spec,
            out.units,
            p.previous,
            conditions,
            memories,
            command_record,
            generation=p.generation,
            now=p.now,
            dry_run=p.dry_run,
            forced_dry_run=self.forced_dry_run,
        )
        out.status = status
        acted = any(u.applied or u.args_changed for u in out.units)
        if not acted and not owned:
            # Its shard moved meanwhile: the new owner evaluates it (a flip made before the
            # move is still recorded, here and in the Deployment's annotation).
            log.info("shard_moved", detail="evaluation dropped, status left to the new owner")
            return
        try:
            self.writer.write(namespace, name, status)
            out.status_written = True
        except KubeError as exc:
            log.error("status_write_failed", error=str(exc), status=exc.status)
            reason = Reason.FORBIDDEN if isinstance(exc, ForbiddenError) else Reason.PATCH_FAILED
            self.events.warning(p.ref, reason, f"could not write status: {exc}")
        export(self.recorder, p.spec, namespace, name, out.units, out.duration_seconds)

    def invalid(
        self,
        out: Outcome,
        previous: CanaryStatus,
        ref: ObjectRef,
        reason: str,
        message: str,
        *,
        generation: int,
        now: float,
    ) -> None:
        """The status of a spec that is invalid (`reason`, `message`), and a Warning Event
        unless the last status already said the same."""
        out.spec_error = message
        out.spec_invalid = True
        status = invalid_status(previous, reason, message, generation=generation, now=now)
        out.status = status
        already = previous.condition(ConditionType.SPEC_VALID)
        if already is None or already.status != "False" or already.message != message[:1024]:
            self.events.warning(ref, Reason.INVALID_SPEC, message)
        try:
            self.writer.write(out.namespace, out.name, status)
            out.status_written = True
        except KubeError as exc:
            self.log.error("status_write_failed", error=str(exc))

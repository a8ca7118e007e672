"""The SpeculativeCanary status: its pydantic model (half of the CRD schema) and its writer.

Status is where a person (or `kubectl get`, or `kubectl wait --for=condition=...`) reads why
the controller did what it did: the state, per-slice alpha with its interval and sample size,
canary and baseline P99 with the bucket bracket, the last decision and its reason, the
conditions (Ready, SourceHealthy, SpecValid, RolloutComplete, ...), a short transition history, and
the serialised core Memory so a restarted controller resumes where it was. Times are RFC 3339
strings as Kubernetes writes them. Callers import from here, as one vocabulary.
"""

from alphagate.kube.status.commands import (
    ANN_COMMAND,
    ANN_COMMAND_BY,
    ANN_COMMAND_FORCE,
    ANN_COMMAND_ID,
    COMMANDS,
    command_forced,
    pending_command,
)
from alphagate.kube.status.evidence import (
    LatencyEvidence,
    SliceEvidence,
    latency_evidence,
    p99_ratio,
    slice_evidence,
    summary,
    why,
)
from alphagate.kube.status.fields import (
    Condition,
    ConditionType,
    parse_time,
    rfc3339,
    rounded,
    set_condition,
)
from alphagate.kube.status.resource import (
    HISTORY_LIMIT,
    CanaryStatus,
    CommandRecord,
    Decision,
    HistoryEntry,
    UnitStatus,
    decode_memories,
    encode_memories,
    history_entries,
    parse_status,
)
from alphagate.kube.status.writer import StatusWriter

__all__ = [
    "ANN_COMMAND",
    "ANN_COMMAND_BY",
    "ANN_COMMAND_FORCE",
    "ANN_COMMAND_ID",
    "COMMANDS",
    "HISTORY_LIMIT",
    "CanaryStatus",
    "CommandRecord",
    "Condition",
    "ConditionType",
    "Decision",
    "HistoryEntry",
    "LatencyEvidence",
    "SliceEvidence",
    "StatusWriter",
    "UnitStatus",
    "command_forced",
    "decode_memories",
    "encode_memories",
    "history_entries",
    "latency_evidence",
    "p99_ratio",
    "parse_status",
    "parse_time",
    "pending_command",
    "rfc3339",
    "rounded",
    "set_condition",
    "slice_evidence",
    "summary",
    "why",
]

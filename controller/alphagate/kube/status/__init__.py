"""The SpeculativeCanary status: its pydantic model (half of the CRD schema) and its writer.

Status is where a person (or `kubectl get`, or `kubectl wait --for=condition=...`) reads why
the controller did what it did: the state, per-slice alpha with its interval and sample size,
canary and baseline P99 with the bucket bracket, the last decision and its reason, the
conditions (Ready, SourceHealthy, SpecValid, RolloutComplete, ...), a short transition history, and
the serialised core Memory so a restarted controller resumes where it was. Times are RFC 3339
strings as Kubernetes writes them. Callers import from the module that defines what they
use: `fields` (times, conditions), `evidence` (what one evaluation shows), `resource` (the
status and the Memory it keeps), `commands` (the manual-command annotations), `writer` (the
status subresource).
"""

"""The SpeculativeCanary resource: the spec assembled from its parts, and `parse`, whose errors
name the file and the field path a user wrote."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    AliasGenerator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from alphagate import specconfig
from alphagate.config.base import StrictModel
from alphagate.config.draft import DraftLength, OutputLength
from alphagate.config.enums import Aggregation, Mode
from alphagate.config.judging import AcceptanceGate, ErrorPolicy, LatencyGuard, Staleness, Timing
from alphagate.config.source import SourceSettings
from alphagate.config.targets import Promotion, Slice, WorkloadRef
from alphagate.errors import PolicyError


class SpeculativeCanarySpec(StrictModel):
    """What the canary is, how alpha and latency are judged, and where metrics come from."""

    target: WorkloadRef = Field(
        description=(
            "The canary Deployment (or Argo Rollout, kind: Rollout; or KServe InferenceService, "
            "kind: InferenceService) whose --speculative-config alphagate turns on and off "
            "(per-slice Deployments may override it)."
        ),
    )
    baseline: WorkloadRef = Field(
        description="The baseline Deployment (speculation off), the latency reference."
    )
    speculative_config: dict[str, Any] = Field(
        description=(
            "The JSON object given to vLLM's --speculative-config when speculation is on; needs "
            "num_speculative_tokens (an integer of at least 1)."
        ),
    )
    mode: Mode = Field(
        default=Mode.ENFORCE,
        description="enforce patches the canary; dryRun decides and records but never patches.",
    )
    aggregation: Aggregation = Field(
        default=Aggregation.COMBINED,
        description=(
            "combined: one decision on the pooled alpha of all slices (with per-slice floors); "
            "perSlice: each slice has its own canary Deployment and flips alone."
        ),
    )
    slices: list[Slice] = Field(
        min_length=1,
        max_length=64,
        description=(
            "The traffic slices: routable pools with their own canary and baseline pods (names "
            "unique)."
        ),
    )
    acceptance: AcceptanceGate = Field(
        default=AcceptanceGate(), description="The gate on alpha, with hysteresis."
    )
    latency: LatencyGuard = Field(
        default=LatencyGuard(), description="The latency guard, canary against baseline."
    )
    timing: Timing = Field(
        default=Timing(),
        description=(
            "Evaluation interval, window, warm-up, dwell, probe length, flip budget and cooldown."
        ),
    )
    errors: ErrorPolicy = Field(
        default=ErrorPolicy(), description="What repeated source errors do."
    )
    staleness: Staleness = Field(
        default=Staleness(),
        description=(
            "How long speculation may run without a conclusive verdict before an alert (and, "
            "opt-in, a rollback)."
        ),
    )
    source: SourceSettings = Field(description="Where the controller reads vLLM's metrics.")
    promotion: Promotion = Field(
        default=Promotion(), description="Optional copy of a confirmed config to the stable fleet."
    )
    paused: bool = Field(
        default=False,
        description="Hold the current state and patch nothing until set back to false.",
    )
    outputs: OutputLength = Field(
        default=OutputLength(), description="When outputs are too short for speculation to pay."
    )
    draft_length: DraftLength = Field(
        default=DraftLength(),
        description=(
            "The draft length that pays: reported in status, metrics and evaluate; changed by "
            "the controller only when tuning.enabled."
        ),
    )

    @field_validator("speculative_config")
    @classmethod
    def _speculative_config_valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        k = value.get("num_speculative_tokens")
        if not isinstance(k, int) or isinstance(k, bool):
            raise ValueError("num_speculative_tokens is required and must be an integer")
        if k < 1:
            raise ValueError(f"num_speculative_tokens must be at least 1, got {k}")
        if not isinstance(value.get("method", "ngram"), str):
            raise ValueError("method must be a string")
        # What vLLM itself would refuse never reaches a pod (the table in specconfig).
        refused = specconfig.errors(value)
        if refused:
            raise ValueError("; ".join(p.message for p in refused))
        return value

    @model_validator(mode="after")
    def _slices_consistent(self) -> SpeculativeCanarySpec:
        names = [s.name for s in self.slices]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"slice names must be unique; repeated: {', '.join(dupes)}")
        if self.aggregation is Aggregation.PER_SLICE:
            missing = [s.name for s in self.slices if s.deployment is None]
            if missing:
                raise ValueError(
                    f"aggregation perSlice needs a deployment on every slice; missing on: "
                    f"{', '.join(missing)}"
                )
            # Two slices flipping one Deployment alone would flip it back and forth.
            owners: dict[tuple[str, str], list[str]] = {}
            for s in self.slices:
                if s.deployment is not None:
                    owners.setdefault(s.deployment.key, []).append(s.name)
            shared = [(key, names) for key, names in owners.items() if len(names) > 1]
            if shared:
                raise ValueError(
                    "aggregation perSlice needs its own deployment on every slice; "
                    + "; ".join(f"{k} {n} named by {', '.join(v)}" for (k, n), v in shared)
                )
        return self

    @model_validator(mode="after")
    def _baseline_is_not_flipped(self) -> SpeculativeCanarySpec:
        """The baseline is the reference speculation is judged against: flipping it would
        compare the canary with itself (and restart the baseline's pods)."""
        if self.target.key == self.baseline.key:
            raise ValueError(
                f"target and baseline are the same {self.target.kind.value} "
                f"{self.target.name!r}: the baseline is the reference speculation is judged "
                "against, never flipped"
            )
        baseline = self.baseline.key
        flipped = [s.name for s in self.slices if s.deployment and s.deployment.key == baseline]
        if flipped:
            raise ValueError(
                f"slice {', '.join(flipped)} names the baseline {self.baseline.kind.value} "
                f"{self.baseline.name!r} as its deployment: the baseline is never flipped"
            )
        return self

    @model_validator(mode="after")
    def _tuning_holds_k(self) -> SpeculativeCanarySpec:
        t, k = self.draft_length.tuning, self.k
        if t.min_k > k or (t.max_k is not None and t.max_k < k):
            raise ValueError(
                f"draftLength.tuning: num_speculative_tokens {k} must lie within minK "
                f"{t.min_k} and maxK {t.max_k if t.max_k is not None else k}"
            )
        if t.enabled:
            # Every K the controller may set must be a config vLLM accepts (synthetic rejection
            # settings, for one, are sized by K).
            for other in range(t.min_k, (t.max_k or k) + 1):
                refused = specconfig.errors(
                    {**self.speculative_config, "num_speculative_tokens": other}
                )
                if refused:
                    raise ValueError(
                        f"draftLength.tuning: with num_speculative_tokens {other} (within minK-"
                        f"maxK) vLLM would refuse the config: {refused[0].message}"
                    )
        return self

    def canary_deployments(self, slice_name: str | None = None) -> list[WorkloadRef]:
        """The Deployments one decision flips: a slice's own (perSlice) or all (combined)."""
        if slice_name is not None:
            for s in self.slices:
                if s.name == slice_name:
                    return [s.deployment or self.target]
            raise KeyError(slice_name)
        seen: dict[tuple[str, str], WorkloadRef] = {}
        for s in self.slices:
            ref = s.deployment or self.target
            seen.setdefault(ref.key, ref)
        return list(seen.values()) or [self.target]

    @property
    def k(self) -> int:
        return int(self.speculative_config["num_speculative_tokens"])


class ObjectMeta(StrictModel):
    """Kubernetes ObjectMeta: server-side fields are accepted and ignored; anything else (a
    typo such as `namepsace:`, which would land the resource in "default") is refused, by the
    file check and the controller alike."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    namespace: str = Field(
        default="default", max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )
    labels: dict[str, str] = Field(default={})
    annotations: dict[str, str] = Field(default={})
    generate_name: Any = Field(default=None, alias="generateName")
    uid: Any = None
    resource_version: Any = Field(default=None, alias="resourceVersion")
    generation: Any = None
    creation_timestamp: Any = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: Any = Field(default=None, alias="deletionTimestamp")
    deletion_grace_period_seconds: Any = Field(default=None, alias="deletionGracePeriodSeconds")
    owner_references: Any = Field(default=None, alias="ownerReferences")
    finalizers: Any = None
    managed_fields: Any = Field(default=None, alias="managedFields")
    self_link: Any = Field(default=None, alias="selfLink")


class SpeculativeCanary(StrictModel):
    """One resource: a canary whose speculative config alphagate turns on and off."""

    model_config = ConfigDict(
        extra="ignore",  # status and server-side metadata are read elsewhere
        frozen=True,
        populate_by_name=True,
        alias_generator=AliasGenerator(alias=to_camel),
    )

    api_version: Literal["alphagate.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SpeculativeCanary"]
    metadata: ObjectMeta
    spec: SpeculativeCanarySpec


def _field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic loc -> `spec.slices[1].canary`; aliases are used so paths match the YAML."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def message(error: Any) -> str:
    """A pydantic error's text for people (an unknown metadata key is most likely a typo)."""
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "extra_forbidden" and loc[:1] == ("metadata",):
        return "not a Kubernetes ObjectMeta field (a typo?)"
    return str(error.get("msg", "")).removeprefix("Value error, ")


def parse(obj: Any, *, where: str = "") -> SpeculativeCanary:
    """Validate one resource or raise PolicyError naming `where` and the first offending field;
    the message lists every problem so one run shows everything that is wrong."""
    if not isinstance(obj, dict):
        raise PolicyError(f"expected a mapping, got {type(obj).__name__}", where=where)
    try:
        return SpeculativeCanary.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = _field_path(tuple(errors[0]["loc"])) if errors else ""
        lines = [f"{_field_path(tuple(e['loc'])) or '<root>'}: {message(e)}" for e in errors]
        raise PolicyError("; ".join(lines), where=where, path=first) from exc


def dump(canary: SpeculativeCanary) -> dict[str, Any]:
    """camelCase, no Nones."""
    return canary.model_dump(mode="json", by_alias=True, exclude_none=True)

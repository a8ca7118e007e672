"""What a policy points at: the workloads it flips, the pod pools it reads, promotion's target."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from alphagate.config import labels
from alphagate.config.base import PositiveSeconds, Ratio, StrictModel
from alphagate.config.enums import WorkloadKind


class WorkloadRef(StrictModel):
    """A Deployment (or an Argo Rollout, or a KServe InferenceService) and the vLLM container
    in its pod template."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description=(
            "Name of the Deployment, Rollout or InferenceService, in the SpeculativeCanary's "
            "namespace."
        ),
    )
    container: str = Field(
        default="vllm",
        min_length=1,
        description=(
            "Name of the vLLM container in that object's pod template whose args carry "
            "--speculative-config. An InferenceService's: the named container of "
            "spec.predictor.containers; with spec.predictor.model, the model's container "
            "(KServe names it kserve-container; vllm, the default, means it too)."
        ),
    )
    kind: WorkloadKind = Field(
        default=WorkloadKind.DEPLOYMENT,
        description=(
            "Deployment (apps/v1, the default), Rollout (argoproj.io/v1alpha1, an Argo Rollout "
            "with its own spec.template; one that uses workloadRef is refused) or "
            "InferenceService (serving.kserve.io/v1beta1, raw deployment mode; serverless mode "
            "is refused). The flag is edited and recorded the same way on each; a Rollout counts "
            "as rolled out when Argo reports it Healthy and fully promoted, an InferenceService "
            "when KServe reports it Ready and its predictor Deployment runs the edit."
        ),
    )

    @property
    def key(self) -> tuple[str, str]:
        """(kind, name): two objects of different kinds may share a name."""
        return (self.kind.value, self.name)


DeploymentRef = WorkloadRef
"""The name this reference had when only Deployments could be targets."""


class PodSelector(StrictModel):
    """Labels that pick a pool's pods: pod labels for scraping, series labels in Prometheus."""

    match_labels: dict[str, str] = Field(
        min_length=1,
        description=(
            "Labels every pod of the pool carries. A podScrape source selects pods by them; a "
            "prometheus source adds them as series matchers (the PodMonitor copies pod labels onto"
            " series)."
        ),
    )

    @field_validator("match_labels")
    @classmethod
    def _labels_valid(cls, value: dict[str, str]) -> dict[str, str]:
        found = labels.problems(value)
        if found:
            raise ValueError("; ".join(found))
        return value


class Slice(StrictModel):
    """A traffic slice: a routable pool with its own canary and baseline pods."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$",
        description=(
            "Slice name (lowercase, digits, - and _), unique in the resource; used as a label "
            "value in metrics."
        ),
    )
    canary: PodSelector = Field(
        description="Selects this slice's canary pods (speculation on or being probed)."
    )
    baseline: PodSelector = Field(
        description="Selects this slice's baseline pods (speculation off), the latency reference."
    )
    deployment: WorkloadRef | None = Field(
        default=None,
        description=(
            "The canary Deployment serving this slice. Required on every slice with aggregation "
            "perSlice (each flips alone); optional with combined (every distinct slice Deployment,"
            " or spec.target when none, flips together)."
        ),
    )
    min_alpha: Ratio | None = Field(
        default=None,
        description=(
            "combined aggregation only: a per-slice floor; a slice whose alpha upper bound is "
            "below it vetoes enabling even when the pooled alpha clears the gate."
        ),
    )


class Promotion(StrictModel):
    """Copy the confirmed config to the stable fleet after a bake time in On."""

    enabled: bool = Field(
        default=False,
        description=(
            "Copy the confirmed speculative config to the stable fleet after bakeSeconds in On. "
            "A manual promote needs it too (or `alphagate promote --force`)."
        ),
    )
    bake_seconds: PositiveSeconds = Field(
        default=24 * 3600.0, description="Seconds in On before promotion."
    )
    stable: WorkloadRef | None = Field(
        default=None,
        description="The stable Deployment to copy the config to; required when enabled.",
    )

    @model_validator(mode="after")
    def _enabled_needs_target(self) -> Promotion:
        if self.enabled and self.stable is None:
            raise ValueError("promotion enabled needs `stable` (the Deployment to copy to)")
        return self

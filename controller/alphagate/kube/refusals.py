"""Why a write to a canary's workload is refused, and how the refusal is told.

A config vLLM would reject never reaches a pod (`refuse_rejected`, from `specconfig`); a
workload another canary owns is not flipped (`claimed_message`); a failed write leaves the
Warning Event of its kind (`warning_reason`). Used by the actuator and the shell's act step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alphagate import specconfig
from alphagate.errors import (
    ClaimedError,
    ForbiddenError,
    KubeError,
    NotFoundError,
    OwnerConflictError,
)
from alphagate.kube import args as argsmod
from alphagate.kube.events import Reason
from alphagate.kube.workload import ANN_OWNER, WorkloadState


class RejectedConfigError(argsmod.ArgsError):
    """Never sent to a pod."""


def refuse_rejected(dep: WorkloadState, config: Mapping[str, Any] | None) -> None:
    """Raise RejectedConfigError when vLLM (at the image's version, with the container's chunked
    prefill setting) would refuse `config`: better a clear error than a crash-looping canary."""
    if config is None:
        return
    found = specconfig.errors(
        config,
        vllm_version=dep.image,
        chunked_prefill=specconfig.chunked_prefill_from_args(dep.args),
    )
    if found:
        said = "; ".join(p.message for p in found)
        raise RejectedConfigError(
            f"{dep.what}: not applying --speculative-config {argsmod.render(config)}: "
            f"vLLM ({dep.image or 'image without a version tag'}) would refuse it: {said}"
        )


# The Warning Event a failed write leaves, most specific error first; anything else is PatchFailed.
_WARNING_REASONS: tuple[tuple[type[KubeError], Reason], ...] = (
    (ClaimedError, Reason.TARGET_CLAIMED),
    (ForbiddenError, Reason.FORBIDDEN),
    (NotFoundError, Reason.NOT_FOUND),
    (argsmod.ArgsError, Reason.ARGS_UNEDITABLE),
    (OwnerConflictError, Reason.OWNER_REVERTED),
)


def warning_reason(err: KubeError) -> Reason:
    return next((r for kind, r in _WARNING_REASONS if isinstance(err, kind)), Reason.PATCH_FAILED)


def claimed_message(dep: WorkloadState, wanted_by: str) -> str:
    return (
        f"{dep.what} belongs to SpeculativeCanary {dep.owner} (annotation {ANN_OWNER}); "
        f"{wanted_by} will not flip it: two canaries on one Deployment would flip it back and "
        "forth. Point this canary at its own Deployment, or delete the other canary"
    )


def config_text(config: Mapping[str, Any] | None) -> str:
    return "off" if config is None else argsmod.render(config)

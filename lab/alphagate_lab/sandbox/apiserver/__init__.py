"""A Kubernetes API server test double on 127.0.0.1: stateful, over real HTTP.

No real kube-apiserver can run here, so tests and the demo talk to this one through the real
`kubernetes` client. It keeps the semantics the controller depends on: a global
resourceVersion with 409 Conflict on a stale write, 404/403/422/500 as `Status` objects,
status subresources (writes to `/status` change only status, writes to the main resource ignore
it, `metadata.generation` bumps when the spec changes), list with label and field selectors,
watch streams (newline-delimited JSON, chunked) resumable from a resourceVersion, JSON patch
(with `test`), merge patch and enough strategic merge patch for containers (refused on custom
resources, as a real server does). On top: an RBAC allow-list, scripted faults, a request log,
a pluggable "kubelet" that moves Deployment rollout status along when the pod template changes,
a stand-in for Argo Rollouts that promotes an Argo `Rollout` (served as a custom resource), and
one for KServe that renders an `InferenceService`'s predictor Deployment (raw mode).

It is a double, not an emulator: admission, defaulting, garbage collection and most
validation are absent on purpose. JSON patch goes through the `jsonpatch` library; merge and
strategic merge patch are the double's own (no library keeps Kubernetes' merge keys).

    resources    resource types served, the loopback host, errors as Status objects
    access       the RBAC allow-list, scripted faults, the request record
    reviews      TokenReview and SubjectAccessReview from a table of people (`Users`)
    selectors    label and field selectors
    patches      JSON, merge and strategic merge patch
    validation   the server-side validation the controller's error paths need
    writes       what a create, PUT or PATCH makes of an object (409, 415, generation)
    watch        the watch history and a watch's event stream (410 when too old)
    store        objects, resourceVersions, the REST verbs
    deployments  a minimal Deployment, the one Deployment-status builder, the default kubelet
    argo_rollouts  a minimal Argo Rollout and the stand-in for the Argo Rollouts controller
    kserve       a minimal InferenceService and the stand-in for KServe's controller (raw mode)
    routes       path to resource, the RBAC verb, discovery documents
    requestline  a request's head read without the `email` parser (HTTP/1.x)
    handler      the HTTP handler: routing, faults, RBAC, JSON and watch streams
    server       ApiServer: the store served on 127.0.0.1
"""

from alphagate_lab.sandbox.apiserver.access import Fault, Faults, Rbac, RecordedRequest
from alphagate_lab.sandbox.apiserver.argo_rollouts import (
    ArgoRolloutCompleter,
    ArgoRolloutTemplate,
)
from alphagate_lab.sandbox.apiserver.deployments import (
    DeploymentTemplate,
    Kubelet,
    RolloutCompleter,
    deployment_status,
)
from alphagate_lab.sandbox.apiserver.kserve import InferenceServiceTemplate, KServeReconciler
from alphagate_lab.sandbox.apiserver.patches import (
    PATCHERS,
    STRATEGIC_MERGE_KEYS,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from alphagate_lab.sandbox.apiserver.resources import (
    DEFAULT_TYPES,
    HOST,
    JSON,
    ApiError,
    ResourceType,
    now_rfc3339,
)
from alphagate_lab.sandbox.apiserver.reviews import Users
from alphagate_lab.sandbox.apiserver.selectors import field_selector, label_selector
from alphagate_lab.sandbox.apiserver.server import ApiServer

__all__ = [
    "DEFAULT_TYPES",
    "HOST",
    "JSON",
    "PATCHERS",
    "STRATEGIC_MERGE_KEYS",
    "ApiError",
    "ApiServer",
    "ArgoRolloutCompleter",
    "ArgoRolloutTemplate",
    "DeploymentTemplate",
    "Fault",
    "Faults",
    "InferenceServiceTemplate",
    "KServeReconciler",
    "Kubelet",
    "Rbac",
    "RecordedRequest",
    "ResourceType",
    "RolloutCompleter",
    "Users",
    "deployment_status",
    "field_selector",
    "json_patch",
    "label_selector",
    "merge_patch",
    "now_rfc3339",
    "strategic_merge_patch",
]

"""The SpeculativeCanary CRD, generated from the pydantic spec and status models.

The models are the single source of truth; this module turns their JSON Schema into a
Kubernetes *structural* OpenAPI v3 schema: `$ref`s inlined, `Optional[X]` as `nullable`,
free-form maps as `x-kubernetes-preserve-unknown-fields`, JSON-Schema-2020 exclusive bounds
in the OpenAPI 3.0 boolean form, no `additionalProperties: false` (the API server prunes
unknown fields instead), only scalar defaults. `deploy/crd/speculativecanaries.yaml` is this
module's output; a test fails when the two drift.

The models' cross-field validators are repeated as CEL `x-kubernetes-validations`
(`VALIDATIONS`), so `kubectl apply` refuses a spec that can never work instead of the controller
finding out later.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import yaml

from alphagate import specconfig
from alphagate.config import GROUP, KIND, PLURAL, VERSION, SpeculativeCanary, SpeculativeCanarySpec
from alphagate.kube.status.resource import CanaryStatus

CRD_NAME: Final = f"{PLURAL}.{GROUP}"
SHORT_NAMES: Final = ["speccanary"]
CATEGORIES: Final = ["alphagate"]
DEPLOY_PATH: Final = "deploy/crd/speculativecanaries.yaml"

PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {"name": "State", "type": "string", "jsonPath": ".status.state"},
    {
        "name": "Alpha",
        "type": "number",
        "jsonPath": ".status.combinedAlpha",
        "description": "Traffic-weighted acceptance rate in the last window",
    },
    {
        "name": "P99 Ratio",
        "type": "number",
        "jsonPath": ".status.p99Ratio",
        "description": "Canary P99 over baseline P99 (worst latency check)",
    },
    {"name": "Last Decision", "type": "string", "jsonPath": ".status.lastDecision.summary"},
    {"name": "Mode", "type": "string", "jsonPath": ".spec.mode", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

# CEL rules, by schema path, mirroring the pydantic validators in config/. The API server
# applies defaults before it evaluates them, so defaulted fields are present (`apply_defaults`
# does the same for tests). `fieldPath` points kubectl's error at the field to fix.
VALIDATIONS: Final[dict[str, list[dict[str, str]]]] = {
    "spec": [
        {
            "rule": "'num_speculative_tokens' in self.speculativeConfig"
            " && type(self.speculativeConfig.num_speculative_tokens) == int"
            " && self.speculativeConfig.num_speculative_tokens >= 1",
            "message": "speculativeConfig needs num_speculative_tokens, an integer of at least 1",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": "!('method' in self.speculativeConfig)"
            " || type(self.speculativeConfig.method) == string",
            "message": "speculativeConfig.method must be a string",
            "fieldPath": ".speculativeConfig",
        },
        # what vLLM itself would refuse (alphagate.specconfig, from vLLM's own code)
        *specconfig.cel_rules(),
        {
            "rule": "!has(self.draftLength) || !has(self.draftLength.tuning)"
            " || type(self.speculativeConfig.num_speculative_tokens) != int"
            " || (self.draftLength.tuning.minK <= self.speculativeConfig.num_speculative_tokens"
            " && (!has(self.draftLength.tuning.maxK)"
            " || self.draftLength.tuning.maxK >= self.speculativeConfig.num_speculative_tokens))",
            "message": "draftLength.tuning: num_speculative_tokens must lie within minK and maxK",
            "fieldPath": ".draftLength",
        },
        {
            "rule": "self.slices.all(a, self.slices.exists_one(b, b.name == a.name))",
            "message": "slice names must be unique",
            "fieldPath": ".slices",
        },
        {
            "rule": "self.aggregation != 'perSlice' || self.slices.all(s, has(s.deployment))",
            "message": "aggregation perSlice needs a deployment on every slice",
            "fieldPath": ".slices",
        },
        {
            "rule": "self.aggregation != 'perSlice' || self.slices.all(a, !has(a.deployment)"
            " || self.slices.exists_one(b, has(b.deployment)"
            " && b.deployment.name == a.deployment.name"
            " && (has(b.deployment.kind) ? b.deployment.kind : 'Deployment')"
            " == (has(a.deployment.kind) ? a.deployment.kind : 'Deployment')))",
            "message": "aggregation perSlice needs its own deployment on every slice",
            "fieldPath": ".slices",
        },
        {
            "rule": "self.target.name != self.baseline.name"
            " || (has(self.target.kind) ? self.target.kind : 'Deployment')"
            " != (has(self.baseline.kind) ? self.baseline.kind : 'Deployment')",
            "message": "target and baseline are the same workload: the baseline is the reference"
            " speculation is judged against, never flipped",
            "fieldPath": ".baseline",
        },
        {
            "rule": "self.slices.all(s, !has(s.deployment)"
            " || s.deployment.name != self.baseline.name"
            " || (has(s.deployment.kind) ? s.deployment.kind : 'Deployment')"
            " != (has(self.baseline.kind) ? self.baseline.kind : 'Deployment'))",
            "message": "a slice names the baseline as its deployment: the baseline is never"
            " flipped",
            "fieldPath": ".slices",
        },
    ],
    "spec.acceptance": [
        {
            "rule": "self.enableAbove >= self.disableBelow",
            "message": "enableAbove must not be below disableBelow: the hysteresis band would be"
            " inverted",
            "fieldPath": ".enableAbove",
        }
    ],
    "spec.latency": [
        {
            "rule": "self.metric != 'perStepAbsolute' || has(self.maxStepSeconds)",
            "message": "metric perStepAbsolute needs maxStepSeconds",
            "fieldPath": ".maxStepSeconds",
        }
    ],
    "spec.timing": [
        {
            "rule": "self.windowSeconds >= self.intervalSeconds",
            "message": "windowSeconds must not be shorter than intervalSeconds",
            "fieldPath": ".windowSeconds",
        }
    ],
    "spec.timing.cooldown": [
        {
            "rule": "self.maxSeconds >= self.initialSeconds",
            "message": "maxSeconds must not be below initialSeconds",
            "fieldPath": ".maxSeconds",
        }
    ],
    "spec.source": [
        {
            "rule": "self.kind != 'prometheus' || has(self.prometheus)",
            "message": "kind prometheus needs a `prometheus` block naming the endpoint to query",
            "fieldPath": ".prometheus",
        }
    ],
    "spec.draftLength.tuning": [
        {
            "rule": "!has(self.maxK) || self.maxK >= self.minK",
            "message": "draftLength.tuning: maxK must not be below minK",
            "fieldPath": ".maxK",
        }
    ],
    "spec.promotion": [
        {
            "rule": "!self.enabled || has(self.stable)",
            "message": "promotion enabled needs `stable` (the Deployment to copy to)",
            "fieldPath": ".stable",
        }
    ],
}

_DROP_KEYS: Final = frozenset({"title", "$defs", "definitions", "$schema"})


class SchemaError(ValueError):
    """The models use a construct that has no structural-schema form."""


def _resolve(node: Any, defs: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    if isinstance(node, list):
        return [_resolve(n, defs, seen) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            raise SchemaError(f"recursive model {name} cannot be inlined")
        target = copy.deepcopy(defs[name])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        merged = {**_resolve(target, defs, (*seen, name)), **_resolve(extra, defs, seen)}
        return merged
    return {k: _resolve(v, defs, seen) for k, v in node.items()}


def _structural(node: Any, path: str) -> Any:
    if not isinstance(node, dict):
        return node
    node = {k: v for k, v in node.items() if k not in _DROP_KEYS}
    for key in ("anyOf", "oneOf"):
        if key in node:
            branches = node.pop(key)
            non_null = [b for b in branches if b.get("type") != "null"]
            if len(non_null) != 1:
                raise SchemaError(f"{path}: a union of several types has no structural form")
            inner = dict(non_null[0])
            if len(non_null) < len(branches):
                inner["nullable"] = True
            node = {**inner, **node}
    if "allOf" in node:
        parts = node.pop("allOf")
        for part in parts:
            node = {**part, **node}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node and not isinstance(node[bound], bool):
            node[plain] = node.pop(bound)
            node[bound] = True
    if "prefixItems" in node:
        raise SchemaError(f"{path}: fixed-length tuples have no structural form")
    if "default" in node and (node["default"] is None or isinstance(node["default"], dict | list)):
        del node["default"]
    if node.get("type") == "object":
        props = node.get("properties")
        addl = node.get("additionalProperties")
        if addl is False or addl is None:
            node.pop("additionalProperties", None)
            if not props:
                node["x-kubernetes-preserve-unknown-fields"] = True
        elif addl is True or addl == {}:
            node.pop("additionalProperties")
            node["x-kubernetes-preserve-unknown-fields"] = True
        else:
            node["additionalProperties"] = _structural(addl, f"{path}.*")
        if props:
            node["properties"] = {k: _structural(v, f"{path}.{k}") for k, v in props.items()}
    if "items" in node:
        node["items"] = _structural(node["items"], f"{path}[]")
    if "type" not in node and "x-kubernetes-preserve-unknown-fields" not in node:
        raise SchemaError(f"{path}: every node needs a type in a structural schema")
    return node


def model_schema(model: type[Any], path: str) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    resolved = _resolve({k: v for k, v in raw.items() if k != "$defs"}, defs)
    out: dict[str, Any] = _structural(resolved, path)
    return out


def node_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["properties"][part]
    return node


def with_validations(schema: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    for path, rules in VALIDATIONS.items():
        node_at(out, path)["x-kubernetes-validations"] = copy.deepcopy(rules)
    return out


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """`obj` with the schema's defaults filled in, as the API server does before validation:
    a missing property gets its default when its parent object is present."""
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in obj]
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    for name, prop in (schema.get("properties") or {}).items():
        if name not in out and "default" in prop:
            out[name] = copy.deepcopy(prop["default"])
        if name in out:
            out[name] = apply_defaults(prop, out[name])
    return out


def openapi_schema() -> dict[str, Any]:
    return with_validations(_plain_schema())


def _plain_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": (SpeculativeCanary.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "alphagate.io/v1alpha1.",
            },
            "kind": {"type": "string", "description": "SpeculativeCanary."},
            "metadata": {"type": "object", "description": "Standard object metadata."},
            "spec": model_schema(SpeculativeCanarySpec, "spec"),
            "status": model_schema(CanaryStatus, "status"),
        },
    }


def build_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {
                "app.kubernetes.io/name": "alphagate",
                "app.kubernetes.io/part-of": "alphagate",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


HEADER: Final = (
    "# Generated by `alphagate crd` from the pydantic models in controller/alphagate/config/\n"
    "# and controller/alphagate/kube/status/. Do not edit: regenerate with\n"
    "#   alphagate crd > deploy/crd/speculativecanaries.yaml\n"
)


def render_crd() -> str:
    body = yaml.safe_dump(build_crd(), sort_keys=False, default_flow_style=False, width=100)
    return HEADER + "---\n" + body

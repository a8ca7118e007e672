"""Server-side validation the controller's error paths need: a Deployment's required fields,
and a custom resource's spec against its installed CRD's schema (422 like the real server)."""

from __future__ import annotations

from typing import Any

from alphagate_lab.sandbox.apiserver.resources import ApiError, ResourceType


def validate(rtype: ResourceType, obj: dict[str, Any], crd: dict[str, Any] | None) -> None:
    """The little server-side validation the controller's error paths need (422); `crd`: the
    installed CRD's openAPIV3Schema for a custom resource, if any."""
    if rtype.key == "deployments.apps":
        spec = obj.get("spec") or {}
        problems = []
        if not spec.get("selector"):
            problems.append("spec.selector: Required value")
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers")
        if not containers:
            problems.append("spec.template.spec.containers: Required value")
        else:
            for i, c in enumerate(containers):
                for fld in ("args", "command"):
                    vals = c.get(fld)
                    if vals is not None and not all(isinstance(a, str) for a in vals):
                        problems.append(
                            f"spec.template.spec.containers[{i}].{fld}: must be strings"
                        )
        if problems:
            name = obj.get("metadata", {}).get("name", "")
            raise ApiError(422, f'Deployment.apps "{name}" is invalid: ' + "; ".join(problems))
    if crd is not None:
        validate_against(crd, rtype, obj)


def validate_against(schema: dict[str, Any], rtype: ResourceType, obj: dict[str, Any]) -> None:
    """With the CRD installed, reject what its schema rejects (spec only), like the real
    server does. Needs `jsonschema`; without it the check is skipped."""
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - jsonschema ships with the dev tools
        return
    spec_schema = (schema.get("properties") or {}).get("spec")
    if spec_schema is None or "spec" not in obj:
        return
    errors = sorted(
        jsonschema.Draft4Validator(spec_schema).iter_errors(obj["spec"]),
        key=lambda e: list(e.absolute_path),
    )
    if errors:
        name = obj.get("metadata", {}).get("name", "")
        details = "; ".join(
            "spec"
            + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
            + f": {e.message}"
            for e in errors[:10]
        )
        raise ApiError(422, f'{rtype.kind}.{rtype.group} "{name}" is invalid: {details}')

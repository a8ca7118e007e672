"""The three patch types the controller and kubectl send: JSON patch (RFC 6902, through the
`jsonpatch` library), merge patch (RFC 7386) and enough strategic merge patch for containers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import jsonpatch
import jsonpointer

from alphagate_lab.sandbox.apiserver.resources import ApiError, json_copy


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 on a deep copy. A failed `test` or a path that is not there is 422, as
    kube-apiserver answers; a body that is not a list of operations is 400."""
    if not isinstance(ops, list):
        raise ApiError(400, "json patch body must be a list of operations")
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, f"json patch operation {i} needs `op` and `path`")
    try:
        return jsonpatch.apply_patch(doc, ops, in_place=False)
    except jsonpatch.InvalidJsonPatch as exc:
        raise ApiError(400, f"json patch: {exc}") from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise ApiError(422, f"json patch: {exc}") from exc


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, everything else replaces. ``doc`` is left as it
    was; the result shares the parts the patch leaves alone with it (the double never changes
    a stored object in place) and copies what it takes from the patch."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    out = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# Lists merged by key in strategic merge patch (the subset of Kubernetes' patchMergeKey tags
# the controller and the demo touch); every other list is replaced whole.
STRATEGIC_MERGE_KEYS: Final[dict[str, str]] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
}


def strategic_merge_patch(doc: Any, patch: Any) -> Any:
    """Strategic merge: like merge patch, but `containers` (and friends) merge by key and
    `$patch: delete|replace` directives work on list items and maps. Shares what the patch
    leaves alone with ``doc``, as `merge_patch` does."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    if patch.get("$patch") == "replace":
        return {k: json_copy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
        elif key in STRATEGIC_MERGE_KEYS and isinstance(value, list):
            out[key] = _merge_list(out.get(key) or [], value, STRATEGIC_MERGE_KEYS[key])
        elif isinstance(value, dict):
            merged = strategic_merge_patch(out.get(key), value)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = json_copy(value)
    return out


def _merge_list(orig: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = list(orig)  # items the patch leaves alone are shared, never changed
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(422, f"strategic merge patch: list item without merge key {key!r}")
        idx = next(
            (i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item[key]),
            None,
        )
        directive = item.get("$patch")
        if directive == "delete":
            if idx is not None:
                out.pop(idx)
        elif directive == "replace" or idx is None:
            out.append({k: json_copy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


PATCHERS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "application/json-patch+json": json_patch,
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}

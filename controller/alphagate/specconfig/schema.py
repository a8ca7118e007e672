"""The table as the CRD's schema: an OpenAPI fragment for `spec.speculativeConfig` and the CEL
rules admission can apply without iterating the free-form map."""

from __future__ import annotations

from typing import Any

from alphagate.specconfig.table import (
    ARRAY,
    CHOICES,
    FIELDS,
    INTEGER,
    MAX_K,
    METHODS,
    MTP_ALIASES,
    NUMBER,
    VLLM_VERSION_READ,
)


def crd_schema() -> dict[str, Any]:
    """Unknown keys stay (the controller refuses them with a message), so a typo is reported,
    not silently pruned."""
    props: dict[str, Any] = {}
    for key, (kind, low) in FIELDS.items():
        node: dict[str, Any] = {"type": kind}
        if kind == ARRAY:
            node["items"] = {"x-kubernetes-preserve-unknown-fields": True}
        if kind == "object":
            node["x-kubernetes-preserve-unknown-fields"] = True
        if low is not None and kind in (INTEGER, NUMBER):
            node["minimum"] = low
        if key in CHOICES:
            node["enum"] = list(CHOICES[key])
        props[key] = node
    props["num_speculative_tokens"]["maximum"] = MAX_K
    needs_model = sorted(m.name for m in METHODS.values() if m.needs_model)
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "required": ["num_speculative_tokens"],
        "properties": props,
        "x-kubernetes-validations": [
            {
                "rule": f"!has(self.method) || !(self.method in {needs_model}) || has(self.model)",
                "message": "this method needs `model` (the head or draft model); vLLM says: "
                "num_speculative_tokens was provided but without speculative model.",
            },
            {
                "rule": "!has(self.prompt_lookup_min) || !has(self.prompt_lookup_max) || "
                "self.prompt_lookup_min <= self.prompt_lookup_max",
                "message": "prompt_lookup_min must be <= prompt_lookup_max",
            },
            {
                "rule": "!has(self.tensor_parallel_size)",
                "message": "use draft_tensor_parallel_size, not tensor_parallel_size",
            },
        ],
    }


def cel_rules() -> list[dict[str, str]]:
    """What admission can refuse of this table without iterating the free-form map."""
    sc = "self.speculativeConfig"
    needs = sorted(m.name for m in METHODS.values() if m.needs_model)
    known = sorted({*METHODS, *MTP_ALIASES, "[ngram]"})
    k = f"{sc}.num_speculative_tokens"
    lo, hi = f"{sc}.prompt_lookup_min", f"{sc}.prompt_lookup_max"
    return [
        {
            "rule": f"'model' in {sc} || ('method' in {sc} && type({sc}.method) == string "
            f"&& !({sc}.method in {needs}))",
            "message": "this method needs `model` (the EAGLE head or draft model; no method "
            "means draft_model); vLLM says: num_speculative_tokens was provided but without "
            "speculative model.",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('method' in {sc}) || type({sc}.method) != string || {sc}.method in {known}",
            "message": f"method must be one vLLM {VLLM_VERSION_READ} knows (Input should be "
            "'ngram', 'medusa', 'mlp_speculator', 'draft_model', 'suffix', 'eagle', "
            "'eagle3', 'mtp', ...)",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('num_speculative_tokens' in {sc}) || type({k}) != int || {k} <= {MAX_K}",
            "message": f"alphagate refuses num_speculative_tokens above {MAX_K}: every position "
            "costs a verified token and nothing is accepted that deep",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('prompt_lookup_min' in {sc} && 'prompt_lookup_max' in {sc}) || "
            f"type({lo}) != int || type({hi}) != int || {lo} <= {hi}",
            "message": "prompt_lookup_min must be <= prompt_lookup_max",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('tensor_parallel_size' in {sc})",
            "message": "'tensor_parallel_size' is not a valid argument in the speculative_config. "
            "Please pass 'draft_tensor_parallel_size' instead.",
            "fieldPath": ".speculativeConfig",
        },
    ]

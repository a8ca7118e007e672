"""What a `matchLabels` entry may be: a Kubernetes label (the pod-scrape source turns the pool's
labels into a label selector, `k=v,k2=v2`) or a vLLM series label (`model_name`, `engine`:
matched on the series, never sent to the API).

A value with `,` would split the selector into more clauses than the policy wrote (`app:
"chat,tier"` selects `app=chat` and every pod with a `tier` label); `=`, `!` or a space change
its meaning too. So keys and values are checked as the API server checks labels, and a bad one
is refused with the key and the rule it breaks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from alphagate import vllm

_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN: Final = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
SERIES_LABELS: Final = frozenset((vllm.MODEL_NAME, vllm.ENGINE))
MAX_SERIES_VALUE: Final = 512


def key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes label key (`[prefix/]name`), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            f"key {key!r}: the prefix before '/' must be a DNS subdomain (lowercase letters, "
            "digits, '-' and '.', at most 253 characters)"
        )
    if not (len(name) <= 63 and _NAME.fullmatch(name)):
        return (
            f"key {key!r}: a label name is at most 63 characters, letters, digits, '-', '_' and "
            "'.', starting and ending with a letter or digit"
        )
    return None


def value_problem(key: str, value: str) -> str | None:
    """Why `value` cannot be matched on `key`, or None."""
    if key in SERIES_LABELS:  # a series label: any text Prometheus would carry (a model id)
        if len(value) > MAX_SERIES_VALUE or any(ord(c) < 32 or ord(c) == 127 for c in value):
            return (
                f"value of {key} {value[:40]!r}: at most {MAX_SERIES_VALUE} characters, no "
                "control characters"
            )
        return None
    if value and not (len(value) <= 63 and _NAME.fullmatch(value)):
        split = " (a ',' splits the label selector into another clause)" if "," in value else ""
        return (
            f"value of {key} {value[:80]!r}: a label value is empty or at most 63 characters, "
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit" + split
        )
    return None


def problems(labels: Mapping[str, str]) -> list[str]:
    out = []
    for key, value in labels.items():
        problem = key_problem(key) or value_problem(key, value)
        if problem is not None:
            out.append(problem)
    return out


__all__ = ["SERIES_LABELS", "key_problem", "problems", "value_problem"]

"""Label and field selectors, as list and watch requests carry them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from alphagate_lab.sandbox.apiserver.resources import ApiError

_SEL_SET = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_SEL_CMP = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s,()]*)\s*$")
_SEL_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p for p in parts if p.strip()]


def _label_test(part: str, text: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _SEL_SET.match(part):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _SEL_CMP.match(part):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _SEL_EXISTS.match(part):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise ApiError(400, f"unable to parse requirement: {part!r} in selector {text!r}")


def label_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """Parse a Kubernetes label selector (`a=b,c!=d,e in (f,g),!h`) into a predicate."""
    tests = [_label_test(part, text) for part in _split_selector(text or "")]
    return lambda labels: all(t(labels) for t in tests)


def _dig(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_selector(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """`metadata.name=x,involvedObject.kind=Pod`: equality and inequality on dotted paths."""
    tests: list[Callable[[Mapping[str, Any]], bool]] = []
    for part in _split_selector(text or ""):
        m = _SEL_CMP.match(part)
        if not m:
            raise ApiError(400, f"invalid field selector requirement {part!r}")
        path, op, value = m.group(1), m.group(2), m.group(3)

        def test(obj: Mapping[str, Any], p: str = path, o: str = op, v: str = value) -> bool:
            got = _dig(obj, p)
            got_s = "" if got is None else str(got)
            return got_s != v if o == "!=" else got_s == v

        tests.append(test)
    return lambda obj: all(t(obj) for t in tests)

"""YAML read with limits, into exactly what the Kubernetes API would hand the controller.

A policy file is untrusted text. PyYAML alone expands an alias bomb (a few lines that name
each other a billion times) into all its copies, recurses until Python's stack gives out on
deep nesting, and fails with a TypeError on a key that is a list. Here a file is composed into
nodes first and checked before anything is built: size in bytes, nesting depth, and the size
after alias expansion (each node counted as often as aliases repeat it); self-referencing
aliases and keys that are not plain values are refused with the line.

The data built is then the JSON model the API server stores (kubectl sends JSON): keys are
strings, timestamps strings, and numbers finite. So `alphagate policy check` and the
controller, which reads the same resource as JSON, judge the same document.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any, Final

import yaml

MAX_BYTES: Final = 1 << 20
"""A policy file larger than 1 MiB is not a policy file (the API server's limit is 1.5 MiB)."""
MAX_DEPTH: Final = 64
MAX_EXPANDED_NODES: Final = 100_000
"""Nodes after alias expansion, per document: a policy has a few hundred."""


class YamlLimitError(yaml.YAMLError):
    """A document breaks a limit or is not JSON-shaped; `line` is 1-based (0: unknown)."""

    def __init__(self, message: str, line: int = 0) -> None:
        self.problem = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


def _line(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None else 0


class _Composer(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting while composing (before recursion is deep)."""

    def __init__(self, stream: str, max_depth: int) -> None:
        super().__init__(stream)
        self._depth = 0
        self._max_depth = max_depth

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > self._max_depth:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise YamlLimitError(
                    f"nested deeper than {self._max_depth} levels",
                    event.start_mark.line + 1 if event.start_mark else 0,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Constructor(yaml.SafeLoader):
    """Builds data from checked nodes: duplicate or non-scalar keys are errors with the line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` merges; explicit keys may override what it brings
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlLimitError(
                    "a mapping key must be a plain value, not a list or a mapping",
                    _line(key_node),
                )
            key = _key(self.construct_object(key_node, deep=True))
            if key in seen:
                raise YamlLimitError(
                    f"duplicate key {key!r} (first on line {_line(seen[key])})", _line(key_node)
                )
            seen[key] = key_node
        self.flatten_mapping(node)
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            out[_key(self.construct_object(key_node, deep=True))] = self.construct_object(
                value_node, deep=deep
            )
        return out


def _key(value: Any) -> str:
    """A key as JSON has it: a string (`true`, not Python's `True`, which equals `1`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes of `root` with every alias expanded; raises past `limit` or on a cycle."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise YamlLimitError("an alias refers to a node that contains it", _line(node))
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        if total > limit:
            raise YamlLimitError(
                f"more than {limit} values once aliases are expanded (an alias bomb?)",
                _line(node),
            )
        sizes[key] = total
        return total

    return size(root)


def _json_model(value: Any, path: str = "") -> Any:
    """YAML data -> what the API server would store: str keys, ISO times, finite numbers."""
    if isinstance(value, dict):
        return {
            _key(k): _json_model(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_json_model(v, f"{path}[{i}]") for i, v in enumerate(value)]
    where = f"{path or 'the document'}: "
    if isinstance(value, float) and not math.isfinite(value):
        raise YamlLimitError(f"{where}{value} is not a number JSON (and so the API) can carry")
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes | set):
        raise YamlLimitError(f"{where}binary values and sets are not allowed")
    return value


@dataclass(frozen=True, slots=True)
class Document:
    data: Any
    node: yaml.Node | None


def load_all(
    text: str,
    *,
    max_bytes: int = MAX_BYTES,
) -> list[Document]:
    """Every document of `text`, within the limits. Raises yaml.YAMLError (YamlLimitError for
    a limit) with a mark or line; never RecursionError, TypeError or MemoryError."""
    if len(text.encode("utf-8", errors="replace")) > max_bytes:
        raise YamlLimitError(f"larger than {max_bytes} bytes")
    composer = _Composer(text, MAX_DEPTH)
    nodes: list[yaml.Node | None] = []
    try:
        while composer.check_node():
            nodes.append(composer.get_node())
    except RecursionError:  # pragma: no cover - the depth limit comes first
        raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        composer.dispose()
    out: list[Document] = []
    for node in nodes:
        if node is None:
            out.append(Document(None, None))
            continue
        _expanded_size(node, MAX_EXPANDED_NODES)
        constructor = _Constructor("")
        try:
            data = constructor.construct_document(node)
        except (TypeError, ValueError, OverflowError) as exc:
            raise YamlLimitError(f"cannot read a value: {exc}", _line(node)) from None
        finally:
            constructor.dispose()
        out.append(Document(_json_model(data), node))
    return out

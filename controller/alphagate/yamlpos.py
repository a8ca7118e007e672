"""Where a field sits in a YAML file, so validation errors can name the line.

Shared by the policy checker and the simulator's scenario loader: both validate with pydantic
and point the user at `file:line`. Pure: walks a PyYAML node tree, reads nothing.
"""

from __future__ import annotations

import yaml


def line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """Line (1-based) of the deepest node along pydantic's `loc` that exists in the YAML."""
    if node is None:
        return None
    line: int = node.start_mark.line + 1
    for part in loc:
        nxt: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    nxt = value
                    line = key.start_mark.line + 1
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            nxt = node.value[part]
            line = nxt.start_mark.line + 1
        if nxt is None:
            break
        node = nxt
    return line

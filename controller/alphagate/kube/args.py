"""Pure editing of a vLLM container's argument list: the one flag alphagate owns.

vLLM takes its speculative config as JSON in several spellings: `--speculative-config JSON`,
`--speculative-config=JSON`, `-sc JSON`, `-sc=JSON`, the underscore form
`--speculative_config`, dotted keys (`--speculative-config.num_speculative_tokens 5`), and in
2026 builds the shorthands `--spec-method`, `--spec-model`, `--spec-tokens`. Turning speculation
off must remove every one of them (a leftover shorthand would keep it on), and turning it on
must not leave a shorthand that vLLM rejects as conflicting. Every other argument is left
exactly where it was, and an edit that changes nothing returns the same list, so the actuator
can skip the patch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from alphagate.errors import KubeError
from alphagate.kube import invocation

LONG: Final = "--speculative-config"
LONG_UNDERSCORE: Final = "--speculative_config"
SHORT: Final = "-sc"
JSON_FLAGS: Final = (LONG, LONG_UNDERSCORE, SHORT)
# 2026 shorthands -> the speculative-config key they set.
SHORTHANDS: Final[dict[str, str]] = {
    "--spec-method": "method",
    "--spec-model": "model",
    "--spec-tokens": "num_speculative_tokens",
    "--spec_method": "method",
    "--spec_model": "model",
    "--spec_tokens": "num_speculative_tokens",
}


class ArgsError(KubeError):
    """The container's arguments cannot be edited safely (e.g. the flag is buried in a shell
    string, or its JSON is broken). Reported as SpecValid=False, never guessed around."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=0, reason="UneditableArgs")


@dataclass(frozen=True, slots=True)
class _Occurrence:
    start: int  # index of the flag token
    stop: int  # one past the last token it consumes
    flag: str  # the spelling as written (without `=value`)
    key: str | None  # dotted key or shorthand key; None for the whole JSON
    value: str  # raw value text


def render(config: Mapping[str, Any]) -> str:
    """Keys sorted, so equal configs render equal."""
    return json.dumps(dict(config), separators=(",", ":"), sort_keys=True)


def _classify(token: str) -> tuple[str, str | None, str | None] | None:
    flag, eq, inline = token.partition("=")
    value = inline if eq else None
    for base in JSON_FLAGS:
        if flag == base:
            return flag, None, value
        if flag.startswith(base + "."):
            return flag, flag[len(base) + 1 :], value
    if flag in SHORTHANDS:
        return flag, SHORTHANDS[flag], value
    return None


def _occurrences(args: Sequence[str]) -> list[_Occurrence]:
    out: list[_Occurrence] = []
    i = 0
    while i < len(args):
        token = args[i]
        found = _classify(token) if token.startswith("-") else None
        if found is None:
            i += 1
            continue
        flag, key, inline = found
        if inline is not None:
            out.append(_Occurrence(i, i + 1, flag, key, inline))
            i += 1
            continue
        if i + 1 >= len(args):
            raise ArgsError(f"argument {i} ({token}) has no value")
        out.append(_Occurrence(i, i + 2, flag, key, args[i + 1]))
        i += 2
    return out


def _buried(args: Sequence[str], spans: list[_Occurrence]) -> int | None:
    """Index of a token that mentions the flag without being one (e.g. inside `sh -c`)."""
    covered = {j for o in spans for j in range(o.start, o.stop)}
    for j, token in enumerate(args):
        if j in covered:
            continue
        if any(f in token for f in (LONG, LONG_UNDERSCORE, *SHORTHANDS)):
            return j
    return None


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def read(args: Sequence[str]) -> dict[str, Any] | None:
    """Merged from every spelling; None when absent."""
    spans = _occurrences(args)
    where = _buried(args, spans)
    if where is not None:
        raise ArgsError(
            f"argument {where} mentions the speculative config inside a larger string "
            f"({args[where][:80]!r}); alphagate edits separate arguments only"
        )
    if not spans:
        return None
    config: dict[str, Any] = {}
    for occ in spans:
        if occ.key is None:
            try:
                parsed = json.loads(occ.value)
            except json.JSONDecodeError as exc:
                raise ArgsError(
                    f"argument {occ.start} ({occ.flag}) is not valid JSON: {exc.msg} at "
                    f"column {exc.colno}"
                ) from exc
            if parsed is None:
                continue
            if not isinstance(parsed, dict):
                raise ArgsError(f"argument {occ.start} ({occ.flag}) must be a JSON object")
            config.update(parsed)
        else:
            config[occ.key] = _scalar(occ.value)
    return config or None


def check_invocation(command: Sequence[str], args: Sequence[str], image: str = "") -> None:
    """Refuse a container whose argv does not visibly run vLLM (`kube.invocation`)."""
    try:
        invocation.check(command, args, image)
    except invocation.InvocationError as exc:
        raise ArgsError(str(exc)) from None


def has_speculation(args: Sequence[str]) -> bool:
    return read(args) is not None


def edit(args: Sequence[str], config: Mapping[str, Any] | None) -> list[str]:
    """Args with the speculative config set to `config` (None: removed). A replacement keeps
    the position and spelling of the first occurrence; an addition appends."""
    current = read(args)
    wanted = dict(config) if config is not None else None
    if current == wanted:
        return list(args)
    spans = _occurrences(args)
    drop = {j for o in spans for j in range(o.start, o.stop)}
    out: list[str] = []
    inserted = False
    for j, token in enumerate(args):
        if j in drop:
            first = spans[0]
            if wanted is not None and not inserted and j == first.start:
                spelling = first.flag.split(".", 1)[0]
                if spelling in SHORTHANDS:
                    spelling = LONG
                if first.stop - first.start == 1:
                    out.append(f"{spelling}={render(wanted)}")
                else:
                    out.extend([spelling, render(wanted)])
                inserted = True
            continue
        out.append(token)
    if wanted is not None and not inserted:
        out.extend([LONG, render(wanted)])
    return out

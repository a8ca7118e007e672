"""Which vLLM releases show the metric layout alphagate reads: the compatibility table.

`data/vllm-compat.json` holds one row per vLLM release read: for every family alphagate reads
(and the old per-step `vllm:time_per_output_token_seconds`), its type, labels, HELP text,
default buckets and whether the release registers it always, only with
`--speculative-config`, or only with `--show-hidden-metrics-for-version` (hidden). It is
written by `tools/vllm_compat_extract.py` from each release's own metrics code, and is the one
place the code, the docs (docs/vllm-compat.md) and the tests' synthetic pages take it from.

A page's *layout* is the set of those families it shows. :func:`layout_of` names the releases
whose pages show exactly that set (a version range), and :meth:`Layout.problem` says, in one
line, what alphagate cannot judge on it and which release is needed: the per-token latency
guard reads `vllm:request_time_per_output_token_seconds` (first registered in 0.11.0), the
per-step guards `vllm:inter_token_latency_seconds` (0.10.2). The version numbers in those lines
come from the table, never from this text.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from typing import Any, Final

from alphagate import vllm
from alphagate.config import LatencyMetric

DATA: Final = "vllm-compat.json"

ITL: Final = vllm.ITL
TPOT: Final = vllm.TPOT
OLD_TPOT: Final = "vllm:time_per_output_token_seconds"
"""The per-step histogram's name before 0.10.2 (deprecated in 0.11, hidden 0.12-0.14, removed
in 0.15): the same measurement as `vllm:inter_token_latency_seconds`, one per engine step."""

LATENCY: Final = frozenset((ITL, TPOT, OLD_TPOT))

NEEDED: Final[dict[LatencyMetric, str]] = {
    LatencyMetric.PER_TOKEN: TPOT,
    LatencyMetric.PER_STEP_SCALED: ITL,
    LatencyMetric.PER_STEP_ABSOLUTE: ITL,
}
"""The histogram each latency guard reads."""

WHY: Final[dict[str, str]] = {
    TPOT: "one observation per request, the per-token latency the default guard compares",
    ITL: "one observation per engine step, what the per-step guards compare",
}


class Registered(StrEnum):
    ALWAYS = "always"
    SPECULATIVE = "speculative-config"  # only with --speculative-config
    HIDDEN = "hidden"  # only with --show-hidden-metrics-for-version


@dataclass(frozen=True, slots=True)
class Family:
    """One family as a release registers it (`name` as in vLLM's code: counters without
    `_total`)."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str
    registered: Registered
    buckets: tuple[float, ...] | None = None  # finite default bounds; None: not a histogram
    buckets_text: str = ""  # a default computed at start-up, as vLLM's code says it


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    families: Mapping[str, Family]
    custom_histogram_buckets: bool  # has --custom-histogram-buckets

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)

    def shows(self, name: str) -> bool:
        """Its pages show `name` with the default flags (speculation on or off)."""
        fam = self.families.get(name)
        return fam is not None and fam.registered is not Registered.HIDDEN

    def matches(self, present: Collection[str], examined: Collection[str]) -> bool:
        """A page of this release can show exactly `present` among the `examined` families:
        every always-registered one is there, and nothing it never registers."""
        for name in examined:
            fam = self.families.get(name)
            if name in present and fam is None:
                return False
            if name not in present and fam is not None and fam.registered is Registered.ALWAYS:
                return False
        return True


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _family(name: str, raw: Mapping[str, Any]) -> Family:
    bounds = raw.get("buckets")
    return Family(
        name=name,
        type=str(raw["type"]),
        labels=tuple(str(x) for x in raw["labels"]),
        help=str(raw["help"]),
        registered=Registered(raw["registered"]),
        buckets=tuple(float(b) for b in bounds) if isinstance(bounds, list) else None,
        buckets_text=bounds if isinstance(bounds, str) else "",
    )


def parse(text: str) -> tuple[Release, ...]:
    """Oldest first; ValueError names a malformed row."""
    data = json.loads(text)
    rows = []
    for i, raw in enumerate(data["releases"]):
        try:
            fams = {n: _family(n, f) for n, f in raw["families"].items()}
            rows.append(Release(str(raw["release"]), fams, bool(raw["custom_histogram_buckets"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{DATA}: release row {i}: {exc!r}") from exc
    return tuple(sorted(rows, key=lambda r: r.key))


@functools.cache
def releases() -> tuple[Release, ...]:
    """Oldest first, read once from the package's data."""
    text = resources.files("alphagate").joinpath("data", DATA).read_text(encoding="utf-8")
    return parse(text)


def release(version: str) -> Release:
    """The row read from `version` (e.g. "0.13.0"); KeyError if the table has none."""
    for row in releases():
        if row.version == version:
            return row
    raise KeyError(version)


def families() -> frozenset[str]:
    return frozenset(n for r in releases() for n in r.families)


def first_with(name: str) -> Release | None:
    """The oldest release read whose pages show `name` by default."""
    return next((r for r in releases() if r.shows(name)), None)


@dataclass(frozen=True, slots=True)
class Layout:
    present: frozenset[str]
    examined: frozenset[str]
    versions: tuple[str, ...]  # the matching releases read, oldest first; () for none
    custom_buckets: tuple[str, ...] = field(default=())  # histograms not at their defaults

    @property
    def name(self) -> str:
        """`vLLM 0.12.0+`, `vLLM 0.9.2-0.10.1.1`, `no vLLM families`, or `an unknown ...`."""
        if not self.present:
            return "no vLLM families"
        if not self.versions:
            return "a layout no vLLM release read shows (" + ", ".join(sorted(self.present)) + ")"
        first, last = self.versions[0], self.versions[-1]
        newest = releases()[-1].version
        span = f"{first}+" if last == newest else (first if first == last else f"{first}-{last}")
        text = f"vLLM {span}"
        if self.custom_buckets:
            text += " with custom buckets (" + ", ".join(self.custom_buckets) + ")"
        return text

    def problem(self, metric: LatencyMetric | None) -> str | None:
        """What alphagate cannot judge on pages of this layout, and the release it needs, in
        one line; None when it can judge them (`metric` None: the latency guard is off), and
        for a page no release read shows (the release it needs cannot be told)."""
        if not self.versions or metric is None:
            # not a page any vLLM release read shows (not vLLM, a partial exporter: the caller
            # says "no series", as always), or no guard
            return None
        need = NEEDED[metric]
        if need in self.present or need not in self.examined:
            return None
        since = first_with(need)
        version = since.version if since is not None else "?"
        shown = sorted(self.present & LATENCY)
        what = f"the {self.name} layout"
        has = f" (it has {', '.join(shown)})" if shown else ""
        per_step = (
            f", or judge per step (latency.metric perStepScaled reads {ITL})"
            if metric is LatencyMetric.PER_TOKEN and ITL in self.present
            else ""
        )
        return (
            f"{what} has no {need}{has}: the {metric.value} latency guard reads it ({WHY[need]})"
            f" and vLLM registers it from {version} on; upgrade vLLM to {version} or newer"
            f"{per_step}"
        )


def layout_of(
    present: Collection[str],
    *,
    examined: Collection[str] | None = None,
    buckets: Mapping[str, tuple[float, ...]] | None = None,
) -> Layout:
    """`present`: code names (counters without `_total`); `examined` defaults to every family
    the table knows; `buckets` tells custom buckets from the defaults."""
    known = families()
    seen = frozenset(present) & known
    looked = frozenset(examined) & known if examined is not None else known
    rows = [r for r in releases() if r.matches(seen, looked)]
    custom: list[str] = []
    for name, bounds in sorted((buckets or {}).items()):
        defaults = {r.families[name].buckets for r in rows if name in r.families}
        if defaults and tuple(bounds) not in defaults:
            custom.append(name)
    return Layout(seen, looked, tuple(r.version for r in rows), tuple(custom))


__all__ = [
    "ITL",
    "NEEDED",
    "OLD_TPOT",
    "TPOT",
    "Family",
    "Layout",
    "Registered",
    "Release",
    "families",
    "first_with",
    "layout_of",
    "parse",
    "release",
    "releases",
]

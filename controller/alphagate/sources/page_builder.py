"""Building a `Page` sample by sample: which sample names alphagate reads (`WANTED`), numbers
and label sets as Prometheus writes them, and the checks a parser of single lines cannot make
(duplicates, `le` bounds compared as numbers as Prometheus normalises them, a bound on series,
ASCII `position`s, counts that are never negative, a `+Inf` bucket per histogram).
Both parsers in `exposition` feed it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, NamedTuple

from alphagate import vllm
from alphagate.errors import ExpositionError
from alphagate.sources.page import Counter, Gauge, Hist, Histogram, LabelKey, Page, Series


class Want(NamedTuple):
    """What one sample name carries: its kind, its family, and its ``vllm:`` spelling."""

    kind: str  # bucket, count, sum, hist_created, counter, counter_created, pos, pos_created,
    # gauge
    family: Counter | Hist | Gauge | None
    name: str


def _table() -> dict[str, Want]:
    out: dict[str, Want] = {}
    for c in Counter:
        b = vllm.base(c.value)
        out[b + vllm.TOTAL] = Want("counter", c, b + vllm.TOTAL)
        out[b + vllm.CREATED] = Want("counter_created", c, b + vllm.CREATED)
    per_pos = vllm.base(vllm.SPEC_PER_POS)
    out[per_pos + vllm.TOTAL] = Want("pos", None, per_pos + vllm.TOTAL)
    out[per_pos + vllm.CREATED] = Want("pos_created", None, per_pos + vllm.CREATED)
    for h in Hist:
        for kind, suffix in (
            ("bucket", vllm.BUCKET),
            ("count", vllm.COUNT),
            ("sum", vllm.SUM),
            ("hist_created", vllm.CREATED),
        ):
            out[h.value + suffix] = Want(kind, h, h.value + suffix)
    for g in Gauge:
        out[g.value] = Want("gauge", g, g.value)
    for name in list(out):
        out[vllm.escaped(name)] = out[name]
    return out


WANTED: Final = _table()
"""Exact sample names read (both spellings) -> what they carry."""

_SKIP_LABELS: Final = frozenset((vllm.LE, vllm.POSITION))
_COUNTS: Final = frozenset(("counter", "pos", "bucket", "count"))
"""Sample kinds that count something: a negative value is a broken page, not a reset."""


def parse_number(token: str) -> float:
    """A number as Prometheus writes it (Go's ParseFloat): ASCII only, no underscores, no
    spaces. Python's float() also takes `١٢٣` (Arabic-Indic digits), `1_000` and padding;
    a page or an answer carrying those is malformed, not a number. Raises ValueError."""
    if not token.isascii() or "_" in token or token != token.strip():
        raise ValueError(f"not an ASCII number: {token!r}")
    return float(token)


LabelSet = tuple[dict[str, str], tuple[tuple[str, str], ...], LabelKey, float]
"""A label set as parsed once: the labels, sorted, the series key (minus le/position), and
the ``le`` bound (NaN when absent or not a number)."""

MAX_SERIES: Final = 1024
"""Distinct label sets of our families on one page. vLLM has one per model and engine; a
page past this (a label with a value per line) would cost the parser ~1 KB per line and the
pod-scrape source keeps the last page of every pod, so it is refused."""


def labelled(labels: dict[str, str]) -> LabelSet:
    items = tuple(sorted(labels.items()))
    key = items
    if vllm.LE in labels or vllm.POSITION in labels:
        key = tuple(kv for kv in items if kv[0] not in _SKIP_LABELS)
    le = labels.get(vllm.LE)
    try:
        bound = parse_number(le) if le is not None else math.nan
    except ValueError:
        bound = math.nan
    return (labels, items, key, bound)


class PageBuilder:
    """Collects samples into series and checks what a parser of single lines cannot.

    Samples come with their offset in the page (0 when unknown); the line number is counted
    only when an error needs it."""

    __slots__ = ("hist_at", "page", "seen", "target", "text")

    def __init__(self, target: str, text: str | None = None) -> None:
        self.target = target
        self.text = text
        self.page = Page()
        self.seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self.hist_at: dict[tuple[LabelKey, Hist], int] = {}

    def line_of(self, at: int) -> int:
        """1-based line of offset `at` in the page, 0 when the page is not known."""
        return self.text.count("\n", 0, at) + 1 if self.text is not None else 0

    def error(self, message: str, at: int) -> ExpositionError:
        return ExpositionError(message, line=self.line_of(at), target=self.target)

    def add(self, what: Want, name: str, labels: dict[str, str], value: float, at: int) -> None:
        self.add_parsed(what, name, labelled(labels), value, at)

    def add_parsed(self, what: Want, name: str, label_set: LabelSet, value: float, at: int) -> None:
        labels, items, key, bound = label_set
        ident = (what.name, items)
        seen = self.seen
        if ident in seen:
            raise self.error(f"duplicate sample {name}{{{fmt_labels(labels)}}}", at)
        seen.add(ident)
        kind, fam = what.kind, what.family
        if value < 0 and kind in _COUNTS:
            raise self.error(
                f"{name}{{{fmt_labels(labels)}}} is {value:g}: a counter or bucket count is never "
                "negative",
                at,
            )
        series = self.page.series.get(key)
        if series is None:
            if len(self.page.series) >= MAX_SERIES:
                raise self.error(
                    f"more than {MAX_SERIES} series (label sets) of vLLM's families: "
                    "refused to bound memory",
                    at,
                )
            series = self.page.series[key] = Series(key)
        if kind == "bucket":
            assert isinstance(fam, Hist)
            hist = series.histograms.get(fam)
            if hist is None:
                hist = series.histograms[fam] = Histogram()
                self.hist_at[(key, fam)] = at
            if bound != bound:  # NaN: absent or not a number
                le = labels.get(vllm.LE)
                raise self.error(f"{name} needs a numeric le label, got {le!r}", at)
            if bound in hist.buckets:  # le="0.1" and le="0.10": one bound, as Prometheus reads it
                raise self.error(
                    f"duplicate bucket {name}{{{fmt_labels(labels)}}}: le={bound:g} is already "
                    "on the page (Prometheus normalises le, so both are one series)",
                    at,
                )
            hist.buckets[bound] = value
        elif isinstance(fam, Hist):
            hist = series.histograms.get(fam)
            if hist is None:
                hist = series.histograms[fam] = Histogram()
                self.hist_at[(key, fam)] = at
            if kind == "count":
                hist.count = value
            elif kind == "sum":
                hist.sum = value
            else:
                hist.created = value
        elif isinstance(fam, Gauge):
            series.gauges[fam] = value
        elif fam is not None:
            if kind == "counter":
                series.counters[fam] = value
            else:
                series.created[fam] = value
        else:
            raw = labels.get(vllm.POSITION)
            # ASCII digits only: str.isdigit() also takes '²' and '١' (int() reads the latter)
            if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 6:
                raise self.error(f"{name} needs a numeric position label, got {raw!r}", at)
            positions = series.per_position if kind == "pos" else series.per_position_created
            pos = int(raw)
            if pos in positions:  # position="01" beside position="1"
                raise self.error(
                    f"duplicate sample {name}{{{fmt_labels(labels)}}}: position {pos} is already "
                    "on the page",
                    at,
                )
            positions[pos] = value

    def finish(self) -> Page:
        for (key, fam), at in self.hist_at.items():
            hist = self.page.series[key].histograms[fam]
            if math.inf not in hist.buckets:
                raise self.error(
                    f"histogram {fam.value}{{{fmt_labels(dict(key))}}} has no +Inf bucket "
                    "(truncated page?)",
                    at,
                )
        return self.page


def fmt_labels(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))

"""A page's shape, compiled once: where each of our sample lines' values goes in a `Page`.

Every pod of a model serves the same lines of alphagate's families in the same order, cycle
after cycle; only the values change. So the line-by-line path (`exposition`) reads a page
with a new shape once, with every check a page can fail (duplicates, numeric ``le`` and
``position``, a ``+Inf`` bucket per histogram, the bound on series), and a shape that passes
a second time is kept: the sequence of sample names and label texts (a page whose shape
changes every scrape never pays for compiling it). A later page with exactly that
sequence only has its values converted, in C (`map(float, ...)`), and placed where the shape
says. Every check above depends on names and labels alone, so it holds for that page too.

Shapes are keyed by the exact name and label texts, so a page that differs in any line (a new
label value, a missing bucket, a line out of order) is a new shape and goes through the line
path. The cache is bounded in shapes and in the label text each keeps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from alphagate import vllm
from alphagate.sources.page import Counter, Gauge, Hist, Histogram, LabelKey, Page, Series
from alphagate.sources.page_builder import LabelSet, Want

MAX_SHAPES: Final = 128
"""Distinct shapes kept (about one per model and vLLM version in a fleet)."""
MAX_SHAPE_TEXT: Final = 128 * 1024
"""Label text a kept shape may hold, so the cache stays under MAX_SHAPES x 128 KiB."""

_NO_ROW: Final = -1


@dataclass(slots=True)
class _HistRows:
    buckets: dict[float, int] = field(default_factory=dict)
    count: int = _NO_ROW
    sum: int = _NO_ROW
    created: int = _NO_ROW


@dataclass(slots=True)
class _SeriesRows:
    """Row numbers, by where their values go in one series."""

    counters: dict[Counter, int] = field(default_factory=dict)
    created: dict[Counter, int] = field(default_factory=dict)
    per_position: dict[int, int] = field(default_factory=dict)
    per_position_created: dict[int, int] = field(default_factory=dict)
    gauges: dict[Gauge, int] = field(default_factory=dict)
    histograms: dict[Hist, _HistRows] = field(default_factory=dict)


class Shape:
    """Where each row's value goes; :meth:`page` builds a fresh Page from one page's values."""

    __slots__ = ("_series",)

    def __init__(self, series: dict[LabelKey, _SeriesRows]) -> None:
        self._series = series

    def page(self, values: Sequence[float]) -> Page:
        """The Page of a page of this shape whose rows carry `values` (in row order)."""
        get = values.__getitem__
        page = Page()
        for key, rows in self._series.items():
            series = page.series[key] = Series(
                key,
                counters=dict(zip(rows.counters, map(get, rows.counters.values()), strict=True)),
                created=dict(zip(rows.created, map(get, rows.created.values()), strict=True)),
                per_position=dict(
                    zip(rows.per_position, map(get, rows.per_position.values()), strict=True)
                ),
                per_position_created=dict(
                    zip(
                        rows.per_position_created,
                        map(get, rows.per_position_created.values()),
                        strict=True,
                    )
                ),
                gauges=dict(zip(rows.gauges, map(get, rows.gauges.values()), strict=True)),
            )
            for fam, h in rows.histograms.items():
                series.histograms[fam] = Histogram(
                    dict(zip(h.buckets, map(get, h.buckets.values()), strict=True)),
                    get(h.count) if h.count != _NO_ROW else math.nan,
                    get(h.sum) if h.sum != _NO_ROW else math.nan,
                    get(h.created) if h.created != _NO_ROW else None,
                )
        return page


def compile_shape(rows: Sequence[tuple[Want, LabelSet] | None]) -> Shape:
    """The shape of rows the line path has just read without error (None: a row not ours)."""
    out: dict[LabelKey, _SeriesRows] = {}
    for i, row in enumerate(rows):
        if row is None:
            continue
        what, (labels, _items, key, bound) = row
        series = out.get(key)
        if series is None:
            series = out[key] = _SeriesRows()
        fam, kind = what.family, what.kind
        if isinstance(fam, Hist):
            h = series.histograms.get(fam)
            if h is None:
                h = series.histograms[fam] = _HistRows()
            if kind == "bucket":
                h.buckets[bound] = i
            elif kind == "count":
                h.count = i
            elif kind == "sum":
                h.sum = i
            else:
                h.created = i
        elif isinstance(fam, Gauge):
            series.gauges[fam] = i
        elif isinstance(fam, Counter):
            (series.counters if kind == "counter" else series.created)[fam] = i
        else:
            position = int(labels[vllm.POSITION])
            if kind == "pos":
                series.per_position[position] = i
            else:
                series.per_position_created[position] = i
    return Shape(out)

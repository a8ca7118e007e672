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
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar

from alphagate.sources.page import Histogram, Page, Series
from alphagate.sources.page_builder import LabelSet, PageBuilder, Want

MAX_SHAPES: Final = 128
"""Distinct shapes kept (about one per model and vLLM version in a fleet)."""
MAX_SHAPE_TEXT: Final = 128 * 1024
"""Label text a kept shape may hold, so the cache stays under MAX_SHAPES x 128 KiB."""

K = TypeVar("K")


class Shape:
    """Where each row's value goes: a Page whose values are row numbers. :meth:`page` builds a
    fresh Page from one page's values by those numbers."""

    __slots__ = ("_rows",)

    def __init__(self, rows: Page) -> None:
        self._rows = rows

    def page(self, values: Sequence[float]) -> Page:
        """The Page of a page of this shape whose rows carry `values` (in row order)."""
        get = values.__getitem__

        def pick(rows: Mapping[K, float]) -> dict[K, float]:
            return dict(zip(rows, map(get, map(int, rows.values())), strict=True))

        page = Page()
        for key, rows in self._rows.series.items():
            series = page.series[key] = Series(
                key,
                counters=pick(rows.counters),
                created=pick(rows.created),
                per_position=pick(rows.per_position),
                per_position_created=pick(rows.per_position_created),
                gauges=pick(rows.gauges),
            )
            for fam, h in rows.histograms.items():
                series.histograms[fam] = Histogram(
                    pick(h.buckets),
                    get(int(h.count)) if not math.isnan(h.count) else math.nan,
                    get(int(h.sum)) if not math.isnan(h.sum) else math.nan,
                    get(int(h.created)) if h.created is not None else None,
                )
        return page


def compile_shape(rows: Sequence[tuple[Want, LabelSet] | None]) -> Shape:
    """The shape of rows the line path has just read without error (None: a row not ours):
    the same `PageBuilder` places each row's number where its value goes."""
    builder = PageBuilder("")
    for i, row in enumerate(rows):
        if row is not None:
            what, label_set = row
            builder.add_parsed(what, what.name, label_set, float(i), 0)
    return Shape(builder.page)

"""Which vLLM layout a page shows (`alphagate.vllm_compat`), and the pool error for a layout
alphagate cannot judge.

The parser keeps only the families alphagate reads, so a page's layout is read from the parsed
page, plus one search of the raw text for the families it does not keep (the old per-step
`vllm:time_per_output_token_seconds`). That search runs only when a latency histogram alphagate
reads is missing from the page (`needs_layout`): a current vLLM page never pays for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Final

from alphagate import vllm, vllm_compat
from alphagate.config import LatencyMetric
from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources.page import Counter, Gauge, Hist, Page

UNPARSED: Final = frozenset(vllm_compat.families()) - {
    *(vllm.base(c.value) for c in Counter),
    vllm.base(vllm.SPEC_PER_POS),
    *(h.value for h in Hist),
    *(g.value for g in Gauge),
}
"""Families of the table the parser does not keep: found by a search of the page's text."""

_UNPARSED_LINE: Final = re.compile(
    r"^[ \t]*vllm[:_]("
    + "|".join(re.escape(n.removeprefix(vllm.PREFIX)) for n in sorted(UNPARSED))
    + r")(?:_bucket|_count|_sum|_total)?[{ \t]",
    re.MULTILINE,
)


def present(page: Page) -> set[str]:
    """The table's families the parsed page carries (code names: counters without `_total`)."""
    out: set[str] = set()
    for s in page.series.values():
        out.update(vllm.base(c.value) for c in s.counters)
        out.update(h.value for h in s.histograms)
        out.update(g.value for g in s.gauges)
        if s.per_position:
            out.add(vllm.base(vllm.SPEC_PER_POS))
    return out


def needs_layout(page: Page) -> bool:
    """The page lacks a latency histogram alphagate reads (a vLLM page of another layout, or
    not a vLLM page at all): worth telling which."""
    shown = present(page)
    return vllm.ITL not in shown or vllm.TPOT not in shown


def _buckets(page: Page) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for s in page.series.values():
        for h in (Hist.ITL, Hist.TPOT):
            hist = s.histograms.get(h)
            if hist is not None and h.value not in out:
                out[h.value] = tuple(sorted(b for b in hist.buckets if math.isfinite(b)))
    return out


def page_layout(page: Page, text: str | None = None) -> vllm_compat.Layout:
    """The page's layout; with the page's `text`, also the families the parser does not keep
    (without it they are left out of the judgement, not taken as absent)."""
    shown = present(page)
    examined = set(vllm_compat.families())
    if text is None:
        examined -= UNPARSED
    else:
        shown.update(vllm.PREFIX + m.group(1) for m in _UNPARSED_LINE.finditer(text))
    return vllm_compat.layout_of(shown, examined=examined, buckets=_buckets(page))


def metric_of(enabled: bool, metric: LatencyMetric) -> LatencyMetric | None:
    """The latency metric a policy judges, None with its guard off."""
    return metric if enabled else None


def layout_error(
    layouts: Iterable[vllm_compat.Layout], metric: LatencyMetric | None, where: str
) -> SourceError | None:
    """The pool's error when one of its pods' layouts cannot be judged for `metric`: it names
    the layout and the vLLM release needed (kind `empty`: the series it needs are absent)."""
    for layout in layouts:
        problem = layout.problem(metric)
        if problem is not None:
            return SourceError(SourceErrorKind.EMPTY, problem, target=where)
    return None


__all__ = ["UNPARSED", "layout_error", "metric_of", "needs_layout", "page_layout", "present"]

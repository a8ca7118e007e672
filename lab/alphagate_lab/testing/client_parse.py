"""The reference reading of a vLLM /metrics page: the same `Page` as the controller's
`alphagate.sources.exposition.parse`, through ``prometheus_client.parser``.

The fast path is tested against it (same pages, same result) and the parser benchmarks measure
against it; the controller never uses it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from prometheus_client.parser import _parse_sample, text_string_to_metric_families

from alphagate.errors import ExpositionError
from alphagate.sources.exposition import check_eof
from alphagate.sources.page import Page
from alphagate.sources.page_builder import WANTED, PageBuilder

# What prometheus_client's text parser raises on a bad page: no error type of its own, just
# ValueError (bad numbers, labels), LookupError (IndexError/KeyError on cut-off lines), and
# TypeError/AttributeError from half-parsed pieces.
PARSE_ERRORS: Final = (ValueError, LookupError, TypeError, AttributeError)


def parse(text: str, *, target: str = "", prefilter: bool = False) -> Page:
    """The same result through prometheus_client's parser (the reference implementation).

    `prefilter` drops lines of families we do not read before parsing (a cheap speed-up that
    keeps the client's parsing of the lines that matter)."""
    check_eof(text, target)
    if prefilter:
        text = "\n".join(_prefiltered(text.split("\n")))
    builder = PageBuilder(target)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                what = WANTED.get(sample.name)
                if what is None:
                    continue
                builder.add(what, sample.name, dict(sample.labels), float(sample.value), 0)
    except ExpositionError:
        raise
    except PARSE_ERRORS as exc:  # the client raises bare ValueError/IndexError/... on bad text
        line = _first_bad_line(text)
        raise ExpositionError(
            f"prometheus_client could not parse the page: {exc!r}", line=line, target=target
        ) from exc
    return builder.finish()


def _prefiltered(lines: Iterable[str]) -> Iterable[str]:
    for line in lines:
        s = line.lstrip()
        if s.startswith(("vllm:", "vllm_")):
            name = s.split("{", 1)[0].split(None, 1)[0]
            if name in WANTED:
                yield line


def _first_bad_line(text: str) -> int:
    """1-based number of the first sample line the client's line parser rejects, else 0."""
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            _parse_sample(line)  # type: ignore[no-untyped-call]
        except PARSE_ERRORS:
            return lineno
    return 0

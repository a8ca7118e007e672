"""The fleet benchmark's page costs: the parser against `prometheus_client` and
`str.splitlines`, and what each step after a page's GET costs, measured in interleaved rounds
in one process (so a change is judged as a ratio, not against another run's load)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from alphagate.sources import exposition
from alphagate_lab.testing import client_parse


def parser_ratios(text: str, *, rounds: int, budget: float = 20.0) -> dict[str, float]:
    """Median seconds per page for each contender, measured in interleaved rounds."""

    def cold() -> object:  # a page of a shape not seen before
        exposition._LABEL_SETS.clear()
        exposition._SHAPES.clear()
        exposition._SEEN_ONCE.clear()
        return exposition.parse(text)

    contenders: dict[str, Callable[[], object]] = {
        "prometheus_client": lambda: client_parse.parse(text),
        "prometheus_client, pre-filtered": lambda: client_parse.parse(text, prefilter=True),
        "alphagate, first page of its shape": cold,
        "alphagate": lambda: exposition.parse(text),
        "str.splitlines (ceiling)": text.splitlines,
    }
    reference = client_parse.parse(text)
    if exposition.parse(text) != reference or cold() != reference:
        raise SystemExit("the fast parser disagrees with prometheus_client on this page")
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    deadline = time.monotonic() + budget
    for _ in range(max(1, rounds)):
        for name, fn in contenders.items():
            number = 3 if name.startswith("prometheus") else 100
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            samples[name].append((time.perf_counter() - t0) / number)
        if time.monotonic() > deadline:
            break
    return {k: statistics.median(v) for k, v in samples.items()}


def page_costs(text: str, *, rounds: int, budget: float = 20.0) -> dict[str, float]:
    """Median CPU seconds per page of each step a scrape takes after the GET, interleaved:
    inflating the gzipped page (zlib, as the fetcher does; isal when it is installed, as a
    candidate), decoding UTF-8, and parsing our families."""
    import gzip
    import zlib

    raw = text.encode()
    packed = gzip.compress(raw)

    def inflate(module: Any) -> Callable[[], object]:
        return lambda: module.decompressobj(16 + zlib.MAX_WBITS).decompress(packed, 1 << 20)

    steps: dict[str, Callable[[], object]] = {"inflate gzip (zlib)": inflate(zlib)}
    try:
        from isal import isal_zlib  # type: ignore[import-not-found, unused-ignore]

        steps["inflate gzip (isal, not used)"] = inflate(isal_zlib)
    except ImportError:
        pass
    steps["decode UTF-8"] = lambda: raw.decode("utf-8")
    steps["parse (alphagate)"] = lambda: exposition.parse(text)
    samples: dict[str, list[float]] = {k: [] for k in steps}
    deadline = time.monotonic() + budget
    for _ in range(max(1, rounds)):
        for name, fn in steps.items():
            t0 = time.process_time()
            for _ in range(100):
                fn()
            samples[name].append((time.process_time() - t0) / 100)
        if time.monotonic() > deadline:
            break
    return {k: statistics.median(v) for k, v in samples.items()}

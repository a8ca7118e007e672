"""Strict reading of a page: what Prometheus would refuse or normalise is refused here with one
line naming the source and the line, on every path (a page of a new shape, a page of a known
shape, `inspect`'s every-line check, and the scrape that fails only that pod)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alphagate.errors import ExpositionError, SourceError, SourceErrorKind
from alphagate.sources import exposition
from alphagate.sources.exposition import parse
from alphagate.sources.increments import check_page
from alphagate.sources.page import Counter, Hist
from alphagate.sources.pageread import parse_page

ITL = "vllm:inter_token_latency_seconds"
SPEC = (
    'vllm:spec_decode_num_drafts_total{model_name="m"} 10\n'
    'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 50\n'
    'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 30\n'
)
POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def histogram(*bounds: str) -> str:
    rows = [f'{ITL}_bucket{{model_name="m",le="{b}"}} {i + 1}\n' for i, b in enumerate(bounds)]
    n = len(bounds)
    return "".join(rows) + (
        f'{ITL}_bucket{{model_name="m",le="+Inf"}} {n + 1}\n'
        f'{ITL}_count{{model_name="m"}} {n + 1}\n{ITL}_sum{{model_name="m"}} 1.5\n'
    )


@pytest.fixture(autouse=True)
def no_shapes() -> Iterator[None]:
    exposition._SHAPES.clear()
    exposition._SEEN_ONCE.clear()
    yield
    exposition._SHAPES.clear()
    exposition._SEEN_ONCE.clear()


def every_path(text: str) -> list[ExpositionError]:
    """The error of each path: new shape, strict (`inspect`), and a known shape's page."""
    out = []
    for strict in (False, True):
        with pytest.raises(ExpositionError) as info:
            parse(text, target="pod-a", strict=strict)
        out.append(info.value)
    return out


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        # Prometheus normalises le (0.10 -> 0.1): two spellings of one bound are one series
        (SPEC + histogram("0.1", "0.10"), 5, "duplicate bucket"),
        (SPEC + histogram("0.1", "1e-1"), 5, "le=0.1 is already on the page"),
        (SPEC + histogram("1", "1.0"), 5, "duplicate bucket"),
        (SPEC + histogram("0.1") + f'{ITL}_bucket{{model_name="m",le="Inf"}} 9\n', 8, "le=inf"),
        # a position label in digits Python reads but Prometheus users do not write
        (SPEC + f'{POS}{{model_name="m",position="\u00b2"}} 3\n', 4, "position label, got '²'"),
        (SPEC + f'{POS}{{model_name="m",position="\u0661"}} 3\n', 4, "position label, got '١'"),
        (
            SPEC
            + f'{POS}{{model_name="m",position="0"}} 3\n{POS}{{model_name="m",position="00"}} 1\n',
            5,
            "position 0 is already",
        ),
        # counts are never negative: a negative counter would read as a reset, then as growth
        ('vllm:generation_tokens_total{model_name="m"} -5\n', 1, "is -5: a counter"),
        (SPEC.replace(" 30\n", " -30\n"), 3, "never negative"),
        (SPEC + histogram("0.1").replace("} 1\n", "} -1\n", 1), 4, "never negative"),
        (SPEC + f'{POS}{{model_name="m",position="0"}} -2\n', 4, "never negative"),
        # nothing after # EOF
        (SPEC + "# EOF\n" + 'vllm:generation_tokens_total{model_name="m"} 5\n', 5, "after '# EOF'"),
        (SPEC + "# EOF\n\n\nother 1\n", 7, "after '# EOF'"),
        ("# EOF\n" + SPEC, 2, "after '# EOF'"),
    ],
)
def test_what_prometheus_would_not_read_is_an_error_naming_the_line(
    text: str, line: int, words: str
) -> None:
    for err in every_path(text):
        assert err.kind is SourceErrorKind.PARSE and err.line == line, str(err)
        assert words in str(err) and "pod-a" in str(err) and f"line {line}" in str(err)
        assert "\n" not in str(err)  # one line
    with pytest.raises(SourceError) as info:
        parse_page(text.encode(), where="pod-a")
    assert info.value.kind is SourceErrorKind.PARSE and f"line {line}" in str(info.value)
    assert "ValueError" not in str(info.value)  # never a bare Python repr


def test_what_is_allowed_stays_allowed() -> None:
    """A negative gauge or histogram sum, blank lines after `# EOF`, `# EOF` inside a comment,
    distinct bounds written oddly: read as before."""
    text = (
        SPEC
        + histogram("0.1", "1e0")
        + "# HELP other this is not # EOF\n"
        + 'vllm:num_requests_running{model_name="m"} -1\n# EOF\n\n'
    )
    page = parse(text)
    (series,) = page.series.values()
    assert series.histograms[Hist.ITL].buckets == {0.1: 1.0, 1.0: 2.0, float("inf"): 3.0}
    assert series.counters[Counter.ACCEPTED] == 30
    negative_sum = SPEC + histogram("0.1").replace(
        '_sum{model_name="m"} 1.5', '_sum{model_name="m"} -1.5'
    )
    assert parse(negative_sum).series


def test_a_known_shape_refuses_a_negative_count_like_the_line_path() -> None:
    good = SPEC + histogram("0.1", "0.2")
    parse(good)
    parse(good)  # the shape is kept
    assert exposition._SHAPES
    bad = good.replace('_total{model_name="m"} 50', '_total{model_name="m"} -50')
    with pytest.raises(ExpositionError) as info:
        parse(bad)
    assert info.value.line == 2 and "never negative" in str(info.value)


def test_increments_never_turn_negative_counts_into_growth() -> None:
    """A page that got past the parser (a recording) with negative counters: refused by the
    page check, so no increment is made of -10 -> -5."""
    page = parse(SPEC)
    (series,) = page.series.values()
    series.counters[Counter.GENERATION_TOKENS] = -5.0
    with pytest.raises(SourceError, match="negative count") as info:
        check_page(page.series.values(), "pod-a")
    assert info.value.kind is SourceErrorKind.PARSE


def test_an_openmetrics_page_keeps_its_shape_and_its_end() -> None:
    """`# EOF` at the end is found in the same scan as our lines: the page's shape is kept and
    read from, and the same page with a line after its end is still refused."""
    page = SPEC + histogram("0.1") + "# EOF\n"
    first = parse(page)
    assert parse(page) == first
    assert exposition._SHAPES  # kept: the end line is not one of the shape's rows
    assert parse(page) == first == exposition._parse_lines(page, "")
    with pytest.raises(ExpositionError, match="after '# EOF'") as info:
        parse(page + 'vllm:generation_tokens_total{model_name="m"} 5\n')
    assert info.value.line == 9

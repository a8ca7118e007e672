"""A page's shape, compiled once: a page of a known shape reads its own values, and gives
exactly what the line-by-line path gives, errors and their lines included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from alphagate import vllm
from alphagate.errors import ExpositionError
from alphagate.sources import exposition
from alphagate.sources.exposition import parse
from alphagate.sources.page import Counter as C
from alphagate.sources.page import Hist, Page
from alphagate_lab.testing.client_parse import parse as parse_with_client

REAL = Path(__file__).resolve().parent / "data" / "vllm-real-metrics.txt"


def real_capture() -> str:
    return REAL.read_text()


@pytest.fixture(autouse=True)
def no_shapes() -> Iterator[None]:
    exposition._SHAPES.clear()
    exposition._SEEN_ONCE.clear()
    yield
    exposition._SHAPES.clear()
    exposition._SEEN_ONCE.clear()


def known(text: str) -> Page:
    """Parse `text` twice: a shape is kept when it comes back."""
    parse(text)
    return parse(text)


def page_of(model: str, drafts: float, itl: list[float]) -> str:
    """A vLLM-like page from prometheus_client: the same shape for the same model."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    for name in (vllm.SPEC_DRAFTS, vllm.SPEC_DRAFT_TOKENS, vllm.SPEC_ACCEPTED):
        Counter(vllm.base(name), "h", labels, registry=reg).labels(model, "0").inc(drafts)
    h = Histogram(vllm.ITL, "h", labels, buckets=vllm.ITL_BUCKETS, registry=reg)
    for x in itl:
        h.labels(model, "0").observe(x)
    return generate_latest(reg).decode()


def line_path(text: str) -> Page | int:
    """What the line-by-line path gives: the page, or the line of its error."""
    try:
        return exposition._parse_lines(text, "")
    except ExpositionError as err:
        return err.line


def fast(text: str) -> Page | int:
    try:
        return parse(text)
    except ExpositionError as err:
        return err.line


def test_a_known_shape_reads_each_pages_own_values() -> None:
    first, second = page_of("m", 3, [0.01, 0.2]), page_of("m", 8, [0.03, 0.03, 5.0])
    assert parse(first) == parse_with_client(first)
    assert not exposition._SHAPES  # read once: not kept yet
    assert known(first) == parse_with_client(first)
    assert len(exposition._SHAPES) == 1
    got = parse(second)
    assert len(exposition._SHAPES) == 1  # the same shape: read from it
    assert got == parse_with_client(second)
    (series,) = got.matching({"model_name": "m"})
    assert series.counters[C.DRAFTS] == 8 and series.histograms[Hist.ITL].count == 3


def test_a_bad_value_in_a_known_shape_is_still_an_error_naming_its_line() -> None:
    text = real_capture()
    known(text)
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("vllm:spec_decode_num_drafts"))
    for bad in ("1_000", "١٢", "12abc"):
        lines_bad = [*lines]
        lines_bad[at] = lines[at].rsplit(" ", 1)[0] + " " + bad
        with pytest.raises(ExpositionError) as info:
            parse("\n".join(lines_bad))
        assert info.value.line == at + 1


def test_a_timestamp_on_a_known_shape_goes_the_line_path() -> None:
    text = real_capture()
    known(text)
    at = text.index("\n", text.index("\nvllm:generation_tokens_total{") + 1)
    stamped = text[:at] + " 1700000000000" + text[at:]
    assert parse(stamped) == parse_with_client(stamped) == parse(text)


def test_shapes_are_bounded_in_number_and_text(monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(exposition.MAX_SHAPES + 5):
        known(page_of(f"model-{i}", 1, [0.1]))
        assert 1 <= len(exposition._SHAPES) <= exposition.MAX_SHAPES
    for i in range(10 * exposition.MAX_SHAPES):  # a new shape every scrape: never compiled
        parse(page_of(f"once-{i}", 1, [0.1]))
        assert len(exposition._SEEN_ONCE) <= 8 * exposition.MAX_SHAPES
    assert not any("once-" in "".join(k[1]) for k in exposition._SHAPES)
    exposition._SHAPES.clear()
    monkeypatch.setattr(exposition, "MAX_SHAPE_TEXT", 100)
    text = page_of("m", 1, [0.1])
    assert parse(text) == known(text) == parse_with_client(text)
    assert not exposition._SHAPES  # its label text is over the bound: read line by line


def test_pages_without_our_lines_never_leave_a_shape() -> None:
    with pytest.raises(ExpositionError):
        parse("<html>oops</html>\n")
    assert parse("# HELP x y\nother_total 1\n") == Page()
    assert not exposition._SHAPES


_JUNK = st.sampled_from([*'vllm:_spec{}="\\,# \t\n0123456789.+-eInfNa', "\r", "é", "\x0c"])
_PIECES = st.sampled_from(
    [
        "\n# EOF\n",  # lines after it
        "# EOF",
        "-",  # a negative count
        "0",  # le="0.10" beside le="0.1"; position="01"
        "\u00b2",  # '²': str.isdigit() but not int()
        "\u0661",  # Arabic-Indic one: int() reads it
        ',position="1"',
        ',le="0.1"',
    ]
)


def _sample() -> str:
    keep = [
        line
        for line in real_capture().split("\n")
        if "spec_decode" in line or "inter_token" in line or "generation_tokens_total" in line
    ]
    return "\n".join(keep)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_known_shape_agrees_with_the_line_path_on_any_mutation(data: st.DataObject) -> None:
    """The page's shape is kept first; then any mutation of a value, a label or a line gives
    what the line path gives (the same Page, or an error on the same line)."""
    text = _sample()
    known(text)
    assert exposition._SHAPES
    lines = text.split("\n")
    i = data.draw(st.integers(0, len(lines) - 1))
    line = lines[i]
    pos = data.draw(st.integers(0, len(line)))
    cut = data.draw(st.integers(0, 3))
    junk = data.draw(st.text(_JUNK, max_size=6) | st.lists(_PIECES, max_size=3).map("".join))
    lines[i] = line[:pos] + junk + line[pos + cut :]
    mutated = "\n".join(lines)
    assert fast(mutated) == line_path(mutated)


def test_the_mutations_reach_the_strict_cases() -> None:
    """The pieces the property test inserts do hit each strict rule on this sample (so the
    agreement above covers them), each an error naming its line on both paths."""
    text = _sample()
    lines = text.split("\n")
    at = {
        "le": next(i for i, x in enumerate(lines) if 'le="0.1"' in x),
        "pos": next(i for i, x in enumerate(lines) if 'position="1"' in x),
        "drafts": next(i for i, x in enumerate(lines) if x.startswith("vllm:spec_decode_num_dr")),
    }
    cases = {
        "duplicate bucket": (at["le"], lambda x: x.replace('le="0.1"', 'le="0.10"')),
        "position 1 is already": (at["pos"], lambda x: x.replace('"1"', '"01"')),
        "position label": (at["pos"], lambda x: x.replace('position="1"', 'position="\u0661"')),
        "never negative": (at["drafts"], lambda x: x.replace(" ", " -", 1)),
    }
    for words, (i, change) in cases.items():
        known(text)
        mutated = "\n".join([*lines[:i], change(lines[i]), *lines[i + 1 :]])
        if "already" in words or "duplicate" in words:  # a second spelling after the first
            mutated = "\n".join([*lines[: i + 1], change(lines[i]), *lines[i + 1 :]])
        with pytest.raises(ExpositionError, match=words) as info:
            parse(mutated)
        assert fast(mutated) == line_path(mutated) == info.value.line > 0
    eof = "\n".join([*lines[:3], "# EOF", *lines[3:]])
    assert fast(eof) == line_path(eof) == 5

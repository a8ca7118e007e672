"""The exposition parser: the real vLLM capture, the other formats vLLM serves, malformed text,
and a fuzz run that may only ever produce a Page or an ExpositionError."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from alphagate import vllm
from alphagate.errors import ExpositionError, SourceErrorKind
from alphagate.sources.exposition import decode, parse
from alphagate.sources.page import Counter as C
from alphagate.sources.page import Gauge as G
from alphagate.sources.page import Hist, Page
from alphagate.sources.page_builder import parse_number
from alphagate_lab.testing.client_parse import parse as parse_with_client

REAL = Path(__file__).resolve().parent / "data" / "vllm-real-metrics.txt"


def real_capture() -> str:
    """The real vLLM capture; the repo keeps a copy for tests (tests/sources/data)."""
    if not REAL.exists():
        pytest.skip(f"{REAL} missing")
    return REAL.read_text()


def tiny(page: Page):  # type: ignore[no-untyped-def]
    (series,) = page.matching({"model_name": "tiny-chat"})
    return series


# ------------------------------------------------------------------------- the real capture


def test_real_capture_numbers() -> None:
    page = parse(real_capture())
    s = tiny(page)
    assert s.model_name == "tiny-chat" and s.engine == "0" and s.speculating
    assert s.counters[C.DRAFTS] == 277 and s.counters[C.DRAFT_TOKENS] == 666
    assert s.counters[C.ACCEPTED] == 96 and s.counters[C.GENERATION_TOKENS] == 1305
    assert s.per_position == {0: 49, 1: 17, 2: 16, 3: 14}
    assert sum(s.per_position.values()) == s.counters[C.ACCEPTED]
    itl = s.histograms[Hist.ITL]
    assert itl.count == 1181 and itl.buckets[math.inf] == 1181 and itl.buckets[0.01] == 1096
    assert len(itl.buckets) == len(vllm.ITL_BUCKETS) + 1
    assert itl.sum == pytest.approx(5.825387919999969)
    b = itl.to_buckets()
    assert b.bounds[-1] == math.inf and b.total == 1181
    # `_created` gauges are read as created stamps, never as counter values
    assert s.created[C.DRAFTS] == pytest.approx(1.7959978828351934e09)
    assert s.histograms[Hist.TPOT].count == 31


def test_real_capture_output_lengths_and_running_gauge() -> None:
    """vllm:request_generation_tokens (one observation per finished request) and the
    vllm:num_requests_running gauge, as the real capture spells them."""
    s = tiny(parse(real_capture()))
    lengths = s.histograms[Hist.OUTPUT_LENGTH]
    assert lengths.count == 31 and lengths.sum == 1305  # = generation_tokens_total
    assert lengths.buckets[50.0] == 13 and lengths.buckets[100.0] == 31
    assert lengths.created == pytest.approx(1.7959978828362174e09)
    assert s.gauges[G.RUNNING] == 0.0
    # a gauge is never read as a counter, and its absence is not a zero
    page = parse("vllm:generation_tokens_total 5\n")
    (only,) = page.series.values()
    assert G.RUNNING not in only.gauges


def test_fast_parser_equals_prometheus_client_on_real_capture() -> None:
    text = real_capture()
    assert parse(text) == parse_with_client(text) == parse_with_client(text, prefilter=True)


# ------------------------------------------------------------------------- other formats


def _registry(prefix: str = "vllm:") -> CollectorRegistry:
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    for name, value in (
        (vllm.SPEC_DRAFTS, 10),
        (vllm.SPEC_DRAFT_TOKENS, 40),
        (vllm.SPEC_ACCEPTED, 25),
    ):
        Counter(vllm.base(name), "h", labels, registry=reg).labels("m", "0").inc(value)
    pos = Counter(vllm.base(vllm.SPEC_PER_POS), "h", [*labels, "position"], registry=reg)
    for i, v in enumerate((9, 7, 5, 4)):
        pos.labels("m", "0", str(i)).inc(v)
    Counter(vllm.base(vllm.GENERATION_TOKENS), "h", labels, registry=reg).labels("m", "0").inc(77)
    h = Histogram(vllm.ITL, "h", labels, buckets=vllm.ITL_BUCKETS, registry=reg)
    for x in (0.005, 0.02, 0.02, 0.3):
        h.labels("m", "0").observe(x)
    return reg


def _check(page: Page) -> None:
    (s,) = page.matching({"model_name": "m", "engine": "0"})
    assert s.counters == {C.DRAFTS: 10, C.DRAFT_TOKENS: 40, C.ACCEPTED: 25, C.GENERATION_TOKENS: 77}
    assert s.per_position == {0: 9, 1: 7, 2: 5, 3: 4}
    itl = s.histograms[Hist.ITL]
    assert itl.count == 4 and itl.buckets[0.025] == 3 and itl.buckets[math.inf] == 4


def test_classic_text_from_prometheus_client() -> None:
    text = generate_latest(_registry()).decode()
    _check(parse(text))
    assert parse(text) == parse_with_client(text)


def test_openmetrics_with_eof() -> None:
    text = generate_openmetrics(_registry()).decode()
    assert text.rstrip().endswith("# EOF")
    _check(parse(text))


def test_escaped_underscore_names() -> None:
    """What a Prometheus 2 scrape sees from prometheus_client >= 0.23: vllm_ sample names."""
    text = generate_latest(_registry()).decode()
    escaped = "\n".join(
        line.replace("vllm:", "vllm_", 1) if not line.startswith("#") else line
        for line in text.split("\n")
    )
    assert "vllm_spec_decode_num_drafts_total{" in escaped
    _check(parse(escaped))


def test_multiprocess_layout_without_created() -> None:
    text = "\n".join(
        [
            "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 60.0',
            'vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.9',
            'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 3.0',
            'vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 40.0',
            'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 40.0',
        ]
    )
    (s,) = parse(text).series.values()
    assert s.speculating and s.created == {}
    assert s.histograms[Hist.ITL].sum == 0.9 and s.histograms[Hist.ITL].buckets == {
        0.01: 3,
        math.inf: 40,
    }


def test_speculation_off_page_has_no_spec_counters() -> None:
    text = 'vllm:generation_tokens_total{engine="0",model_name="m"} 5\n'
    (s,) = parse(text).series.values()
    assert not s.speculating and s.counters == {C.GENERATION_TOKENS: 5}


def test_labels_with_escapes_commas_and_braces() -> None:
    text = (
        'vllm:generation_tokens_total{model_name="a,b}\\"c\\\\d\\n",engine="1",} 3 1700000000000\n'
    )
    (s,) = parse(text).series.values()
    assert s.model_name == 'a,b}"c\\d\n' and s.engine == "1"
    assert parse(text) == parse_with_client(text)


def test_multiple_engines_are_separate_series() -> None:
    lines = [f'vllm:spec_decode_num_drafts_total{{engine="{e}",model_name="m"}} {e}0' for e in "01"]
    page = parse("\n".join(lines))
    assert sorted(s.counters[C.DRAFTS] for s in page.matching({"model_name": "m"})) == [0, 10]


# ------------------------------------------------------------------------- malformed


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("<html><body>502 Bad Gateway</body></html>", 1, "expected a metric name"),
        ('ok 1\nvllm:generation_tokens_total{engine="0" 5\n', 2, "label"),
        ('vllm:generation_tokens_total{engine="0"} five\n', 1, "bad value"),
        ('vllm:generation_tokens_total{engine="0"}\n', 1, "missing value"),
        ('vllm:generation_tokens_total{engine="0"} 1_000\n', 1, "bad value"),
        ("vllm:generation_tokens_total{engine=0} 1\n", 1, "label"),
        ('vllm:generation_tokens_total{engine="0",engine="1"} 1\n', 1, "duplicate label"),
        ("vllm:generation_tokens_total 1\nvllm:generation_tokens_total 2\n", 2, "duplicate sample"),
        ('vllm:generation_tokens_total{a="1"}3\n', 1, "space before the value"),
        ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n', 1, "position"),
        ('vllm:inter_token_latency_seconds_bucket{le="fast"} 1\n', 1, "le label"),
        ('vllm:inter_token_latency_seconds_bucket{le="0.1"} 1\n', 1, "+Inf"),
        ("# HELP x\nsome$metric 1\n", 2, "expected a space"),
        ('ok 1\nother{a="1" 2\n', 2, "unterminated"),
        ("ok 1\nother\n", 2, "expected a space"),
    ],
)
def test_malformed_pages_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(ExpositionError) as info:
        parse(text, target="pod-a")
    err = info.value
    assert err.kind is SourceErrorKind.PARSE and err.line == line
    assert words in str(err) and "pod-a" in str(err) and f"line {line}" in str(err)


ARABIC_INDIC_12 = "\u0661\u0662"  # what Python's float() reads as 12.0
FULLWIDTH_3 = "\uff13"  # a fullwidth 3, also a float() for Python


@pytest.mark.parametrize(
    ("text", "line", "token"),
    [
        (
            f'ok 1\nvllm:generation_tokens_total{{engine="0"}} {ARABIC_INDIC_12}\n',
            2,
            ARABIC_INDIC_12,
        ),
        (f"vllm:generation_tokens_total {FULLWIDTH_3}\n", 1, FULLWIDTH_3),
        (f"vllm:generation_tokens_total 3 {ARABIC_INDIC_12}\n", 1, ARABIC_INDIC_12),  # timestamp
        (
            f"vllm:spec_decode_num_drafts_total 1\nvllm:spec_decode_num_draft_tokens_total"
            f'{{model_name="m"}} 1{ARABIC_INDIC_12}\n',
            2,
            f"1{ARABIC_INDIC_12}",
        ),
    ],
)
def test_non_ascii_digits_are_a_parse_error_naming_the_line(
    text: str, line: int, token: str
) -> None:
    for strict in (False, True):
        with pytest.raises(ExpositionError) as info:
            parse(text, target="pod-a", strict=strict)
        err = info.value
        assert err.kind is SourceErrorKind.PARSE and err.line == line and err.target == "pod-a"
        assert token in str(err)  # the offending number is shown to the operator


def test_non_ascii_digits_in_a_bucket_bound_are_refused() -> None:
    text = f'vllm:inter_token_latency_seconds_bucket{{le="0.{ARABIC_INDIC_12}"}} 1\n'
    with pytest.raises(ExpositionError) as info:
        parse(text, target="pod-a")
    assert info.value.kind is SourceErrorKind.PARSE and info.value.line == 1


@pytest.mark.parametrize("token", ["12", "-1.5e3", "+Inf", "-Inf", "NaN"])
def test_parse_number_reads_what_prometheus_writes(token: str) -> None:
    value = parse_number(token)
    assert value == value or token == "NaN"  # NaN is the one value unequal to itself


@pytest.mark.parametrize("token", [ARABIC_INDIC_12, FULLWIDTH_3, "1_000", " 1", "1\u00a0"])
def test_parse_number_refuses_what_float_would_take(token: str) -> None:
    with pytest.raises(ValueError):
        parse_number(token)


def test_truncated_real_capture_is_an_error_or_a_smaller_page() -> None:
    text = real_capture()
    cut = text.index("vllm:inter_token_latency_seconds_bucket") + 60  # inside the histogram
    with pytest.raises(ExpositionError, match=r"line \d+"):
        parse(text[:cut])


def test_invalid_utf8_names_the_line() -> None:
    with pytest.raises(ExpositionError) as info:
        decode(b"a 1\nb 2\n\xff\xfe 3\n")
    assert info.value.line == 3


def test_client_reference_path_also_names_the_line() -> None:
    with pytest.raises(ExpositionError) as info:
        parse_with_client('ok 1\nvllm:generation_tokens_total{engine="0" 5\n')
    assert info.value.line == 2


# ------------------------------------------------------------------------- fuzz


def _outcome(text: str) -> None:
    try:
        page = parse(text)
    except ExpositionError as err:
        assert err.kind is SourceErrorKind.PARSE and err.line >= 0
        return
    assert isinstance(page, Page)
    for s in page.series.values():
        for h in s.histograms.values():
            assert math.inf in h.buckets


_ALPHABET = st.sampled_from([*'vllm:_spec{}="\\,# \t\n0123456789.+-eInfNa', "\r", "é", "\x00"])


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.text(_ALPHABET, max_size=200))
def test_fuzz_garbage(text: str) -> None:
    _outcome(text)


@given(data=st.data())
def test_fuzz_truncations_and_mutations_of_real_capture(data: st.DataObject) -> None:
    text = _sample()
    cut = data.draw(st.integers(0, len(text)))
    mutated = text[:cut]
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(0, max(0, len(mutated) - 1)))
        junk = data.draw(st.text(_ALPHABET, max_size=8))
        mutated = mutated[:pos] + junk + mutated[pos + 1 :]
    _outcome(mutated)


def _sample() -> str:
    """The vLLM lines of the real capture (fuzzing all 55 KB per example would be slow)."""
    text = real_capture()
    keep = [
        line
        for line in text.split("\n")
        if "spec_decode" in line or "inter_token" in line or "generation_tokens_total" in line
    ]
    return "\n".join(keep)


@given(
    st.lists(st.integers(0, 10**9), min_size=4, max_size=4),
    st.lists(st.floats(0, 100, allow_nan=False), max_size=20),
    st.sampled_from(["m", "a b", 'q"uote', "x,y"]),
)
def test_fast_parser_matches_client_on_generated_pages(
    counts: list[int], itl: list[float], model: str
) -> None:
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    for name, value in zip(
        (vllm.SPEC_DRAFTS, vllm.SPEC_DRAFT_TOKENS, vllm.SPEC_ACCEPTED, vllm.GENERATION_TOKENS),
        counts,
        strict=True,
    ):
        Counter(vllm.base(name), "h", labels, registry=reg).labels(model, "0").inc(value)
    h = Histogram(vllm.ITL, "h", labels, buckets=vllm.ITL_BUCKETS, registry=reg)
    for x in itl:
        h.labels(model, "0").observe(x)
    text = generate_latest(reg).decode()
    assert parse(text) == parse_with_client(text)


# ------------------------------------------------------------------------- lenient and strict


def test_other_families_are_not_read_unless_strict() -> None:
    """Only our families are parsed; `strict` (alphagate inspect) checks every line."""
    text = real_capture() + 'http_requests_total{a="1" 2\n'
    assert parse(text) == parse(real_capture()) == parse(real_capture(), strict=True)
    with pytest.raises(ExpositionError) as info:
        parse(text, strict=True)
    assert info.value.line == real_capture().count("\n") + 1


def test_cached_label_sets_keep_reporting_errors_and_values() -> None:
    """Label texts are parsed once per process: a second page with the same texts still gets
    its own values, and a bad label set is still an error the second time."""
    line = 'vllm:generation_tokens_total{engine="0",engine="1"} 1\n'
    for _ in range(2):
        with pytest.raises(ExpositionError, match="duplicate label"):
            parse(line)
    for value in (3.0, 5.0):
        page = parse(f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {value}\n')
        assert tiny_or_m(page).counters[C.GENERATION_TOKENS] == value


def tiny_or_m(page: Page):  # type: ignore[no-untyped-def]
    (series,) = page.matching({"model_name": "m"})
    return series


def test_comments_and_label_values_that_name_our_samples_are_not_samples() -> None:
    text = (
        "# HELP vllm:generation_tokens_total 7\n"
        'other{v="vllm:generation_tokens_total 9"} 1\n'
        '  vllm:generation_tokens_total{model_name="m"} 4\n'
    )
    assert tiny_or_m(parse(text)).counters == {C.GENERATION_TOKENS: 4}
    assert parse(text) == parse_with_client(text)

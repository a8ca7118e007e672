"""Read the few vLLM families alphagate needs from one /metrics page.

A vLLM pod's page is ~55 KB and ~650 lines; alphagate needs about 60 of them (the four
speculative-decoding counters, generated tokens, and two latency histograms). :func:`parse`
finds those samples with one regex scan in C (about as fast as ``str.splitlines`` on the page)
and never touches the other lines in Python; label texts, the same on every pod of a model, are
parsed once and cached. Together that is ~50x ``prometheus_client`` on the real capture (see
``alphagate.bench.fleet``). A page without any of our lines (an HTML error page served with
200, garbage) gets the full line-by-line check, so it is an error naming its line, never an
empty page. :func:`parse_with_client` reads the same page through ``prometheus_client.parser``
and gives the same :class:`Page`: it is the reference the fast path is tested against.

Both accept the classic text format (0.0.4), OpenMetrics (``# EOF``, exemplars, timestamps)
and the escaped ``vllm_`` sample names Prometheus 2 scrapes produce. Malformed samples of our
families raise :class:`~alphagate.errors.ExpositionError` naming the 1-based line. Sample names
are matched exactly: ``..._created`` gauges are never mistaken for counters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, NamedTuple

from alphagate import vllm
from alphagate.core.model import Buckets
from alphagate.errors import ExpositionError

# What prometheus_client's text parser raises on a bad page: no error type of its own, just
# ValueError (bad numbers, labels), LookupError (IndexError/KeyError on cut-off lines), and
# TypeError/AttributeError from half-parsed pieces.
PARSE_ERRORS: Final = (ValueError, LookupError, TypeError, AttributeError)

# --------------------------------------------------------------------------- data


class Counter(Enum):
    """The counters alphagate reads; values are the ``vllm:`` family base names."""

    DRAFTS = vllm.SPEC_DRAFTS
    DRAFT_TOKENS = vllm.SPEC_DRAFT_TOKENS
    ACCEPTED = vllm.SPEC_ACCEPTED
    GENERATION_TOKENS = vllm.GENERATION_TOKENS

    # Members are singletons compared by identity: hash them in C, not through Enum's Python
    # __hash__ (called once per sample line, it was a tenth of the parse).
    __hash__ = object.__hash__


class Hist(Enum):
    """The histograms alphagate reads; values are the ``vllm:`` family base names."""

    ITL = vllm.ITL
    TPOT = vllm.TPOT
    OUTPUT_LENGTH = vllm.REQUEST_GENERATION_TOKENS  # tokens per finished request

    __hash__ = object.__hash__  # as for Counter


class Gauge(Enum):
    """The gauges alphagate reads (a value now, not an increment)."""

    RUNNING = vllm.RUNNING

    __hash__ = object.__hash__  # as for Counter


SPEC_COUNTERS: Final = (Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.ACCEPTED)

LabelKey = tuple[tuple[str, str], ...]
"""A series' identity: its labels minus ``le``/``position``, sorted by name."""


@dataclass(slots=True)
class Histogram:
    """Cumulative buckets of one histogram series: ``le`` bound -> count."""

    buckets: dict[float, float] = field(default_factory=dict)
    count: float = math.nan
    sum: float = math.nan
    created: float | None = None

    def to_buckets(self) -> Buckets:
        bounds = tuple(sorted(self.buckets))
        return Buckets(bounds, tuple(self.buckets[b] for b in bounds), self.sum)


@dataclass(slots=True)
class Series:
    """Everything alphagate reads for one label set (in vLLM: one model_name and engine)."""

    labels: LabelKey
    counters: dict[Counter, float] = field(default_factory=dict)
    created: dict[Counter, float] = field(default_factory=dict)
    per_position: dict[int, float] = field(default_factory=dict)
    per_position_created: dict[int, float] = field(default_factory=dict)
    histograms: dict[Hist, Histogram] = field(default_factory=dict)
    gauges: dict[Gauge, float] = field(default_factory=dict)

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def model_name(self) -> str:
        return self.label_map.get(vllm.MODEL_NAME, "")

    @property
    def engine(self) -> str:
        return self.label_map.get(vllm.ENGINE, "")

    @property
    def speculating(self) -> bool:
        """The spec-decode counters exist, i.e. the pod runs with --speculative-config."""
        return all(c in self.counters for c in SPEC_COUNTERS)


@dataclass(slots=True)
class Page:
    """The parsed page: series keyed by their label set."""

    series: dict[LabelKey, Series] = field(default_factory=dict)

    def matching(self, match_labels: Mapping[str, str]) -> list[Series]:
        """Series whose labels carry every given label with the given value."""
        items = tuple(match_labels.items())
        return [s for s in self.series.values() if all(kv in s.labels for kv in items)]


# --------------------------------------------------------------------------- name table


class _Want(NamedTuple):
    """What one sample name carries: its kind, its family, and its ``vllm:`` spelling."""

    kind: str  # bucket, count, sum, hist_created, counter, counter_created, pos, pos_created,
    # gauge
    family: Counter | Hist | Gauge | None
    name: str


def _table() -> dict[str, _Want]:
    out: dict[str, _Want] = {}
    for c in Counter:
        b = vllm.base(c.value)
        out[b + vllm.TOTAL] = _Want("counter", c, b + vllm.TOTAL)
        out[b + vllm.CREATED] = _Want("counter_created", c, b + vllm.CREATED)
    per_pos = vllm.base(vllm.SPEC_PER_POS)
    out[per_pos + vllm.TOTAL] = _Want("pos", None, per_pos + vllm.TOTAL)
    out[per_pos + vllm.CREATED] = _Want("pos_created", None, per_pos + vllm.CREATED)
    for h in Hist:
        for kind, suffix in (
            ("bucket", vllm.BUCKET),
            ("count", vllm.COUNT),
            ("sum", vllm.SUM),
            ("hist_created", vllm.CREATED),
        ):
            out[h.value + suffix] = _Want(kind, h, h.value + suffix)
    for g in Gauge:
        out[g.value] = _Want("gauge", g, g.value)
    for name in list(out):
        out[vllm.escaped(name)] = out[name]
    return out


WANTED: Final = _table()
"""Exact sample names read (both spellings) -> what they carry."""

_NAME_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_NAME_RE: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE: Final = re.compile(
    r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*'
)
_ESCAPES: Final = re.compile(r"\\(.)")
_ESCAPE_MAP: Final = {"n": "\n", "\\": "\\", '"': '"'}
_SKIP_LABELS: Final = frozenset((vllm.LE, vllm.POSITION))


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPES.sub(lambda m: _ESCAPE_MAP.get(m.group(1), "\\" + m.group(1)), value)


def parse_number(token: str) -> float:
    """A number as Prometheus writes it (Go's ParseFloat): ASCII only, no underscores, no
    spaces. Python's float() also takes `١٢٣` (Arabic-Indic digits), `1_000` and padding;
    a page or an answer carrying those is malformed, not a number. Raises ValueError."""
    if not token.isascii() or "_" in token or token != token.strip():
        raise ValueError(f"not an ASCII number: {token!r}")
    return float(token)


_parse_value = parse_number


# --------------------------------------------------------------------------- fast path


def _family_prefixes() -> str:
    """The part of our sample names after ``vllm:`` that tells our families from the rest."""
    stems = {n[5:] for n in WANTED}
    prefixes = {"spec_decode_num_", "generation_tokens_", vllm.base(vllm.ITL)[5:] + "_"}
    prefixes.add(vllm.base(vllm.TPOT)[5:] + "_")
    prefixes.add(vllm.REQUEST_GENERATION_TOKENS[5:] + "_")
    prefixes |= {g.value[5:] for g in Gauge}
    assert all(any(s.startswith(p) for p in prefixes) for s in stems)  # import-time self-check
    return "|".join(sorted(prefixes))


_SAMPLE_AFTER_NAME: Final = (
    r'(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*",?)*)\})?[ \t]+([^ \t\r\n#]+)[ \t\r]*(?=\n|\Z)'
    r"|([^\n]*))"
)
_FIND: Final = re.compile(
    rf"(vllm[:_](?:{_family_prefixes()})[a-zA-Z0-9_:]*)(?:" + _SAMPLE_AFTER_NAME
)
"""A sample of one of our families, anywhere in the page: its name, then either the usual rest
(plain labels, one value) or, for anything else, the raw rest of the line for the full path.
The literal prefix and short literal branches keep this one scan in C about as fast as
``str.splitlines``."""
_PAIR: Final = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')

_LabelSet = tuple[dict[str, str], tuple[tuple[str, str], ...], LabelKey, float]
"""A label set as parsed once: the labels, sorted, the series key (minus le/position), and
the ``le`` bound (NaN when absent or not a number)."""

_LABEL_SETS: dict[str, _LabelSet | None] = {}
"""Raw label text -> its parse (None: a duplicate label, for the full path to report). Every pod
of a model serves the same label texts, so across a fleet almost every line hits. Bounded."""
_LABEL_SETS_MAX: Final = 4096
_LABEL_TEXT_CACHED: Final = 512
"""Longer label texts are not cached, so the cache stays under 4096 x 512 characters."""
MAX_SERIES: Final = 1024
"""Distinct label sets of our families on one page. vLLM has one per model and engine; a
page past this (a label with a value per line) would cost the parser ~1 KB per line and the
pod-scrape source keeps the last page of every pod, so it is refused."""


def _label_set(inside: str) -> _LabelSet | None:
    """The parse of plain label text (already checked by _FIND), cached."""
    got = _LABEL_SETS.get(inside, False)
    if got is not False:
        return got  # type: ignore[return-value]
    found = _PAIR.findall(inside)
    labels = dict(found)
    result: _LabelSet | None = None
    if len(labels) == len(found):
        result = _labelled(labels)
    if len(inside) > _LABEL_TEXT_CACHED:  # a hostile label text is parsed, never kept
        return result
    if len(_LABEL_SETS) >= _LABEL_SETS_MAX:
        _LABEL_SETS.clear()
    _LABEL_SETS[inside] = result
    return result


def _labelled(labels: dict[str, str]) -> _LabelSet:
    items = tuple(sorted(labels.items()))
    key = items
    if vllm.LE in labels or vllm.POSITION in labels:
        key = tuple(kv for kv in items if kv[0] not in _SKIP_LABELS)
    le = labels.get(vllm.LE)
    try:
        bound = _parse_value(le) if le is not None else math.nan
    except ValueError:
        bound = math.nan
    return (labels, items, key, bound)


_NO_LABELS: Final[_LabelSet] = ({}, (), (), math.nan)


def parse(text: str, *, target: str = "", strict: bool = False) -> Page:
    """Parse the needed families of one page. Raises ExpositionError naming the line.

    Only the lines of the families alphagate reads are looked at (found by one regex scan, about
    as fast as ``str.splitlines``); other lines are neither parsed nor checked. A page with none
    of those lines gets the full line-by-line check, so an HTML error page or garbage served
    with status 200 is an error naming its line, not an empty page. `strict` checks the shape
    of every line (for ``alphagate inspect``: a person asked about this page)."""
    if strict:
        return _parse_every_line(text, target)
    builder = _Builder(target, text)
    add, add_parsed = builder.add, builder.add_parsed
    wanted = WANTED
    label_set = _label_set
    found = False
    for m in _FIND.finditer(text):
        start = m.start()
        if start and text[start - 1] != "\n":
            begin = text.rfind("\n", 0, start) + 1
            if text[begin:start].strip():
                continue  # in a comment, a label value or another name: not a sample line
        name, inside, token, other = m.groups()
        what = wanted.get(name)
        if what is None:
            continue
        found = True
        if other is None and "_" not in token and token.isascii():
            got = label_set(inside) if inside else _NO_LABELS
            try:
                value = float(token)
            except ValueError:
                value = math.nan  # not a number: the full path says so
            if got is not None and value == value:  # else the full path
                add_parsed(what, name, got, value, start)
                continue
        line = name + (other if other is not None else text[m.end(1) : m.end()]).rstrip()
        try:
            labels, value = _parse_sample_rest(line, len(name))
        except _Bad as bad:
            raise builder.error(str(bad), start) from None
        add(what, name, labels, value, start)
    if not found:
        return _parse_every_line(text, target)
    return builder.finish()


def _parse_every_line(text: str, target: str) -> Page:
    """The same result, checking the shape of every line (used for pages without our lines)."""
    builder = _Builder(target, text)
    wanted = WANTED
    offset = 0
    for lineno, raw in enumerate(text.split("\n"), 1):
        at, offset = offset, offset + len(raw) + 1  # the line's offset, for later errors
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        first = line[0]
        if first == "{":  # UTF-8 quoted name (OpenMetrics allow-utf-8): never one of ours
            if "}" not in line:
                raise ExpositionError("unterminated label set", line=lineno, target=target)
            continue
        if first not in _NAME_START:
            raise ExpositionError(
                f"expected a metric name, got {_excerpt(line)!r}", line=lineno, target=target
            )
        m = _NAME_RE.match(line)
        assert m is not None  # first char checked
        name = m.group()
        what = wanted.get(name)
        if what is None:  # not ours: only a cheap shape check (name, labels closed, a value)
            rest = line[m.end() :]
            if rest and rest[0] == "{":
                close = rest.rfind("}")
                if close < 0:
                    raise ExpositionError(
                        f"unterminated label set in {_excerpt(line)!r}", line=lineno, target=target
                    )
                rest = rest[close + 1 :]
            if not rest or rest[0] not in " \t" or not rest.strip():
                raise ExpositionError(
                    f"expected a space and a value after {_excerpt(line)!r}",
                    line=lineno,
                    target=target,
                )
            continue
        try:
            labels, value = _parse_sample_rest(line, m.end())
        except _Bad as bad:
            raise ExpositionError(str(bad), line=lineno, target=target) from None
        builder.add(what, name, labels, value, at)
    return builder.finish()


def _parse_sample_rest(line: str, pos: int) -> tuple[dict[str, str], float]:
    """Labels and value of one sample line after its name (at `pos`); raises _Bad."""
    labels: dict[str, str] = {}
    n = len(line)
    if pos < n and line[pos] == "{":
        pos += 1
        while True:
            while pos < n and line[pos] in " \t":
                pos += 1
            if pos < n and line[pos] == "}":
                pos += 1
                break
            m = _LABEL_RE.match(line, pos)
            if m is None:
                raise _Bad(f"malformed label set in {_excerpt(line)!r}")
            key = m.group(1)
            if key in labels:
                raise _Bad(f"duplicate label {key!r} in {_excerpt(line)!r}")
            labels[key] = _unescape(m.group(2))
            pos = m.end()
            if pos < n and line[pos] == ",":
                pos += 1
            elif pos < n and line[pos] == "}":
                pos += 1
                break
            else:
                raise _Bad(f"expected ',' or '}}' in labels of {_excerpt(line)!r}")
    rest = line[pos:]
    if rest and rest[0] not in " \t":
        raise _Bad(f"expected a space before the value in {_excerpt(line)!r}")
    tokens = rest.split()
    if not tokens:
        raise _Bad(f"missing value in {_excerpt(line)!r}")
    try:
        value = _parse_value(tokens[0])
        if len(tokens) > 1 and tokens[1] != "#":  # a timestamp; then maybe an exemplar
            _parse_value(tokens[1])
            if len(tokens) > 2 and tokens[2] != "#":
                raise ValueError(tokens[2])
    except ValueError:
        odd = next((t for t in tokens[:2] if not t.isascii()), None)
        if odd is not None:
            raise _Bad(
                f"non-ASCII characters in the number {_excerpt(odd, 40)!r} of {_excerpt(line)!r}"
            ) from None
        raise _Bad(f"bad value or timestamp in {_excerpt(line)!r}") from None
    return labels, value


def _excerpt(line: str, limit: int = 120) -> str:
    return line if len(line) <= limit else line[:limit] + "..."


class _Bad(Exception):
    """A malformed sample line (the message); the caller adds where it is."""


class _Builder:
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

    def add(self, what: _Want, name: str, labels: dict[str, str], value: float, at: int) -> None:
        self.add_parsed(what, name, _labelled(labels), value, at)

    def add_parsed(
        self, what: _Want, name: str, label_set: _LabelSet, value: float, at: int
    ) -> None:
        labels, items, key, bound = label_set
        ident = (what.name, items)
        seen = self.seen
        if ident in seen:
            raise self.error(f"duplicate sample {name}{{{_fmt(labels)}}}", at)
        seen.add(ident)
        kind, fam = what.kind, what.family
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
            if raw is None or not raw.isdigit() or len(raw) > 6:
                raise self.error(f"{name} needs a numeric position label, got {raw!r}", at)
            if kind == "pos":
                series.per_position[int(raw)] = value
            else:
                series.per_position_created[int(raw)] = value

    def finish(self) -> Page:
        for (key, fam), at in self.hist_at.items():
            hist = self.page.series[key].histograms[fam]
            if math.inf not in hist.buckets:
                raise self.error(
                    f"histogram {fam.value}{{{_fmt(dict(key))}}} has no +Inf bucket "
                    "(truncated page?)",
                    at,
                )
        return self.page


def _fmt(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


# --------------------------------------------------------------------------- reference path


def parse_with_client(text: str, *, target: str = "", prefilter: bool = False) -> Page:
    """The same result through prometheus_client's parser (the reference implementation).

    `prefilter` drops lines of families we do not read before parsing (a cheap speed-up that
    keeps the client's parsing of the lines that matter)."""
    from prometheus_client.parser import text_string_to_metric_families

    if prefilter:
        text = "\n".join(_prefiltered(text.split("\n")))
    builder = _Builder(target)
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
    from prometheus_client.parser import _parse_sample

    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            _parse_sample(line)  # type: ignore[no-untyped-call]
        except PARSE_ERRORS:
            return lineno
    return 0


def decode(body: bytes, *, target: str = "") -> str:
    """Bytes of a page as text; invalid UTF-8 is an ExpositionError naming the line."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body.count(b"\n", 0, exc.start) + 1
        raise ExpositionError("invalid UTF-8", line=line, target=target) from None

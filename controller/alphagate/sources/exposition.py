"""Read the few vLLM families alphagate needs from one /metrics page.

A vLLM pod's page is ~55 KB and ~650 lines; alphagate needs about 60 of them (the four
speculative-decoding counters, generated tokens, and two latency histograms). :func:`parse`
looks only at those samples and skips every other line after a cheap name check, which is
several times faster than a full parse (see ``alphagate.bench.sources``). :func:`parse_with_client`
reads the same page through ``prometheus_client.parser`` and gives the same :class:`Page`: it
is the reference the fast path is tested against.

Both accept the classic text format (0.0.4), OpenMetrics (``# EOF``, exemplars, timestamps)
and the escaped ``vllm_`` sample names Prometheus 2 scrapes produce. Malformed text raises
:class:`~alphagate.errors.ExpositionError` naming the 1-based line. Sample names are matched
exactly: ``..._created`` gauges are never mistaken for counters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from alphagate import vllm
from alphagate.core.model import Buckets
from alphagate.errors import ExpositionError

# --------------------------------------------------------------------------- data


class Counter(Enum):
    """The counters alphagate reads; values are the ``vllm:`` family base names."""

    DRAFTS = vllm.SPEC_DRAFTS
    DRAFT_TOKENS = vllm.SPEC_DRAFT_TOKENS
    ACCEPTED = vllm.SPEC_ACCEPTED
    GENERATION_TOKENS = vllm.GENERATION_TOKENS


class Hist(Enum):
    """The histograms alphagate reads; values are the ``vllm:`` family base names."""

    ITL = vllm.ITL
    TPOT = vllm.TPOT


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

# kinds: counter, counter_created, pos, pos_created, bucket, count, sum, hist_created


def _table() -> dict[str, tuple[str, Counter | Hist | None]]:
    out: dict[str, tuple[str, Counter | Hist | None]] = {}
    for c in Counter:
        b = vllm.base(c.value)
        out[b + vllm.TOTAL] = ("counter", c)
        out[b + vllm.CREATED] = ("counter_created", c)
    per_pos = vllm.base(vllm.SPEC_PER_POS)
    out[per_pos + vllm.TOTAL] = ("pos", None)
    out[per_pos + vllm.CREATED] = ("pos_created", None)
    for h in Hist:
        out[h.value + vllm.BUCKET] = ("bucket", h)
        out[h.value + vllm.COUNT] = ("count", h)
        out[h.value + vllm.SUM] = ("sum", h)
        out[h.value + vllm.CREATED] = ("hist_created", h)
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


def _parse_value(token: str) -> float:
    """A sample value as Prometheus writes it (Go ParseFloat: no underscores)."""
    if "_" in token:
        raise ValueError(token)
    return float(token)


# --------------------------------------------------------------------------- fast path


def parse(text: str, *, target: str = "") -> Page:
    """Parse the needed families of one page. Raises ExpositionError naming the line."""
    builder = _Builder(target)
    wanted = WANTED
    for lineno, raw in enumerate(text.split("\n"), 1):
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
        labels, value = _parse_sample_rest(line, m.end(), lineno, target)
        builder.add(what, name, labels, value, lineno)
    return builder.finish()


def _parse_sample_rest(
    line: str, pos: int, lineno: int, target: str
) -> tuple[dict[str, str], float]:
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
                raise ExpositionError(
                    f"malformed label set in {_excerpt(line)!r}", line=lineno, target=target
                )
            key = m.group(1)
            if key in labels:
                raise ExpositionError(
                    f"duplicate label {key!r} in {_excerpt(line)!r}", line=lineno, target=target
                )
            labels[key] = _unescape(m.group(2))
            pos = m.end()
            if pos < n and line[pos] == ",":
                pos += 1
            elif pos < n and line[pos] == "}":
                pos += 1
                break
            else:
                raise ExpositionError(
                    f"expected ',' or '}}' in labels of {_excerpt(line)!r}",
                    line=lineno,
                    target=target,
                )
    rest = line[pos:]
    if rest and rest[0] not in " \t":
        raise ExpositionError(
            f"expected a space before the value in {_excerpt(line)!r}", line=lineno, target=target
        )
    tokens = rest.split()
    if not tokens:
        raise ExpositionError(f"missing value in {_excerpt(line)!r}", line=lineno, target=target)
    try:
        value = _parse_value(tokens[0])
        if len(tokens) > 1 and tokens[1] != "#":  # a timestamp; then maybe an exemplar
            _parse_value(tokens[1])
            if len(tokens) > 2 and tokens[2] != "#":
                raise ValueError(tokens[2])
    except ValueError:
        raise ExpositionError(
            f"bad value or timestamp in {_excerpt(line)!r}", line=lineno, target=target
        ) from None
    return labels, value


def _excerpt(line: str, limit: int = 120) -> str:
    return line if len(line) <= limit else line[:limit] + "..."


class _Builder:
    """Collects samples into series and checks what a parser of single lines cannot."""

    __slots__ = ("hist_lines", "page", "seen", "target")

    def __init__(self, target: str) -> None:
        self.target = target
        self.page = Page()
        self.seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self.hist_lines: dict[tuple[LabelKey, Hist], int] = {}

    def add(
        self,
        what: tuple[str, Counter | Hist | None],
        name: str,
        labels: dict[str, str],
        value: float,
        lineno: int,
    ) -> None:
        ident = (vllm.unescaped(name), tuple(sorted(labels.items())))
        if ident in self.seen:
            raise ExpositionError(
                f"duplicate sample {name}{{{_fmt(labels)}}}", line=lineno, target=self.target
            )
        self.seen.add(ident)
        kind, fam = what
        key: LabelKey = tuple(sorted((k, v) for k, v in labels.items() if k not in _SKIP_LABELS))
        series = self.page.series.get(key)
        if series is None:
            series = self.page.series[key] = Series(key)
        if kind == "counter":
            assert isinstance(fam, Counter)
            series.counters[fam] = value
        elif kind == "counter_created":
            assert isinstance(fam, Counter)
            series.created[fam] = value
        elif kind in ("pos", "pos_created"):
            raw = labels.get(vllm.POSITION)
            if raw is None or not raw.isdigit() or len(raw) > 6:
                raise ExpositionError(
                    f"{name} needs a numeric position label, got {raw!r}",
                    line=lineno,
                    target=self.target,
                )
            if kind == "pos":
                series.per_position[int(raw)] = value
            else:
                series.per_position_created[int(raw)] = value
        else:
            assert isinstance(fam, Hist)
            hist = series.histograms.get(fam)
            if hist is None:
                hist = series.histograms[fam] = Histogram()
                self.hist_lines[(key, fam)] = lineno
            if kind == "bucket":
                le = labels.get(vllm.LE)
                try:
                    bound = _parse_value(le) if le is not None else math.nan
                except ValueError:
                    bound = math.nan
                if math.isnan(bound):
                    raise ExpositionError(
                        f"{name} needs a numeric le label, got {le!r}",
                        line=lineno,
                        target=self.target,
                    )
                hist.buckets[bound] = value
            elif kind == "count":
                hist.count = value
            elif kind == "sum":
                hist.sum = value
            else:
                hist.created = value

    def finish(self) -> Page:
        for (key, fam), lineno in self.hist_lines.items():
            hist = self.page.series[key].histograms[fam]
            if math.inf not in hist.buckets:
                raise ExpositionError(
                    f"histogram {fam.value}{{{_fmt(dict(key))}}} has no +Inf bucket "
                    "(truncated page?)",
                    line=lineno,
                    target=self.target,
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
    except Exception as exc:  # the client raises bare ValueError/IndexError/... on bad text
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
        except Exception:
            return lineno
    return 0


def decode(body: bytes, *, target: str = "") -> str:
    """Bytes of a page as text; invalid UTF-8 is an ExpositionError naming the line."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body.count(b"\n", 0, exc.start) + 1
        raise ExpositionError("invalid UTF-8", line=line, target=target) from None

"""Read the few vLLM families alphagate needs from one /metrics page.

A vLLM pod's page is ~55 KB and ~650 lines; alphagate needs about 60 of them (the four
speculative-decoding counters, generated tokens, and two latency histograms). :func:`parse`
finds those samples with one regex scan in C (about as fast as ``str.splitlines`` on the page)
and never touches the other lines in Python. Every pod of a model serves the same lines in the
same order: a page of a new shape is read line by line with every check, and a shape seen twice
is kept (:mod:`alphagate.sources.page_shape`), so a later page of that shape only has its values
converted. Together that is ~70x ``prometheus_client`` on the real capture (see
``alphagate_lab.bench.fleet``). A page without any of our lines (an HTML error page served with
200, garbage) gets the full line-by-line check, so it is an error naming its line, never an
empty page. The lab's ``alphagate_lab.testing.client_parse`` reads the same page through
``prometheus_client.parser`` and gives the same :class:`Page`: it is the reference the fast path
is tested against.

Both read the classic text format (0.0.4), OpenMetrics (``# EOF``, exemplars, timestamps)
and the escaped ``vllm_`` sample names Prometheus 2 scrapes produce; a line after ``# EOF``
is an error. Malformed samples of our
families raise :class:`~alphagate.errors.ExpositionError` naming the 1-based line. Sample names
are matched exactly: ``..._created`` gauges are never mistaken for counters.

What a page gives is in :mod:`alphagate.sources.page`; how samples become a Page (and what is
checked on the way) in :mod:`alphagate.sources.page_builder`.
"""

from __future__ import annotations

import math
import re
from typing import Final

from alphagate import vllm
from alphagate.errors import ExpositionError
from alphagate.sources.page import (
    Gauge,
    Page,
)
from alphagate.sources.page_builder import (
    WANTED,
    LabelSet,
    PageBuilder,
    Want,
    labelled,
    parse_number,
)
from alphagate.sources.page_shape import MAX_SHAPE_TEXT, MAX_SHAPES, Shape, compile_shape

_NAME_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_NAME_RE: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE: Final = re.compile(
    r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*'
)
_ESCAPES: Final = re.compile(r"\\(.)")
_ESCAPE_MAP: Final = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPES.sub(lambda m: _ESCAPE_MAP.get(m.group(1), "\\" + m.group(1)), value)


# --------------------------------------------------------------------------- fast path


def _family_prefixes() -> str:
    """The part of our sample names after ``vllm:`` that tells our families from the rest."""
    stems = {n[5:] for n in WANTED}
    prefixes = {"spec_decode_num_", "generation_tokens_", vllm.base(vllm.ITL)[5:] + "_"}
    prefixes.add(vllm.base(vllm.TPOT)[5:] + "_")
    prefixes.add(vllm.REQUEST_GENERATION_TOKENS[5:] + "_")
    prefixes.add(vllm.DECODE_TIME[5:] + "_")
    prefixes |= {g.value[5:] for g in Gauge}
    assert all(any(s.startswith(p) for p in prefixes) for s in stems)  # import-time self-check
    return "|".join(sorted(prefixes))


_NAME_AT_LINE_START: Final = rf"\n[ \t]*(vllm[:_](?:{_family_prefixes()})[a-zA-Z0-9_:]*)"
_LINE: Final = re.compile(_NAME_AT_LINE_START + r"([^\n]*)")
"""A line of one of our families (searched in the page with a newline in front): its sample
name and the raw rest of the line. Only line starts match, so names in comments and label
values are never looked at; the literal newline and prefix keep the scan in C."""
_EOF: Final = "# EOF"
_ROW: Final = re.compile(
    rf"\n[ \t]*(vllm[:_](?:{_family_prefixes()})[a-zA-Z0-9_:]*|{_EOF})"
    r"(?:(?:\{([^}\n]*)\})?[ \t]+([^ \t\r\n#]+)[ \t\r]*(?=\n|\Z)|[^\n]*)"
)
"""The same lines as (name, label text, value): a line of another form (a timestamp, an
exemplar, anything malformed) gives an empty value, and the page goes the line path. A line
starting `# EOF` is a row too (name `# EOF`), so an OpenMetrics end is found in the same scan
(a `str.find` of it cost a sixth of a page's parse)."""
_PLAIN_LABELS: Final = re.compile(r'(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*",?)*')
"""Label text the fast paths read: no escapes, no quotes or braces inside values."""
_PAIR: Final = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')


_LABEL_SETS: dict[str, LabelSet | None] = {}
"""Raw label text -> its parse (None: a duplicate label, for the full path to report). Every pod
of a model serves the same label texts, so across a fleet almost every line hits. Bounded."""
_SHAPES: dict[tuple[tuple[str, ...], tuple[str, ...]], Shape] = {}
"""A page's sample names and label texts -> its compiled shape (`page_shape`). Bounded."""
_SEEN_ONCE: set[int] = set()
"""Hashes of shapes read once: a shape is compiled when it comes back, so pages whose shape
changes every scrape (a label with a value per scrape) never pay for compiling. Bounded."""
_LABEL_SETS_MAX: Final = 4096
_LABEL_TEXT_CACHED: Final = 512
"""Longer label texts are not cached, so the cache stays under 4096 x 512 characters."""


def _label_set(inside: str) -> LabelSet | None:
    """The parse of plain label text, cached (None: not plain, or a duplicate label: the full
    path reads or reports it)."""
    got = _LABEL_SETS.get(inside, False)
    if got is not False:
        return got  # type: ignore[return-value]
    result: LabelSet | None = None
    if _PLAIN_LABELS.fullmatch(inside):
        found = _PAIR.findall(inside)
        labels = dict(found)
        if len(labels) == len(found):
            result = labelled(labels)
    if len(inside) > _LABEL_TEXT_CACHED:  # a hostile label text is parsed, never kept
        return result
    if len(_LABEL_SETS) >= _LABEL_SETS_MAX:
        _LABEL_SETS.clear()
    _LABEL_SETS[inside] = result
    return result


_NO_LABELS: Final[LabelSet] = ({}, (), (), math.nan)


def parse(text: str, *, target: str = "", strict: bool = False) -> Page:
    """Parse the needed families of one page. Raises ExpositionError naming the line.

    Only the lines of the families alphagate reads are looked at (found by one regex scan, about
    as fast as ``str.splitlines``); other lines are neither parsed nor checked. A page with none
    of those lines gets the full line-by-line check, so an HTML error page or garbage served
    with status 200 is an error naming its line, not an empty page. `strict` checks the shape
    of every line (for ``alphagate inspect``: a person asked about this page)."""
    if strict:
        return _parse_every_line(text, target)
    rows = _ROW.findall("\n" + text)
    if not rows:
        return _parse_every_line(text, target)
    names, insides, tokens = zip(*rows, strict=True)
    if _EOF in names:  # an OpenMetrics end: nothing may follow it
        check_eof(text, target)
        rows = [row for row in rows if row[0] != _EOF]
        if not rows:
            return _parse_every_line(text, target)
        names, insides, tokens = zip(*rows, strict=True)
    skeleton = (names, insides)
    shape = _SHAPES.get(skeleton)
    usual = "" not in tokens  # every line is a name, plain labels and a value
    if shape is not None and usual:
        joined = "".join(tokens)
        if joined.isascii() and "_" not in joined:
            try:
                values = list(map(float, tokens))
            except ValueError:
                values = []  # the line path names the line
            if values and min(values) >= 0:  # a negative (or NaN) value: the line path judges it
                return shape.page(values)
    page = _parse_lines(text, target)
    if shape is None and usual:
        _keep_shape(skeleton)
    return page


def _keep_shape(skeleton: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
    """Keep the shape of a page the line path has just read (see `page_shape`)."""
    names, insides = skeleton
    if sum(map(len, insides)) > MAX_SHAPE_TEXT:
        return
    seen = hash(skeleton)
    if seen not in _SEEN_ONCE:
        if len(_SEEN_ONCE) >= 8 * MAX_SHAPES:
            _SEEN_ONCE.clear()
        _SEEN_ONCE.add(seen)
        return
    rows: list[tuple[Want, LabelSet] | None] = []
    for name, inside in zip(names, insides, strict=True):
        what = WANTED.get(name)
        got = _label_set(inside) if inside else _NO_LABELS
        if what is not None and got is None:
            return  # labels the line path reads one by one: never kept
        rows.append((what, got) if what is not None and got is not None else None)
    if not any(rows):
        return  # no line of ours: such pages get the full line-by-line check
    if len(_SHAPES) >= MAX_SHAPES:
        _SHAPES.clear()
    _SHAPES[skeleton] = compile_shape(rows)
    _SEEN_ONCE.discard(seen)


def check_eof(text: str, target: str) -> None:
    """OpenMetrics ends at `# EOF`: anything but blank lines after it is refused (a page that
    goes on is two pages, or a truncated one pasted onto another), naming its line."""
    at = text.find("# EOF")
    while at >= 0:
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        if (at == 0 or text[at - 1] == "\n") and text[at:end].rstrip(" \t\r") == "# EOF":
            rest = text[end:]
            extra = len(rest) - len(rest.lstrip())
            if extra < len(rest):
                line = text.count("\n", 0, end + extra) + 1
                raise ExpositionError(
                    "content after '# EOF' (the end of an OpenMetrics page)",
                    line=line,
                    target=target,
                )
            return
        at = text.find("# EOF", at + 1)


def _parse_lines(text: str, target: str) -> Page:
    """Read our families' lines one by one, with every check (a page of a new shape, or one
    with lines of another form)."""
    check_eof(text, target)
    builder = PageBuilder(target, text)
    add, add_parsed = builder.add, builder.add_parsed
    wanted = WANTED
    label_set = _label_set
    found = False
    for m in _LINE.finditer("\n" + text):
        name, rest = m.groups()
        what = wanted.get(name)
        if what is None:
            continue
        found = True
        start = m.start(1) - 1  # the name's offset in `text`
        if rest[:1] == "{":
            close = rest.find("}")
            inside, tail = (rest[1:close], rest[close + 1 :]) if close > 0 else ("", "")
        else:
            inside, tail = "", rest
        if tail[:1] in (" ", "\t"):
            parts = tail.split()
            token = parts[0] if len(parts) == 1 else "_"
            got = label_set(inside) if inside else _NO_LABELS
            if got is not None and "_" not in token and token.isascii():
                try:
                    value = float(token)
                except ValueError:
                    value = math.nan  # not a number: the full path says so
                if value == value:  # else the full path
                    add_parsed(what, name, got, value, start)
                    continue
        try:
            labels, value = _parse_sample_rest(name + rest.rstrip(), len(name))
        except _Bad as bad:
            raise builder.error(str(bad), start) from None
        add(what, name, labels, value, start)
    if not found:
        return _parse_every_line(text, target)
    return builder.finish()


def _parse_every_line(text: str, target: str) -> Page:
    """The same result, checking the shape of every line (used for pages without our lines)."""
    check_eof(text, target)
    builder = PageBuilder(target, text)
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
        value = parse_number(tokens[0])
        if len(tokens) > 1 and tokens[1] != "#":  # a timestamp; then maybe an exemplar
            parse_number(tokens[1])
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


def decode(body: bytes, *, target: str = "") -> str:
    """Bytes of a page as text; invalid UTF-8 is an ExpositionError naming the line."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body.count(b"\n", 0, exc.start) + 1
        raise ExpositionError("invalid UTF-8", line=line, target=target) from None


__all__ = ["check_eof", "decode", "parse"]

"""Render a pod snapshot as the ``/metrics`` page a real vLLM V1 server returns.

Families, HELP texts, label names and order, bucket bounds and ``_created`` gauges follow
vLLM (checked against a real capture by the tests). The page is always the classic text
format 0.0.4 (``CONTENT_TYPE``), whatever the scraper's Accept header: with
prometheus_client >= 0.23, answering Prometheus 2's OpenMetrics Accept would rename the
samples ``vllm_...`` (colon escaping), and Prometheus would then store names no ``vllm:``
query finds. Real vLLM negotiates; the simulator picks the predictable form.

`render` writes the page's text directly: through prometheus_client (`client_render`, the
reference it is tested against byte for byte) a page cost most of a sandbox's CPU, since
Prometheus scrapes every pod several times a second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from alphagate import vllm
from alphagate_lab.sim.pod import HistSnapshot, PodSnapshot

__all__ = ["CONTENT_TYPE", "SnapshotCollector", "client_render", "render"]

#: What vLLM's /metrics answers a plain GET with. (prometheus_client >= 0.23 calls
#: ``text/plain; version=1.0.0`` its CONTENT_TYPE_LATEST; vLLM's default reply is 0.0.4.)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_ENGINE = "0"
_HISTOGRAM_ORDER = (
    vllm.TTFT,
    vllm.ITL,
    vllm.TPOT,
    vllm.E2E,
    vllm.QUEUE_TIME,
    vllm.DECODE_TIME,
    vllm.REQUEST_GENERATION_TOKENS,
)


def _go_float(value: float) -> str:
    """Bucket bound as vLLM's client prints it (``0.01``, ``1.0``, ``2560.0``)."""
    return repr(float(value))


def _counter(name: str, labelnames: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(vllm.base(name), vllm.HELP[name], labels=labelnames)


def families(snap: PodSnapshot, *, created: bool = True) -> Iterator[Metric]:
    """The metric families of one pod, in vLLM's registration order."""
    base_labels = [vllm.MODEL_NAME, vllm.ENGINE]
    values = [snap.model_name, _ENGINE]
    ts = snap.started if created else None

    if snap.spec_k is not None:
        for name in (vllm.SPEC_DRAFTS, vllm.SPEC_DRAFT_TOKENS, vllm.SPEC_ACCEPTED):
            fam = _counter(name, base_labels)
            fam.add_metric(values, float(snap.counters.get(name, 0)), created=ts)
            yield fam
        fam = _counter(vllm.SPEC_PER_POS, [*base_labels, vllm.POSITION])
        for pos in range(snap.spec_k):
            value = snap.per_pos[pos] if pos < len(snap.per_pos) else 0
            fam.add_metric([*values, str(pos)], float(value), created=ts)
        yield fam

    for name in (vllm.RUNNING, vllm.WAITING):
        gauge = GaugeMetricFamily(name, vllm.HELP[name], labels=base_labels)
        gauge.add_metric(values, float(snap.gauges.get(name, 0)))
        yield gauge

    for name in (vllm.PROMPT_TOKENS, vllm.GENERATION_TOKENS):
        fam = _counter(name, base_labels)
        fam.add_metric(values, float(snap.counters.get(name, 0)), created=ts)
        yield fam

    fam = _counter(vllm.REQUEST_SUCCESS, [vllm.MODEL_NAME, vllm.ENGINE, vllm.FINISHED_REASON])
    for reason in vllm.FINISH_REASONS:
        fam.add_metric([*values, reason], float(snap.success.get(reason, 0)), created=ts)
    yield fam

    for name in _HISTOGRAM_ORDER:
        hist = snap.histograms.get(name)
        if hist is None:
            continue
        hfam = HistogramMetricFamily(name, vllm.HELP[name], labels=base_labels)
        les = [_go_float(b) for b in hist.bounds] + ["+Inf"]
        hfam.add_metric(values, list(zip(les, map(float, hist.buckets), strict=True)), hist.sum)
        if ts is not None:
            labels = dict(zip(base_labels, values, strict=True))
            hfam.samples.append(Sample(name + vllm.CREATED, labels, ts, None))
        yield hfam


class SnapshotCollector:
    """A prometheus_client collector over whatever snapshot ``get`` returns at scrape time."""

    def __init__(self, get: Callable[[], PodSnapshot], *, created: bool = True) -> None:
        self._get = get
        self._created = created

    def collect(self) -> Iterator[Metric]:
        yield from families(self._get(), created=self._created)


def client_render(snap: PodSnapshot, *, created: bool = True) -> bytes:
    """The page through prometheus_client's own writer: the reference `render` matches."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap, created=created))
    return generate_latest(registry)


def _escape(value: str) -> str:
    """A label value as the text format quotes it (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _num(value: float) -> str:
    """`floatToGoString`, with a shortcut for the counts most samples are (the same text:
    below 1e6 a whole number prints as ``123.0``)."""
    if type(value) is int and 0 <= value < 1_000_000:
        return f"{value}.0"
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


@lru_cache(maxsize=256)
def _head(name: str, kind: str, help_name: str) -> str:
    doc = vllm.HELP[help_name].replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


@lru_cache(maxsize=64)
def _labels(model_name: str) -> tuple[str, str]:
    """The base labels in the writer's (sorted) order, split where a third label sorts in:
    ``engine`` < ``finished_reason`` < ``le`` < ``model_name`` < ``position``."""
    return f'{vllm.ENGINE}="{_ENGINE}"', f'{vllm.MODEL_NAME}="{_escape(model_name)}"'


def _counter_lines(name: str, rows: Sequence[tuple[str, float]], ts: float | None) -> str:
    """A counter family: ``_total`` samples, then (with ``ts``) its ``_created`` gauge."""
    family = vllm.base(name)
    out = [_head(family + "_total", "counter", name)]
    out.extend(f"{family}_total{{{labels}}} {_num(v)}\n" for labels, v in rows)
    if ts is not None:
        created = _num(ts)
        out.append(_head(family + vllm.CREATED, "gauge", name))
        out.extend(f"{family}{vllm.CREATED}{{{labels}}} {created}\n" for labels, _ in rows)
    return "".join(out)


@lru_cache(maxsize=256)
def _bucket_prefixes(
    name: str, bounds: tuple[float, ...], engine: str, model: str
) -> tuple[str, ...]:
    """Each bucket's sample name and labels, up to its value: the same on every scrape."""
    les = [_go_float(b) for b in bounds] + ["+Inf"]
    return tuple(f'{name}{vllm.BUCKET}{{{engine},{vllm.LE}="{le}",{model}}} ' for le in les)


def _histogram_lines(
    name: str, hist: HistSnapshot, engine: str, model: str, ts: float | None
) -> str:
    base = f"{engine},{model}"
    out = [_head(name, "histogram", name)]
    prefixes = _bucket_prefixes(name, hist.bounds, engine, model)
    out.extend(f"{prefix}{_num(n)}\n" for prefix, n in zip(prefixes, hist.buckets, strict=True))
    if not hist.bounds or hist.bounds[0] >= 0:  # the writer drops both below a negative bound
        out.append(f"{name}{vllm.COUNT}{{{base}}} {_num(hist.buckets[-1])}\n")
        out.append(f"{name}{vllm.SUM}{{{base}}} {_num(hist.sum)}\n")
    if ts is not None:
        out.append(_head(name + vllm.CREATED, "gauge", name))
        out.append(f"{name}{vllm.CREATED}{{{base}}} {_num(ts)}\n")
    return "".join(out)


def render(snap: PodSnapshot, *, created: bool = True) -> bytes:
    """The text-format 0.0.4 page for ``snap`` (serve it with ``CONTENT_TYPE``): the same
    bytes as `client_render`, the families of `families` in their order.

    ``created=False`` gives vLLM's multiprocess-mode page (``--api-server-count > 1``), which
    has no ``_created`` series.
    """
    engine, model = _labels(snap.model_name)
    base = f"{engine},{model}"
    ts = snap.started if created else None
    out: list[str] = []
    if snap.spec_k is not None:
        for name in (vllm.SPEC_DRAFTS, vllm.SPEC_DRAFT_TOKENS, vllm.SPEC_ACCEPTED):
            out.append(_counter_lines(name, [(base, snap.counters.get(name, 0))], ts))
        rows = [
            (
                f'{base},{vllm.POSITION}="{pos}"',
                snap.per_pos[pos] if pos < len(snap.per_pos) else 0,
            )
            for pos in range(snap.spec_k)
        ]
        out.append(_counter_lines(vllm.SPEC_PER_POS, rows, ts))
    for name in (vllm.RUNNING, vllm.WAITING):
        value = _num(snap.gauges.get(name, 0))
        out.append(f"{_head(name, 'gauge', name)}{name}{{{base}}} {value}\n")
    for name in (vllm.PROMPT_TOKENS, vllm.GENERATION_TOKENS):
        out.append(_counter_lines(name, [(base, snap.counters.get(name, 0))], ts))
    rows = [
        (
            f'{engine},{vllm.FINISHED_REASON}="{_escape(reason)}",{model}',
            snap.success.get(reason, 0),
        )
        for reason in vllm.FINISH_REASONS
    ]
    out.append(_counter_lines(vllm.REQUEST_SUCCESS, rows, ts))
    for name in _HISTOGRAM_ORDER:
        hist = snap.histograms.get(name)
        if hist is not None:
            out.append(_histogram_lines(name, hist, engine, model, ts))
    return "".join(out).encode("utf-8")

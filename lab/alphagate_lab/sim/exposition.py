"""Render a pod snapshot as the ``/metrics`` page a real vLLM V1 server returns.

Families, HELP texts, label names and order, bucket bounds and ``_created`` gauges follow
vLLM (checked against a real capture by the tests). The page is always the classic text
format 0.0.4 (``CONTENT_TYPE``), whatever the scraper's Accept header: with
prometheus_client >= 0.23, answering Prometheus 2's OpenMetrics Accept would rename the
samples ``vllm_...`` (colon escaping), and Prometheus would then store names no ``vllm:``
query finds. Real vLLM negotiates; the simulator picks the predictable form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from alphagate import vllm
from alphagate_lab.sim.pod import PodSnapshot

__all__ = ["CONTENT_TYPE", "SnapshotCollector", "render"]

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


def render(snap: PodSnapshot, *, created: bool = True) -> bytes:
    """The text-format 0.0.4 page for ``snap`` (serve it with ``CONTENT_TYPE``).

    ``created=False`` gives vLLM's multiprocess-mode page (``--api-server-count > 1``), which
    has no ``_created`` series.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap, created=created))
    return generate_latest(registry)

"""A synthetic /metrics page per vLLM release, built from the compatibility table.

Each page registers, with the real `prometheus_client` (as vLLM does), exactly the families the
table says that release registers with default flags (the spec-decode ones only when
speculating, hidden ones only when asked), with the release's labels, HELP texts and default
buckets, then records one known workload: the real capture's counters (31 requests, K = 4,
277 drafts, 666 draft tokens, 96 accepted, 49/17/16/14 per position). So every release's page
carries the same numbers in its own layout, and a test can ask the parser and `inspect` for
them.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from alphagate import vllm
from alphagate.vllm_compat import Registered, Release

MODEL = "tiny-chat"
MAX_MODEL_LEN = 512
DRAFTS, DRAFT_TOKENS, ACCEPTED = 277, 666, 96
PER_POSITION = (49, 17, 16, 14)
GENERATED = 1305
ITL_STEPS = (0.004,) * 1100 + (0.012,) * 77 + (0.03,) * 4  # 1181 decode steps
TPOT_REQUESTS = (0.0045,) * 30 + (0.02,)  # 31 requests


@dataclass(frozen=True, slots=True)
class Workload:
    """What the page records (defaults: the real capture's)."""

    drafts: int = DRAFTS
    draft_tokens: int = DRAFT_TOKENS
    accepted: int = ACCEPTED
    per_position: tuple[int, ...] = PER_POSITION
    generated: int = GENERATED
    running: int = 2


def page(
    row: Release,
    *,
    speculating: bool = True,
    hidden: bool = False,
    work: Workload | None = None,
    itl_buckets: tuple[float, ...] | None = None,
) -> bytes:
    """The release's page in the classic text format, `_created` gauges included."""
    work = work or Workload()
    reg = CollectorRegistry()
    values = {"model_name": MODEL, "engine": "0"}
    for fam in row.families.values():
        if fam.registered is Registered.SPECULATIVE and not speculating:
            continue
        if fam.registered is Registered.HIDDEN and not hidden:
            continue
        labels = list(fam.labels)
        own = [values[k] for k in labels if k in values]
        if fam.type == "counter":
            counter = Counter(fam.name, fam.help, labels, registry=reg)
            _count(counter, fam.name, own, work)
        elif fam.type == "gauge":
            Gauge(fam.name, fam.help, labels, registry=reg).labels(*own).set(work.running)
        else:
            bounds = fam.buckets or vllm.one_two_five_buckets(MAX_MODEL_LEN)
            if itl_buckets is not None and fam.name in (vllm.ITL, vllm.TPOT):
                bounds = itl_buckets
            hist = Histogram(fam.name, fam.help, labels, buckets=bounds, registry=reg)
            child = hist.labels(*own)
            if fam.name == vllm.TPOT:
                observed: tuple[float, ...] = TPOT_REQUESTS
            elif fam.name == vllm.REQUEST_GENERATION_TOKENS:
                observed = (42.0,) * len(TPOT_REQUESTS)
            else:  # the per-step histogram, under either of its names
                observed = ITL_STEPS
            for x in observed:
                child.observe(x)
    return generate_latest(reg)


def _count(counter: Counter, name: str, own: list[str], work: Workload) -> None:
    if name == vllm.base(vllm.SPEC_PER_POS):
        for pos, n in enumerate(work.per_position):
            counter.labels(*own, str(pos)).inc(n)
        return
    amount = {
        vllm.base(vllm.SPEC_DRAFTS): work.drafts,
        vllm.base(vllm.SPEC_DRAFT_TOKENS): work.draft_tokens,
        vllm.base(vllm.SPEC_ACCEPTED): work.accepted,
        vllm.base(vllm.GENERATION_TOKENS): work.generated,
    }[name]
    counter.labels(*own).inc(amount)

"""The staged rollout plan: from a model, its traffic slices and a target concurrency, the steps
to turn speculative decoding on safely (measure, enable, measure alpha, gate, watch P99 per
token), the PromQL and commands for each, the cases where it should stay off, and a ready
SpeculativeCanary manifest that passes `config.parse`. Its PromQL is in `queries.py`, its
Markdown in `render.py`.

It answers the lesson's questions in the order the lesson asks them: which alpha does my
traffic reach, what is the break-even at my concurrency, on which metric do I decide.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from alphagate import config, specconfig
from alphagate import histogram_layout as bkt
from alphagate.core.speedup import DEFAULT_RIDGE_TOKENS, breakeven_concurrency, speedup
from alphagate.core.suitability import Condition
from alphagate_lab.planning import memory as mem
from alphagate_lab.planning.slices import SliceSpec, mix_alpha
from alphagate_lab.planning.speedup import breakeven_alpha, breakeven_alpha_at, speedup_at
from alphagate_lab.planning.workload import Workload, assess

DEFAULT_PROMETHEUS_ENDPOINT: Final = "default"
SHORT_OUTPUT_TOKENS: Final = 50
PLACEHOLDER_MODEL: Final = "set-me/draft-for-this-model"
# Problems that depend on the vLLM version: the plan reports them, the person picks the fix.
_VERSION_CODES: Final = frozenset({specconfig.Code.NOT_IN_VERSION, specconfig.Code.CHUNKED_PREFILL})


@dataclass(frozen=True, slots=True)
class PlanInput:
    """What a person knows before the rollout; everything else is derived."""

    model: str
    slices: tuple[SliceSpec, ...]
    concurrency: int
    k: int = 5
    overhead: float = 0.15
    gate: float = 0.55
    enable_margin: float = 0.05
    method: str = "eagle3"
    draft_model: str | None = None
    namespace: str = "default"
    prometheus_endpoint: str = DEFAULT_PROMETHEUS_ENDPOINT
    output_tokens: float | None = None
    offline_batch1: bool = False
    aggregation: config.Aggregation | None = None  # None: choose from the numbers
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS
    vllm_version: str | None = None  # enables specconfig's version rules
    context: int = 8192  # tokens per request, for the KV cache in the memory section
    gpu_gb: float = 80.0
    gpus: int = 1
    target_arch: mem.Arch | None = None  # None: looked up from `model` when built in
    draft_arch: mem.Arch | None = None  # None: looked up from `draft_model` when built in
    # Expected time per output token at the median and P99 (seconds), for the latency buckets
    # the pods get; None: a layout for 8-35 ms medians.
    tpot_median_seconds: float | None = None
    tpot_p99_seconds: float | None = None

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("model must not be empty")
        if not self.slices:
            raise ValueError("give at least one slice (name:share:alpha)")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.k < 1:
            raise ValueError(f"K must be at least 1, got {self.k}")
        if not math.isfinite(self.overhead) or self.overhead < 0:
            raise ValueError(f"overhead must be >= 0, got {self.overhead}")
        if not (0.0 <= self.gate <= 1.0):
            raise ValueError(f"gate must be within [0, 1], got {self.gate}")
        for name, v in (("median", self.tpot_median_seconds), ("P99", self.tpot_p99_seconds)):
            if v is not None and not (math.isfinite(v) and 0 < v <= 10.0):
                raise ValueError(f"expected {name} time per token must be in (0, 10] s, got {v}")
        if not (0.0 <= self.enable_margin <= 1.0 - self.gate):
            raise ValueError(
                f"enable margin must keep gate + margin within [0, 1], got {self.enable_margin}"
            )


@dataclass(frozen=True, slots=True)
class StayOff:
    """A case where speculation should stay off, and whether this rollout is in it."""

    case: str
    why: str
    applies: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    input: PlanInput
    name: str
    combined_alpha: float
    breakeven_alpha: float
    breakeven_alpha_at_concurrency: float
    predicted_speedup: float
    predicted_speedup_plain: float
    stops_paying_above: float | None
    aggregation: config.Aggregation
    below_gate: tuple[str, ...]
    stay_off: tuple[StayOff, ...]
    manifest: dict[str, Any]
    warnings: tuple[str, ...] = field(default=())
    spec_problems: tuple[specconfig.Problem, ...] = ()
    memory: mem.MemoryReport | None = None
    # --custom-histogram-buckets for the pod template baseline and canary share
    buckets: bkt.Layout = field(default_factory=bkt.layout)

    @property
    def manifest_valid(self) -> bool:
        """The manifest passes `policy check` as written (no config vLLM would refuse)."""
        return not any(p.severity is specconfig.Severity.ERROR for p in self.spec_problems)

    @property
    def recommended(self) -> bool:
        """Speculation is worth a canary: the mix clears the gate and pays at the concurrency."""
        return self.combined_alpha >= self.input.gate and self.predicted_speedup > 1.0

    def manifest_yaml(self) -> str:
        head = (
            f"# SpeculativeCanary for {self.input.model}, written by `alphagate plan`.\n"
            "# Starts in dryRun: it measures and decides but patches nothing until stage 4\n"
            "# of the plan switches it to enforce. Check it with `alphagate policy check`.\n"
        )
        return head + yaml.safe_dump(self.manifest, sort_keys=False, width=100)

    def to_dict(self) -> dict[str, Any]:
        inp = self.input
        return {
            "model": inp.model,
            "name": self.name,
            "k": inp.k,
            "overhead": inp.overhead,
            "concurrency": inp.concurrency,
            "gate": inp.gate,
            "slices": [
                {
                    "name": s.name,
                    "share": s.share,
                    "alpha": s.alpha,
                    "clears_gate": s.alpha >= inp.gate,
                }
                for s in inp.slices
            ],
            "combined_alpha": self.combined_alpha,
            "breakeven_alpha": self.breakeven_alpha,
            "breakeven_alpha_at_concurrency": self.breakeven_alpha_at_concurrency,
            "predicted_speedup": self.predicted_speedup,
            "predicted_speedup_plain": self.predicted_speedup_plain,
            "stops_paying_above_concurrency": self.stops_paying_above,
            "aggregation": str(self.aggregation),
            "recommended": self.recommended,
            "stay_off": [
                {"case": s.case, "applies": s.applies, "why": s.why, "detail": s.detail}
                for s in self.stay_off
            ],
            "warnings": list(self.warnings),
            "spec_problems": [
                {"code": p.code.value, "severity": p.severity.value, "message": p.message}
                for p in self.spec_problems
            ],
            "manifest_valid": self.manifest_valid,
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "histogram_buckets": {
                "args": list(self.buckets.args),
                "bounds": list(self.buckets.bounds),
                "where": "the pod template the baseline and the canary Deployments share",
                "series_per_pod": self.buckets.series_per_pod,
                "extra_series_per_pod": self.buckets.extra_series_per_pod,
            },
            "manifest": self.manifest,
        }


def slug(text: str) -> str:
    """A DNS-1123 name from a model id: `meta-llama/Llama-3.3-70B` -> `llama-3-3-70b`."""
    last = text.strip().rstrip("/").rsplit("/", 1)[-1].lower()
    out = re.sub(r"[^a-z0-9]+", "-", last).strip("-")[:40].strip("-")
    return out or "model"


def _dns(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def _round_up(value: float, digits: int = 2) -> float:
    scale = 10.0**digits
    return min(1.0, float(math.ceil(value * scale - 1e-9)) / scale)


def build(inp: PlanInput) -> Plan:
    """Derive the numbers, the recommendation and the manifest; validate the manifest."""
    slices = list(inp.slices)
    combined = mix_alpha(slices)
    c = inp.concurrency
    kw = {"ridge_tokens": inp.ridge_tokens}
    be_c = breakeven_alpha_at(inp.k, inp.overhead, c, **kw)
    below = tuple(s.name for s in slices if s.alpha < inp.gate)
    if inp.aggregation is not None:
        aggregation = inp.aggregation
    elif len(slices) == 1 or combined >= inp.gate:
        aggregation = config.Aggregation.COMBINED
    else:
        aggregation = config.Aggregation.PER_SLICE
    name = f"{slug(inp.model)}-speculative"[:63].strip("-")
    warnings: list[str] = []
    manifest = _manifest(inp, name, aggregation, be_c)
    problems = specconfig.check(
        manifest["spec"]["speculativeConfig"], vllm_version=inp.vllm_version
    )
    for p in problems:
        if p.code is specconfig.Code.MISSING_MODEL:
            warnings.append(
                f"method {inp.method} needs a draft: set speculative_config.model (e.g. with "
                f"--draft-model) before stage 2; until then `policy check` refuses the manifest "
                f"(vLLM would say: {p.vllm_says})"
            )
        elif p.severity is specconfig.Severity.ERROR and p.code not in _VERSION_CODES:
            raise ValueError(f"speculative config: {p.message}")
        elif p.severity is specconfig.Severity.ERROR:
            warnings.append(f"vLLM {inp.vllm_version} would refuse this config: {p.message}")
        else:
            warnings.append(f"speculative config: {p.message}")
    if _round_up(be_c) > inp.gate:
        warnings.append(
            f"the modelled break-even at concurrency {c} ({be_c:.2f}) is above the gate "
            f"{inp.gate:g}: the manifest gates at {_round_up(be_c):g} instead"
        )
    predicted = speedup_at(combined, inp.k, inp.overhead, c, **kw)
    stay_off = _stay_off(inp, below, predicted, combined)
    checked = manifest
    if any(p.code is specconfig.Code.MISSING_MODEL for p in problems):
        spec = {**manifest["spec"]}
        spec["speculativeConfig"] = {**spec["speculativeConfig"], "model": PLACEHOLDER_MODEL}
        checked = {**manifest, "spec": spec}
    config.parse(checked, where="alphagate plan manifest")  # a bug here is ours: fail loudly
    return Plan(
        input=inp,
        name=name,
        combined_alpha=combined,
        breakeven_alpha=breakeven_alpha(inp.k, inp.overhead),
        breakeven_alpha_at_concurrency=be_c,
        predicted_speedup=predicted,
        predicted_speedup_plain=speedup(combined, inp.k, inp.overhead),
        stops_paying_above=breakeven_concurrency(combined, inp.k, inp.overhead, **kw),
        aggregation=aggregation,
        below_gate=below,
        stay_off=stay_off,
        manifest=manifest,
        warnings=tuple(warnings),
        spec_problems=problems,
        memory=_memory(inp),
        buckets=bkt.layout(inp.tpot_median_seconds, inp.tpot_p99_seconds),
    )


def _memory(inp: PlanInput) -> mem.MemoryReport | None:
    """Exercise 5 for this rollout, when the architectures are known (built in or given)."""
    kind = {
        "eagle": mem.DraftKind.EAGLE,
        "eagle3": mem.DraftKind.EAGLE3,
        "draft_model": mem.DraftKind.DRAFT_MODEL,
    }.get(specconfig.resolved_method({"method": inp.method, "model": inp.draft_model}))
    if kind is None:
        return None
    try:
        target = inp.target_arch or mem.lookup(inp.model)
        draft = None
        if kind is mem.DraftKind.DRAFT_MODEL:
            if inp.draft_arch is None and not inp.draft_model:
                return None
            draft = inp.draft_arch or mem.lookup(inp.draft_model or "")
        return mem.footprint(
            target,
            kind,
            draft=draft,
            context=inp.context,
            concurrency=inp.concurrency,
            gpu_gb=inp.gpu_gb,
            gpus=inp.gpus,
        )
    except ValueError:
        return None


def _stay_off(
    inp: PlanInput, below: tuple[str, ...], predicted: float, combined: float
) -> tuple[StayOff, ...]:
    out = inp.output_tokens
    found = {
        f.condition: f
        for f in assess(
            Workload(
                mean_output_tokens=out,
                concurrency=float(inp.concurrency),
                offline=inp.offline_batch1,
                specialised_domain=bool(below),
                domain_trained_head=False if below else None,
            ),
            min_mean_tokens=SHORT_OUTPUT_TOKENS,
        )
    }
    dm = specconfig.resolved_method({"method": inp.method, "model": inp.draft_model})
    return (
        StayOff(
            "Offline batch-1 generation",
            "latency does not matter there; serve the plain target model",
            inp.offline_batch1 and found[Condition.BATCH1_OFFLINE].holds,
            "declared with --offline" if inp.offline_batch1 else "",
        ),
        StayOff(
            f"Very short outputs (under {SHORT_OUTPUT_TOKENS} tokens)",
            "the draft's overhead and the verify cost dominate; there are too few decode steps "
            "to earn them back",
            found[Condition.SHORT_OUTPUTS].holds,
            f"expected mean output {out:g} tokens"
            if out is not None
            else "output length not given",
        ),
        StayOff(
            "A specialised domain without its own draft head",
            "a head trained on general chat reaches only 0.4-0.6 on code, medical or legal "
            "traffic; train a domain EAGLE-3 head (light, fast) or keep that slice off",
            found[Condition.DOMAIN_WITHOUT_HEAD].holds,
            f"below the gate {inp.gate:g}: {', '.join(below)}" if below else "",
        ),
        StayOff(
            "Concurrency past the break-even",
            "with a full batch the weight reads are already shared and the K extra verified "
            "positions cost real compute; rejected drafts cost it all the same",
            predicted <= 1.0,
            f"predicted speed-up {predicted:.2f}x at concurrency {inp.concurrency} "
            f"for the combined alpha {combined:.2f}",
        ),
        StayOff(
            "vLLM v0.18.0 with a draft model and --enable-chunked-prefill",
            "the lesson reports that combination failing; vLLM 0.8-0.13 (V1) has no draft-model "
            f"speculation at all, and {specconfig.VLLM_VERSION_READ}'s code allows it; n-gram "
            "and EAGLE combine with chunked prefill from 0.6.4 on",
            dm == "draft_model",
            f"method {dm}",
        ),
    )


def _manifest(
    inp: PlanInput, name: str, aggregation: config.Aggregation, be_c: float
) -> dict[str, Any]:
    base = slug(inp.model)
    # Never gate below the modelled break-even at the target concurrency.
    disable = max(inp.gate, _round_up(be_c))
    multi = len(inp.slices) > 1 or aggregation is config.Aggregation.PER_SLICE
    slices: list[dict[str, Any]] = []
    for s in inp.slices:
        entry: dict[str, Any] = {
            "name": s.name,
            "canary": {"matchLabels": {"app": base, "slice": s.name, "role": "canary"}},
            "baseline": {"matchLabels": {"app": base, "slice": s.name, "role": "baseline"}},
        }
        if multi:
            entry["deployment"] = {"name": _dns(f"{base}-{s.name}-canary")[:253]}
        if aggregation is config.Aggregation.COMBINED and len(inp.slices) > 1:
            # Below its own break-even at this concurrency a slice is net negative by itself.
            entry["minAlpha"] = _round_up(be_c)
        slices.append(entry)
    first = inp.slices[0].name
    target = _dns(f"{base}-{first}-canary") if multi else f"{base}-canary"
    baseline = _dns(f"{base}-{first}-baseline") if multi else f"{base}-baseline"
    spec_config: dict[str, Any] = {"method": inp.method, "num_speculative_tokens": inp.k}
    if inp.draft_model:
        spec_config["model"] = inp.draft_model
    return {
        "apiVersion": config.API_VERSION,
        "kind": config.KIND,
        "metadata": {"name": name, "namespace": inp.namespace},
        "spec": {
            "target": {"name": target, "container": "vllm"},
            "baseline": {"name": baseline, "container": "vllm"},
            "speculativeConfig": spec_config,
            "mode": str(config.Mode.DRY_RUN),
            "aggregation": str(aggregation),
            "slices": slices,
            "acceptance": {
                "disableBelow": disable,
                "enableAbove": min(1.0, round(disable + inp.enable_margin, 4)),
            },
            "latency": {"metric": str(config.LatencyMetric.PER_TOKEN), "quantile": 0.99},
            "source": {
                "kind": str(config.SourceKind.PROMETHEUS),
                "prometheus": {
                    "endpoint": inp.prometheus_endpoint,
                    "matchLabels": {"namespace": inp.namespace},
                },
            },
        },
    }

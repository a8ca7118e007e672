"""The staged rollout plan: from a model, its traffic slices and a target concurrency, the steps
to turn speculative decoding on safely (measure, enable, measure alpha, gate, watch P99 per
token), the PromQL and commands for each, the cases where it should stay off, and a ready
SpeculativeCanary manifest that passes `config.parse`.

It answers the lesson's questions in the order the lesson asks them: which alpha does my
traffic reach, what is the break-even at my concurrency, on which metric do I decide.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from alphagate import config, specconfig, vllm
from alphagate.core.speedup import (
    DEFAULT_RIDGE_TOKENS,
    alpha_for_at,
    breakeven_alpha,
    breakeven_alpha_at,
    breakeven_concurrency,
    speedup,
    speedup_at,
)
from alphagate.core.suitability import Condition, Workload, assess
from alphagate.planning import memory as mem
from alphagate.planning.slices import SliceSpec, mix_alpha

DEFAULT_PROMETHEUS_ENDPOINT: Final = "default"
SHORT_OUTPUT_TOKENS: Final = 50
WINDOW: Final = "5m"
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
            "manifest": self.manifest,
        }


def slug(text: str) -> str:
    """A DNS-1123 name from a model id: `meta-llama/Llama-3.3-70B` -> `llama-3-3-70b`."""
    last = text.strip().rstrip("/").rsplit("/", 1)[-1].lower()
    out = re.sub(r"[^a-z0-9]+", "-", last).strip("-")[:40].strip("-")
    return out or "model"


def _dns(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def _selector(labels: dict[str, str], extra: dict[str, str]) -> str:
    merged = {**extra, **labels}
    return "{" + ",".join(f'{k}="{v}"' for k, v in merged.items()) + "}"


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


# ------------------------------------------------------------------ queries


@dataclass(frozen=True, slots=True)
class Queries:
    """The PromQL a person runs at each stage, for one set of series labels."""

    alpha: str
    acceptance_length: str
    per_position: str
    p99_per_token: str
    p99_per_step: str
    p99_ttft: str
    tokens_per_second: str
    running: str
    mean_output_tokens: str


def queries(selector: str, window: str = WINDOW) -> Queries:
    """PromQL with vLLM's exact names (alphagate.vllm); `selector` is `{a="b",...}`."""
    sel, w = selector, window

    def inc(name: str) -> str:
        return f"sum(increase({name}{sel}[{w}]))"

    def q99(family: str) -> str:
        return f"histogram_quantile(0.99, sum by (le) (rate({family}{vllm.BUCKET}{sel}[{w}])))"

    return Queries(
        alpha=f"{inc(vllm.SPEC_ACCEPTED)} / ({inc(vllm.SPEC_DRAFT_TOKENS)} > 0)",
        acceptance_length=f"1 + {inc(vllm.SPEC_ACCEPTED)} / ({inc(vllm.SPEC_DRAFTS)} > 0)",
        per_position=(
            f"sum by ({vllm.POSITION}) (increase({vllm.SPEC_PER_POS}{sel}[{w}])) "
            f"/ on () group_left () ({inc(vllm.SPEC_DRAFTS)} > 0)"
        ),
        p99_per_token=q99(vllm.TPOT),
        p99_per_step=q99(vllm.ITL),
        p99_ttft=q99(vllm.TTFT),
        tokens_per_second=f"sum(rate({vllm.GENERATION_TOKENS}{sel}[{w}]))",
        running=f"sum({vllm.RUNNING}{sel})",
        mean_output_tokens=(
            f"sum(increase({vllm.GENERATION_TOKENS}{sel}[1h])) "
            f"/ (sum(increase({vllm.REQUEST_SUCCESS}{sel}[1h])) > 0)"
        ),
    )


# ------------------------------------------------------------------ Markdown


def _fmt(value: float | None, spec: str = ".2f", none: str = "unreachable") -> str:
    return none if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _code(lang: str, body: str) -> list[str]:
    return [f"```{lang}", body, "```"]


def render(plan: Plan) -> str:
    """The plan in Markdown: numbers first, then the stages, then when to stay off."""
    inp = plan.input
    c, k, eps = inp.concurrency, inp.k, inp.overhead
    ns = {"namespace": inp.namespace}
    spec = plan.manifest["spec"]
    spec_json = json.dumps(spec["speculativeConfig"], separators=(", ", ": "))
    mix_arg = ",".join(f"{s.name}={s.share:g}:{s.alpha:g}" for s in inp.slices)
    enable_above = spec["acceptance"]["enableAbove"]
    disable_below = spec["acceptance"]["disableBelow"]
    out: list[str] = [f"# Speculative decoding rollout plan: {inp.model}", ""]

    verdict = (
        "**Worth a canary.**"
        if plan.recommended
        else "**Not worth enabling on this mix as it stands** (see *When to stay off*)."
    )
    out += [
        f"{verdict} Combined alpha {plan.combined_alpha:.2f} against a gate of {inp.gate:g}; "
        f"K = {k}, verify overhead {eps:g}, target concurrency {c}.",
        "",
        "## The numbers",
        "",
    ]
    rows = []
    for s in inp.slices:
        s_speed = speedup_at(s.alpha, k, eps, c, ridge_tokens=inp.ridge_tokens)
        rows.append(
            [
                s.name,
                f"{s.share:.0%}",
                f"{s.alpha:.2f}",
                "yes" if s.alpha >= inp.gate else "**no**",
                f"{s_speed:.2f}x",
            ]
        )
    rows.append(
        [
            "**combined**",
            "100%",
            f"**{plan.combined_alpha:.2f}**",
            "yes" if plan.combined_alpha >= inp.gate else "**no**",
            f"{plan.predicted_speedup:.2f}x",
        ]
    )
    out += _table(
        ["slice", "traffic", "expected alpha", f"clears gate {inp.gate:g}", f"speed-up at c={c}"],
        rows,
    )
    a2 = alpha_for_at(2.0, k, eps, c, ridge_tokens=inp.ridge_tokens)
    a3 = alpha_for_at(3.0, k, eps, c, ridge_tokens=inp.ridge_tokens)
    stops = plan.stops_paying_above
    out += [
        "",
        f"- Speed-up with the lesson's constant overhead: (1 + {k}*{plan.combined_alpha:.2f}) / "
        f"(1 + {eps:g}) = {plan.predicted_speedup_plain:.2f}x. That is the small-batch ceiling.",
        f"- Pure break-even alpha = overhead / K = {plan.breakeven_alpha:.3f}. At concurrency {c} "
        f"the batch already shares the weight reads and the K extra verified positions cost "
        f"compute, so the break-even rises to **{plan.breakeven_alpha_at_concurrency:.2f}** "
        f"(roofline model, ridge {inp.ridge_tokens:g} tokens per step; `alphagate whatif "
        f"--alpha {plan.combined_alpha:.2f} --k {k} --overhead {eps:g} --concurrency {c}`).",
        f"- Alpha needed at c={c}: {_fmt(a2)} for 2x, {_fmt(a3)} for 3x.",
        (
            f"- The gate {inp.gate:g} is the lesson's figure for high concurrency (~256 "
            f"requests); at c={c} the modelled break-even is lower, so the gate is conservative "
            "here. Lower it only on measured P99 per token, not on this model."
            if plan.breakeven_alpha_at_concurrency < inp.gate - 0.1
            else f"- At c={c} the modelled break-even is close to or above the gate "
            f"{inp.gate:g}: keep the gate at least there."
        ),
        "- At the combined alpha speculation "
        + (
            "pays at every concurrency."
            if stops is None
            else f"stops paying above about **{stops:.0f}** concurrent requests."
        ),
        f"- Aggregation: **{plan.aggregation}**. "
        + (
            "One decision flips every slice's canary on the traffic-weighted alpha; each slice "
            "has a floor (`minAlpha`, its own break-even at this concurrency) that vetoes "
            "enabling."
            if plan.aggregation is config.Aggregation.COMBINED
            else "Each slice has its own canary and flips alone, so the slices that clear the "
            "gate speculate and the others stay off."
        ),
        "- The gate compares vLLM's alpha (accepted / proposed draft tokens). Slice weights in "
        "the controller come from measured generation tokens, not from these estimates.",
        "",
    ]
    if plan.warnings:
        out += ["**Before you start:**", ""] + [f"- {w}" for w in plan.warnings] + [""]

    app = slug(inp.model)
    canary_sel = [
        (s.name, _selector({"app": app, "slice": s.name, "role": "canary"}, ns)) for s in inp.slices
    ]
    baseline_sel = [
        (s.name, _selector({"app": app, "slice": s.name, "role": "baseline"}, ns))
        for s in inp.slices
    ]
    first_b = queries(baseline_sel[0][1])
    first_c = queries(canary_sel[0][1])
    out += [
        "## Stage 1: measure the baseline (speculation off)",
        "",
        f"Serve {inp.model} plainly at the target concurrency ({c} running requests) for at "
        "least an hour of production-shaped traffic. Record TTFT, per-token latency, per-step "
        "ITL and throughput per slice: these are what the canary is compared against. The "
        "series need the pod labels `app`, `slice` and `role` (copy them onto the series with "
        "a `labelmap` relabelling).",
        "",
    ]
    for name, sel in baseline_sel:
        q = queries(sel)
        out += [f"Slice `{name}`:", ""]
        out += _code(
            "promql",
            "\n".join(
                [
                    f"# concurrency actually reached\n{q.running}",
                    f"# P99 time per output token (one observation per request)\n{q.p99_per_token}",
                    f"# P99 gap between engine steps (one observation per step)\n{q.p99_per_step}",
                    f"# P99 time to first token\n{q.p99_ttft}",
                    f"# generated tokens per second\n{q.tokens_per_second}",
                    f"# mean output length (short outputs do not pay)\n{q.mean_output_tokens}",
                ]
            ),
        )
        out.append("")
    out += [
        "## Stage 2: enable the draft on a canary",
        "",
        "Create the canary Deployment(s) from the baseline's template with a few replicas (its "
        "traffic share is its replica share) and the label `role: canary`. Speculation is a "
        "start-up argument; changing it restarts the pods:",
        "",
    ]
    out += _code("sh", f"--speculative-config '{spec_json}'")
    out += [
        "",
        "Check and install the SpeculativeCanary below. It starts in `dryRun`: alphagate "
        "measures and says what it would do, and patches nothing.",
        "",
    ]
    out += _code(
        "sh",
        f"alphagate policy check {plan.name}.yaml\n"
        f"alphagate policy show {plan.name}.yaml   # with every default filled in\n"
        f"kubectl apply -f {plan.name}.yaml",
    )
    out += [
        "",
        "## Stage 3: measure alpha on real traffic",
        "",
        f"Let the canary serve for several {WINDOW} windows; the gate needs at least "
        "`minDrafts` drafts per window. Alpha is accepted over proposed draft tokens:",
        "",
    ]
    for name, sel in canary_sel:
        q = queries(sel)
        out += [f"Slice `{name}`:", ""]
        out += _code(
            "promql",
            f"# alpha (what the gate compares)\n{q.alpha}\n"
            f"# mean acceptance length = tokens per engine step per request = 1 + K*alpha\n"
            f"{q.acceptance_length}\n"
            f"# acceptance by draft position: a steep fall says K is too long\n{q.per_position}",
        )
        out.append("")
    out += [
        "Put the measured values back into the model (shares from measured generation tokens):",
        "",
    ]
    out += _code(
        "sh",
        f"alphagate whatif --mix {mix_arg} --gate {inp.gate:g} --k {k} --overhead {eps:g} "
        f"--concurrency {c}",
    )
    out += [
        "",
        "## Stage 4: gate at the threshold",
        "",
        f"Hysteresis on alpha's confidence bounds: disable when the upper bound is below "
        f"{disable_below:g}, enable when the lower bound clears {enable_above:g}, over consecutive "
        "windows. Only a Fail flips; too little data or a broken source holds. Once the dry-run "
        "decisions look right, let it act:",
        "",
    ]
    out += _code(
        "sh",
        f"kubectl -n {inp.namespace} patch speculativecanary {plan.name} --type merge "
        '-p \'{"spec":{"mode":"enforce"}}\'\n'
        f"kubectl -n {inp.namespace} get speculativecanary {plan.name} -o yaml   "
        "# state, evidence, last decision",
    )
    out += [
        "",
        "If a slice stays below the gate, train an EAGLE-3 head on that domain (cheap next to "
        "fine-tuning the target) or keep speculation off for it.",
        "",
        "## Stage 5: watch P99 latency per token, not per step",
        "",
        f"`{vllm.ITL}` is observed once per engine step per request. With speculation on, one "
        "step carries 1 + accepted tokens, so per-step ITL rises while per-token latency falls "
        "(measured on real vLLM: per-step ITL 2.4 ms off, 4.7-5.0 ms with n-gram on at alpha "
        "0.92, while tokens/s rose 45%). Comparing per-step ITL of a speculating canary with a "
        "plain baseline rolls back every healthy canary. The guard therefore compares "
        f"`{vllm.TPOT}` (one observation per request), canary against baseline:",
        "",
    ]
    out += _code(
        "promql",
        f"# canary ({canary_sel[0][0]})\n{first_c.p99_per_token}\n"
        f"# baseline ({baseline_sel[0][0]})\n{first_b.p99_per_token}\n"
        "# per-step gap on the canary: the longest stall a streaming user sees; use it as an\n"
        "# absolute stutter limit, or divide by the acceptance length before comparing\n"
        f"{first_c.p99_per_step}",
    )
    out += [
        "",
        "Mean latency falls with speculation but P99 can rise: a step whose draft was rejected "
        "early costs a full verify pass for one token, and under a full batch those steps "
        "line up. vLLM's buckets are coarse (…0.05, 0.075, 0.1 s), so a 10% regression can hide "
        "inside one bucket; alphagate also tests the share of canary observations above the "
        "bucket holding the baseline's P99. To see the tail before the rollout:",
        "",
    ]
    out += _code(
        "sh",
        f"alphagate whatif --simulate --alpha {plan.combined_alpha:.2f} --k {k} "
        f"--overhead {eps:g} --concurrency {c}",
    )
    if plan.memory is not None:
        m = plan.memory
        out += ["", "## Memory", ""]
        out += _code("text", mem.render(m))
        out += [
            "",
            "An EAGLE head keeps KV for one decoder layer with the target's KV shape; a draft "
            "model keeps KV for all of its own layers, for every sequence the target holds. "
            "Override the architecture numbers with `--target-arch` / `--draft-arch key=value`; "
            "`alphagate whatif --memory` compares drafts side by side.",
        ]
    out += ["", "## When to stay off", ""]
    out += _table(
        ["case", "applies here", "why"],
        [
            [
                s.case,
                ("**yes**" + (f" ({s.detail})" if s.detail else ""))
                if s.applies
                else "no" + (f" ({s.detail})" if s.detail else ""),
                s.why,
            ]
            for s in plan.stay_off
        ],
    )
    out += ["", "## The SpeculativeCanary", ""]
    out += _code("yaml", plan.manifest_yaml().rstrip())
    out.append("")
    return "\n".join(out)

"""The rollout plan in Markdown: the numbers first, then the stages with their PromQL and
commands, then when to stay off."""

from __future__ import annotations

import json

from alphagate import config, vllm
from alphagate import histogram_layout as bkt
from alphagate_lab.planning import memory as mem
from alphagate_lab.planning.plan import Plan, slug
from alphagate_lab.planning.queries import WINDOW, queries, selector
from alphagate_lab.planning.speedup import alpha_for_at, speedup_at


def _fmt(value: float | None, spec: str = ".2f", none: str = "unreachable") -> str:
    return none if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _code(lang: str, body: str) -> list[str]:
    return [f"```{lang}", body, "```"]


def _buckets(plan: Plan) -> list[str]:
    """Stage 1's latency buckets: the flag for the shared pod template, and what it costs."""
    b = plan.buckets
    ms = f"{b.median_seconds * 1e3:g} ms median, {b.p99_seconds * 1e3:g} ms P99 per token"
    out = [
        f"Give the pod template the baseline and the canary share latency buckets fine enough "
        f"for a P99 guard: {len(b.bounds)} bounds in ~{b.step:.0%} steps from "
        f"{b.bounds[0] * 1e3:g} ms to {b.bounds[-1] * 1e3:g} ms (for {ms}; set "
        "`--tpot-median-ms`/`--tpot-p99-ms` from this stage's measurements). vLLM's default "
        "per-token buckets are 1.33-2.5x wide where chat models live, so no guard can tell a "
        "+10% P99 regression there:",
        "",
    ]
    out += _code("yaml", yaml_args(b.args))
    out += [
        "",
        f"The family sets `{vllm.ITL}` and `{vllm.TPOT}`: {b.series_per_pod} series per pod and "
        f"label set ({b.extra_series_per_pod:+d} against the default layout; "
        f"{b.extra_series_per_pod * 1000:+,} at 1,000 pods). Restarting the baseline with it is "
        "a rollout of its own: do it before the canary exists.",
        "",
    ]
    return out


def yaml_args(args: tuple[str, ...]) -> str:
    """The container's extra args as the pod template writes them."""
    lines = ["# containers[name=vllm].args, in the template both Deployments share"]
    lines += [f"- '{a}'" if a.startswith("{") else f"- {a}" for a in args]  # JSON: no ' in it
    return "\n".join(lines)


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
        (s.name, selector({"app": app, "slice": s.name, "role": "canary"}, ns)) for s in inp.slices
    ]
    baseline_sel = [
        (s.name, selector({"app": app, "slice": s.name, "role": "baseline"}, ns))
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
    out += _buckets(plan)
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
        "traffic share is its replica share) and the label `role: canary`; it keeps the "
        f"template's `{bkt.FLAG}`, so both pools count latency in the same bounds. Speculation "
        "is a start-up argument, on the canary only; changing it restarts the pods:",
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
        "line up. The guard confirms on the exact mean per token and fails on the P99 as "
        "finely as the buckets resolve it: on vLLM's default ones (…0.05, 0.075, 0.1 s) a P99 "
        "regression below 1.5-3x can go unseen (status prints the effective margin); with the "
        "Stage 1 buckets it fails from about +21%. With those buckets, `latency.confirmOn: "
        "meanAndQuantile` also makes a Pass show the P99 within +10% (several thousand "
        "requests per window). To see the tail before the rollout:",
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

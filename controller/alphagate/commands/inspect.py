"""`alphagate inspect URL|FILE`: what one vLLM /metrics page says about speculation.

Prints, per ``model_name`` and ``engine`` and aggregated across engines: alpha (accepted /
draft tokens), mean acceptance length (1 + accepted / drafts), acceptance per draft position
(per_pos[i] / drafts, unconditional as vLLM logs it), and ITL and TPOT P50/P99 from the buckets
(Prometheus ``histogram_quantile`` rules). Counters are cumulative since the pod started, so
this is the pod's lifetime view; the controller itself uses windowed increments.

It also says what the page's buckets let a latency guard decide (core/resolution.py): for a
P99 and a P95 guard at the default +10% margin, the smallest regression a Fail could show there
(at best, and surely), whether "within +10%" can be shown at all, and the
``--custom-histogram-buckets`` layout that would resolve it. Then the draft length the core's
tuner recommends (`inspect_draft`), and the page's vLLM layout (`alphagate.vllm_compat`).
The page reader (HTTP and the kubernetes client) is imported when the command runs.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import typer

from alphagate import histogram_layout as bkt
from alphagate import vllm_compat
from alphagate.commands import inspect_draft
from alphagate.commands.evaluate import draft_text
from alphagate.config import LatencyMetric
from alphagate.core.histogram import bracket, quantile, resolution_at
from alphagate.core.model import Buckets

if TYPE_CHECKING:  # the sources package loads when a page is read, not when the CLI starts
    from alphagate.sources.page import Page, Series

QUANTILES = (0.5, 0.99)
GUARD_QUANTILES = (0.99, 0.95)
MARGIN = 0.10  # the shipped policies' maxRegressionRatio


def _num(x: float) -> str:
    """Counts print as integers when they are."""
    return str(int(x)) if math.isfinite(x) and x == int(x) else f"{x:.6g}"


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def summarize(series: Iterable[Series]) -> dict[str, Any]:
    """Totals of some series (one engine, or all engines of a model) and what follows."""
    from alphagate.sources.common import HistSum
    from alphagate.sources.page import Counter, Hist

    items = list(series)
    totals = {c: sum(s.counters.get(c, 0.0) for s in items) for c in Counter}
    speculating = any(s.speculating for s in items)
    per_pos: dict[int, float] = defaultdict(float)
    for s in items:
        for pos, v in s.per_position.items():
            per_pos[pos] += v
    drafts = totals[Counter.DRAFTS]
    draft_tokens = totals[Counter.DRAFT_TOKENS]
    accepted = totals[Counter.ACCEPTED]
    out: dict[str, Any] = {
        "engines": sorted({s.engine for s in items}),
        "speculating": speculating,
        "generation_tokens": totals[Counter.GENERATION_TOKENS],
    }
    if speculating:
        out.update(
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted,
            alpha=_ratio(accepted, draft_tokens),
            mean_acceptance_length=1.0 + _ratio(accepted, drafts) if drafts > 0 else math.nan,
            per_position=[
                _ratio(per_pos[i], drafts) for i in range(max(per_pos) + 1 if per_pos else 0)
            ],
            per_position_accepted=[per_pos[i] for i in range(max(per_pos) + 1 if per_pos else 0)],
        )
    for h, key in ((Hist.ITL, "itl"), (Hist.TPOT, "tpot")):
        acc = HistSum()
        for s in items:
            hist = s.histograms.get(h)
            if hist is not None:
                acc.add(hist.buckets, hist.sum if math.isfinite(hist.sum) else 0.0)
        buckets = acc.to_buckets()
        if buckets is not None:
            out[key] = _latency(buckets)
    layout = _layout(out)
    if layout is not None:
        out["resolving_layout"] = {"args": list(layout.args), "bounds": list(layout.bounds)}
    return out


def _latency(buckets: Buckets) -> dict[str, Any]:
    out: dict[str, Any] = {"count": buckets.total, "sum": buckets.sum}
    for q in QUANTILES:
        name = f"p{round(q * 100)}"
        out[name] = quantile(q, buckets)
        out[f"{name}_bucket"] = list(bracket(q, buckets))
    out["resolution"] = _resolution(buckets)
    return out


def _resolution(buckets: Buckets) -> dict[str, Any]:
    """What a guard at +10% can decide at this histogram's buckets, per guarded quantile."""
    out: dict[str, Any] = {"margin": MARGIN}
    for q in GUARD_QUANTILES:
        r = resolution_at(q, buckets, MARGIN)
        if r is None:
            continue
        out[f"p{round(q * 100)}"] = {
            "bucket": [r.bucket_lo, r.bucket_hi],
            "resolvable": r.resolvable,
            "pass_edge": r.pass_edge,
            "fail_edge": r.fail_edge,
            "least_margin": r.least_margin,
            "effective_margin": r.effective_margin,
        }
    return out


def _layout(summary: dict[str, Any]) -> bkt.Layout | None:
    """The ~10% layout for the page's per-token latencies (per-step when that is all)."""
    lat = summary.get("tpot") or summary.get("itl")
    if lat is None:
        return None
    median, p99 = lat["p50"], lat["p99"]
    if not (math.isfinite(median) and math.isfinite(p99) and 0 < median <= p99 <= 10.0):
        return None
    return bkt.layout(median, p99, MARGIN)


def report(page: Page) -> list[dict[str, Any]]:
    """NaN as None."""
    by_model: dict[str, list[Series]] = defaultdict(list)
    for s in page.series.values():
        by_model[s.model_name].append(s)
    models = []
    for model in sorted(by_model):
        items = sorted(by_model[model], key=lambda s: s.engine)
        models.append(
            {
                "model_name": model,
                "engines": [
                    {
                        "engine": s.engine,
                        **{k: v for k, v in summarize([s]).items() if k != "engines"},
                    }
                    for s in items
                ],
                "all_engines": summarize(items),
            }
        )
    return models


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("+Inf" if obj > 0 else "-Inf")
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _seconds(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x * 1000:.2f} ms" if x < 1 else f"{x:.3f} s"


def _text(summary: dict[str, Any], indent: str = "  ") -> list[str]:
    lines = []
    if summary["speculating"]:
        acc, tok, drafts = (
            summary["accepted_tokens"],
            summary["draft_tokens"],
            summary["drafts"],
        )
        lines.append(
            f"{indent}alpha                    {_num(acc)}/{_num(tok)} = {summary['alpha']:.3f}"
        )
        lines.append(
            f"{indent}mean acceptance length   1 + {_num(acc)}/{_num(drafts)} = "
            f"{summary['mean_acceptance_length']:.3f}"
        )
        per = "  ".join(f"{i}:{r:.3f}" for i, r in enumerate(summary["per_position"]))
        lines.append(f"{indent}acceptance per position  {per or 'n/a'}")
    else:
        lines.append(f"{indent}speculation              off (no vllm:spec_decode_* series)")
    lines.append(f"{indent}generation tokens        {_num(summary['generation_tokens'])}")
    for key, label in (("itl", "ITL (per step)"), ("tpot", "TPOT (per token)")):
        lat = summary.get(key)
        if lat is None:
            continue
        lines.append(
            f"{indent}{label:<24} P50 {_seconds(lat['p50'])}  P99 {_seconds(lat['p99'])}  "
            f"(P99 in bucket {_seconds(lat['p99_bucket'][0])}..{_seconds(lat['p99_bucket'][1])}, "
            f"{_num(lat['count'])} observations)"
        )
        lines.append(f"{indent}{'':<24} {_resolution_text(lat['resolution'])}")
    layout = summary.get("resolving_layout")
    if layout is not None:
        flag, value = layout["args"]
        lines.append(
            f"{indent}to resolve +{MARGIN:.0%} ({len(layout['bounds'])} bounds, on baseline and "
            f"canary alike): {flag} '{value}'"
        )
    return lines


def _margin(x: float) -> str:
    return f"{x:+.0%}" if math.isfinite(x) else "none"


def _resolution_text(res: dict[str, Any]) -> str:
    """One line: per guarded quantile, the smallest regression a Fail could show."""
    parts = []
    for q in GUARD_QUANTILES:
        name = f"p{round(q * 100)}"
        r = res.get(name)
        if r is None:
            continue
        lo, hi = r["bucket"]
        within = "within resolvable" if r["resolvable"] else "within unresolvable"
        sure = (
            f"surely from {_margin(r['effective_margin'])}"
            if math.isfinite(r["effective_margin"])
            else "surely at no size"
        )
        where = f"{_seconds(lo)}..{_seconds(hi)}" if lo > 0 else f"first bucket ..{_seconds(hi)}"
        parts.append(
            f"{name.upper()} guard fails from {_margin(r['least_margin'])} at best, {sure} "
            f"({where}; {within})"
        )
    head = f"resolution at +{res['margin']:.0%}: "
    return head + ("; ".join(parts) if parts else "no quantile to guard")


def problems(models: list[dict[str, Any]]) -> list[str]:
    """What makes a page's speculation numbers impossible (a broken exporter or a doctored
    file): alpha outside [0, 1], NaN where counters should be, negative counts."""
    out: list[str] = []
    for m in models:
        for e in m["engines"]:
            where = f"model {m['model_name']!r} engine {e['engine']!r}"
            counts = ("generation_tokens", "drafts", "draft_tokens", "accepted_tokens")
            for key in counts:
                v = e.get(key)
                if v is not None and not (math.isfinite(v) and v >= 0):
                    out.append(f"{where}: {key} is {v} (a counter is a finite count >= 0)")
            if not e["speculating"]:
                continue
            alpha, tokens = e["alpha"], e["draft_tokens"]
            if tokens > 0 and not (math.isfinite(alpha) and 0.0 <= alpha <= 1.0):
                out.append(
                    f"{where}: alpha {_num(e['accepted_tokens'])}/{_num(tokens)} = {alpha:.6g} "
                    "is outside [0, 1] (accepted tokens cannot exceed drafted ones)"
                )
            if e["drafts"] > tokens:
                out.append(
                    f"{where}: {_num(e['drafts'])} drafts but only {_num(tokens)} draft tokens "
                    "(each draft proposes at least one token)"
                )
            for i, v in enumerate(e["per_position_accepted"]):
                if v > e["drafts"] >= 0:
                    out.append(
                        f"{where}: position {i} accepted {_num(v)} times in {_num(e['drafts'])}"
                        " drafts"
                    )
                    break
    return out


def render_text(models: list[dict[str, Any]]) -> str:
    if not models:
        return "no vLLM series found (is this a vLLM /metrics page?)"
    out: list[str] = []
    for m in models:
        for e in m["engines"]:
            out.append(f"{m['model_name']}  engine {e['engine']}")
            out.extend(_text(e))
        if len(m["engines"]) > 1:
            out.append(f"{m['model_name']}  all engines ({len(m['engines'])})")
            out.extend(_text(m["all_engines"]))
    return "\n".join(out)


def layout_lines(layout: vllm_compat.Layout) -> list[str]:
    """The page's vLLM layout (the releases whose pages look like it), and, for one alphagate
    cannot judge with its default latency guard, the release it needs and why, in one line."""
    out = [f"page layout              {layout.name}"]
    problem = layout.problem(LatencyMetric.PER_TOKEN)
    if problem is not None:
        out.append(f"  cannot judge: {problem}")
    return out


def layout_json(layout: vllm_compat.Layout) -> dict[str, Any]:
    return {
        "name": layout.name,
        "releases": list(layout.versions),
        "custom_buckets": list(layout.custom_buckets),
        "problems": {m.value: p for m in LatencyMetric if (p := layout.problem(m)) is not None},
    }


def draft_lines(page: Page, method: str | None) -> tuple[list[str], dict[str, Any]]:
    """Per speculating model: text lines, and the JSON by model name."""
    lines: list[str] = []
    out: dict[str, Any] = {}
    by_model: dict[str, list[Series]] = defaultdict(list)
    for s in page.series.values():
        by_model[s.model_name].append(s)
    for model in sorted(by_model):
        d = inspect_draft.report(sorted(by_model[model], key=lambda s: s.engine), method)
        if d is None:
            continue
        lines.append(f"{model}  {draft_text(d)[0]}")
        lines.extend([draft_text(d)[1], inspect_draft.options_text(d)])
        out[model] = inspect_draft.as_json(d)
    return lines, out


def inspect_command(
    target: str = typer.Argument(..., help="A /metrics URL (http[s]://...) or a saved page."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    timeout: float = typer.Option(
        10.0, "--timeout", min=0.1, max=300.0, help="Seconds to wait for a URL (0.1..300)."
    ),
    method: str | None = typer.Option(
        None,
        "--method",
        help="The speculative method the pod runs (ngram, eagle3, mtp, draft_model, ...): its "
        "default cost per draft position prices the recommended K.",
    ),
) -> None:
    """Alpha, mean acceptance length, per-position acceptance, ITL P50/P99, the recommended
    draft length K and the vLLM layout of one page.

    Exit status 1 when the page's numbers are impossible (alpha outside [0, 1], NaN counts)."""
    from alphagate.sources.common import redact_url
    from alphagate.sources.pageread import read_page_layout

    page, layout = read_page_layout(target, timeout_seconds=timeout)
    models = report(page)
    bad = problems(models)
    k_lines, k_json = draft_lines(page, method)
    if as_json:
        payload = {"target": target, "models": _clean(models), "problems": bad}
        payload |= {"layout": layout_json(layout), "draft_length": _clean(k_json)}
        typer.echo(json.dumps(payload, indent=2))
    else:
        typer.echo("\n".join([render_text(models), *k_lines, *layout_lines(layout)]))
    for line in bad:
        typer.echo(f"error: {redact_url(target)}: {line}", err=True)
    if bad:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_command)

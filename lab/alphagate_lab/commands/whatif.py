"""`alphagate whatif`: what a given alpha, K and overhead buy, before touching a cluster.

Three questions, one command: the closed-form speed-up and break-even (`--alpha`), the
combined alpha of a traffic mix against the gate (`--mix`), and a seeded decode-loop simulation
of throughput and tail latency across concurrency (`--simulate`). Tables for people, `--json`
for machines.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from alphagate.core.speedup import (
    DEFAULT_RIDGE_TOKENS,
    breakeven_concurrency,
    speedup,
    tokens_per_pass,
)
from alphagate_lab.commands import memory as memory_cli
from alphagate_lab.planning import decode_sim
from alphagate_lab.planning.slices import SliceSpec, mix_alpha, parse_mix
from alphagate_lab.planning.speedup import (
    alpha_for,
    alpha_for_at,
    breakeven_alpha,
    breakeven_alpha_at,
    effective_alpha,
    max_speedup,
    overhead_at,
    speedup_at,
)

OVERHEADS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


def _f(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def _echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False))


def _console() -> Console:
    # Built per call so test runners that swap stdout see the output.
    return Console(width=120, highlight=False)


# ------------------------------------------------------------------ --alpha


def _concurrency_block(
    alpha: float | None, k: int, overhead: float, c: int, ridge: float
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "concurrency": c,
        "ridge_tokens": ridge,
        "effective_overhead": overhead_at(c, k, overhead, ridge_tokens=ridge),
        "breakeven_alpha": breakeven_alpha_at(k, overhead, c, ridge_tokens=ridge),
        "alpha_for_2x": alpha_for_at(2.0, k, overhead, c, ridge_tokens=ridge),
        "alpha_for_3x": alpha_for_at(3.0, k, overhead, c, ridge_tokens=ridge),
    }
    if alpha is not None:
        out["speedup"] = speedup_at(alpha, k, overhead, c, ridge_tokens=ridge)
        out["stops_paying_above_concurrency"] = breakeven_concurrency(
            alpha, k, overhead, ridge_tokens=ridge
        )
    return out


def analytic(
    alpha: float, k: int, overhead: float, concurrency: int | None, ridge: float
) -> dict[str, Any]:
    """Everything `whatif --alpha` reports, as plain data."""
    overheads = sorted({*OVERHEADS, overhead})
    rows = []
    for eps in overheads:
        row: dict[str, Any] = {
            "overhead": eps,
            "speedup": speedup(alpha, k, eps),
            "breakeven_alpha": breakeven_alpha(k, eps),
            "alpha_for_2x": alpha_for(2.0, k, eps),
            "alpha_for_3x": alpha_for(3.0, k, eps),
        }
        if concurrency is not None:
            row["speedup_at_concurrency"] = speedup_at(
                alpha, k, eps, concurrency, ridge_tokens=ridge
            )
            row["breakeven_alpha_at_concurrency"] = breakeven_alpha_at(
                k, eps, concurrency, ridge_tokens=ridge
            )
        rows.append(row)
    return {
        "alpha": alpha,
        "k": k,
        "overhead": overhead,
        "tokens_per_pass": tokens_per_pass(alpha, k),
        "speedup": speedup(alpha, k, overhead),
        "breakeven_alpha": breakeven_alpha(k, overhead),
        "alpha_for_2x": alpha_for(2.0, k, overhead),
        "alpha_for_3x": alpha_for(3.0, k, overhead),
        "max_speedup": max_speedup(k, overhead),
        "at_concurrency": (
            _concurrency_block(alpha, k, overhead, concurrency, ridge)
            if concurrency is not None
            else None
        ),
        "by_overhead": rows,
    }


def _print_analytic(r: dict[str, Any]) -> None:
    con = _console()
    t = Table(title=f"Speculative decoding what-if: alpha {r['alpha']:g}, K {r['k']}, "
              f"overhead {r['overhead']:g}")  # fmt: skip
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("how", style="dim")
    t.add_row("tokens per target pass", _f(r["tokens_per_pass"]), "1 + K*alpha")
    t.add_row("speed-up", f"{r['speedup']:.2f}x", "(1 + K*alpha) / (1 + overhead)")
    t.add_row("break-even alpha", _f(r["breakeven_alpha"], ".3f"), "overhead / K")
    t.add_row("alpha for 2x", _f(r["alpha_for_2x"]), "— = unreachable")
    t.add_row("alpha for 3x", _f(r["alpha_for_3x"]), "— = unreachable")
    t.add_row("ceiling (alpha = 1)", f"{r['max_speedup']:.2f}x", "(1 + K) / (1 + overhead)")
    at = r["at_concurrency"]
    if at is not None:
        c = at["concurrency"]
        t.add_section()
        t.add_row(f"overhead at c={c}", _f(at["effective_overhead"]), "roofline: grows with batch")
        t.add_row(f"speed-up at c={c}", f"{at['speedup']:.2f}x", "")
        t.add_row(f"break-even alpha at c={c}", _f(at["breakeven_alpha"]), "practical break-even")
        t.add_row(f"alpha for 2x at c={c}", _f(at["alpha_for_2x"]), "")
        t.add_row(f"alpha for 3x at c={c}", _f(at["alpha_for_3x"]), "")
        stop = at["stops_paying_above_concurrency"]
        t.add_row(
            "stops paying above c",
            "never" if stop is None else f"{stop:.0f}",
            f"ridge {at['ridge_tokens']:g} tokens/step",
        )
    con.print(t)
    s = Table(title="How it moves with the overhead")
    for col in ("overhead", "speed-up", "break-even", "alpha for 2x", "alpha for 3x"):
        s.add_column(col, justify="right")
    if at is not None:
        s.add_column(f"speed-up c={at['concurrency']}", justify="right")
        s.add_column(f"break-even c={at['concurrency']}", justify="right")
    for row in r["by_overhead"]:
        cells = [
            f"{row['overhead']:g}",
            f"{row['speedup']:.2f}x",
            _f(row["breakeven_alpha"], ".3f"),
            _f(row["alpha_for_2x"]),
            _f(row["alpha_for_3x"]),
        ]
        if at is not None:
            cells += [
                f"{row['speedup_at_concurrency']:.2f}x",
                _f(row["breakeven_alpha_at_concurrency"]),
            ]
        style = "bold" if row["overhead"] == r["overhead"] else None
        s.add_row(*cells, style=style)
    con.print(s)


# ------------------------------------------------------------------ --mix


def mix_report(
    slices: list[SliceSpec],
    gate: float,
    k: int,
    overhead: float,
    concurrency: int | None,
    ridge: float,
) -> dict[str, Any]:
    """Everything `whatif --mix` reports, as plain data."""
    combined = mix_alpha(slices)
    return {
        "slices": [
            {"name": s.name, "share": s.share, "alpha": s.alpha, "clears_gate": s.alpha >= gate}
            for s in slices
        ],
        "combined_alpha": combined,
        "effective_alpha": effective_alpha([(s.share, s.alpha) for s in slices], k),
        "gate": gate,
        "net_positive": combined >= gate,
        "k": k,
        "overhead": overhead,
        "speedup": speedup(combined, k, overhead),
        "breakeven_alpha": breakeven_alpha(k, overhead),
        "at_concurrency": (
            _concurrency_block(combined, k, overhead, concurrency, ridge)
            if concurrency is not None
            else None
        ),
    }


def _print_mix(r: dict[str, Any]) -> None:
    con = _console()
    t = Table(title="Traffic mix")
    t.add_column("slice")
    t.add_column("share", justify="right")
    t.add_column("alpha", justify="right")
    t.add_column(f"clears gate {r['gate']:g}", justify="center")
    for s in r["slices"]:
        t.add_row(s["name"], f"{s['share']:.0%}", f"{s['alpha']:.2f}",
                  "yes" if s["clears_gate"] else "[red]no[/red]")  # fmt: skip
    t.add_section()
    t.add_row("combined", "100%", f"{r['combined_alpha']:.2f}",
              "yes" if r["net_positive"] else "[red]no[/red]")  # fmt: skip
    t.add_row("effective (pooled)", "100%", f"{r['effective_alpha']:.3f}",
              "yes" if r["effective_alpha"] >= r["gate"] else "[red]no[/red]")  # fmt: skip
    con.print(t)
    con.print(
        f"Effective alpha {r['effective_alpha']:.3f} (accepted / drafted over all slices at "
        f"K {r['k']}) is what the controller gates on; the traffic-weighted "
        f"{r['combined_alpha']:.2f} is the lesson's figure."
    )
    verdict = "net positive" if r["net_positive"] else "NOT net positive"
    con.print(
        f"Combined alpha {r['combined_alpha']:.2f} vs gate {r['gate']:g}: speculation is "
        f"[bold]{verdict}[/bold] on this mix. Speed-up at K {r['k']}, overhead "
        f"{r['overhead']:g}: {r['speedup']:.2f}x (pure break-even {r['breakeven_alpha']:.3f})."
    )
    at = r["at_concurrency"]
    if at is not None:
        con.print(
            f"At concurrency {at['concurrency']}: speed-up {at['speedup']:.2f}x, "
            f"break-even alpha {at['breakeven_alpha']:.2f}."
        )
    low = [s["name"] for s in r["slices"] if not s["clears_gate"]]
    if low:
        con.print(
            f"Below the gate on their own: {', '.join(low)}. Give them a per-slice floor, "
            "their own canary, or a draft head trained on their domain."
        )


# ------------------------------------------------------------------ --simulate


def _sim_dict(r: decode_sim.RunStats) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(r)


def simulate_report(config: decode_sim.SimConfig, do_sweep: bool) -> dict[str, Any]:
    """Everything `whatif --simulate` reports, as plain data."""
    at = decode_sim.compare(config)
    out: dict[str, Any] = {
        "config": {
            "alpha_per_position": config.alpha,
            "k": config.k,
            "overhead": config.overhead,
            "concurrency": config.concurrency,
            "steps": config.steps,
            "seed": config.seed,
            "weight_ms": config.weight_ms,
            "ridge_tokens": config.ridge_tokens,
            "jitter": config.jitter,
            "output_tokens": config.output_tokens,
        },
        "at_concurrency": _cmp_dict(at),
        "sweep": None,
        "stops_paying_at": None,
    }
    if do_sweep:
        results = decode_sim.sweep(config)
        out["sweep"] = [_cmp_dict(r) for r in results]
        out["stops_paying_at"] = decode_sim.stops_paying_at(results)
    return out


def _cmp_dict(r: decode_sim.Comparison) -> dict[str, Any]:
    return {
        "concurrency": r.config.concurrency,
        "speedup": r.speedup,
        "predicted_speedup": r.predicted_speedup,
        "breakeven_alpha": r.breakeven_alpha,
        "measured_alpha": r.on.measured_alpha,
        "pays": r.pays,
        "off": _sim_dict(r.off),
        "on": _sim_dict(r.on),
    }


def _print_simulation(r: dict[str, Any]) -> None:
    con = _console()
    cfg = r["config"]
    at = r["at_concurrency"]
    t = Table(
        title=f"Decode loop at concurrency {at['concurrency']}: per-position acceptance "
        f"{cfg['alpha_per_position']:g}, K {cfg['k']}, overhead {cfg['overhead']:g}, "
        f"{cfg['steps']} steps, seed {cfg['seed']}"
    )
    cols = ("speculation", "tok/pass", "alpha (vLLM)", "mean ms/token", "P99 ms/token",
            "mean ms/step", "P99 ms/step", "P99 TPOT", "tokens/s")  # fmt: skip
    for i, col in enumerate(cols):
        t.add_column(col, justify="left" if i == 0 else "right")
    for label in ("off", "on"):
        s = at[label]
        t.add_row(
            label,
            f"{s['tokens_per_pass']:.2f}",
            _f(s["measured_alpha"]),
            f"{s['mean_ms_per_token']:.2f}",
            f"{s['p99_ms_per_token']:.2f}",
            f"{s['mean_ms_per_step']:.2f}",
            f"{s['p99_ms_per_step']:.2f}",
            _f(s["p99_request_tpot_ms"]),
            f"{s['tokens_per_second']:.0f}",
        )
    con.print(t)
    con.print(
        f"Throughput speed-up {at['speedup']:.2f}x (closed form at the measured alpha: "
        f"{at['predicted_speedup']:.2f}x); break-even alpha here {at['breakeven_alpha']:.2f}. "
        "vLLM's alpha (accepted/proposed) sits below the per-position rate: acceptance stops "
        "at the first rejection."
    )
    on, off = at["on"], at["off"]
    if on["p99_ms_per_token"] > off["p99_ms_per_token"]:
        con.print(
            f"Tail: mean time per token {off['mean_ms_per_token']:.1f} -> "
            f"{on['mean_ms_per_token']:.1f} ms, but P99 per token "
            f"{off['p99_ms_per_token']:.1f} -> {on['p99_ms_per_token']:.1f} ms: a step whose "
            "draft was rejected early pays a full verify pass for one token."
        )
    if r["sweep"] is None:
        return
    s = Table(title="Across concurrency: where speculation stops paying, and the tail")
    sweep_cols = ("concurrency", "speed-up", "predicted", "break-even alpha", "ms/token off->on",
            "P99 ms/token off->on", "P99 ms/step off->on", "pays")  # fmt: skip
    for col in sweep_cols:
        s.add_column(col, justify="right")
    for row in r["sweep"]:
        off, on = row["off"], row["on"]
        s.add_row(
            str(row["concurrency"]),
            f"{row['speedup']:.2f}x",
            f"{row['predicted_speedup']:.2f}x",
            f"{row['breakeven_alpha']:.2f}",
            f"{off['mean_ms_per_token']:.1f} -> {on['mean_ms_per_token']:.1f}",
            f"{off['p99_ms_per_token']:.1f} -> {on['p99_ms_per_token']:.1f}",
            f"{off['p99_ms_per_step']:.1f} -> {on['p99_ms_per_step']:.1f}",
            "yes" if row["pays"] else "[red]no[/red]",
            style="bold" if row["concurrency"] == at["concurrency"] else None,
        )
    con.print(s)
    stop = r["stops_paying_at"]
    con.print(
        "Speculation pays at every simulated concurrency."
        if stop is None
        else f"Speculation stops paying at concurrency {stop} in this simulation."
    )


# ------------------------------------------------------------------ command


def whatif(
    alpha: float | None = typer.Option(
        None,
        "--alpha",
        min=0.0,
        max=1.0,
        help="Acceptance rate alpha (accepted/proposed). With --simulate: the per-position "
        "acceptance probability (default 0.8).",
    ),
    k: int = typer.Option(5, "--k", min=1, help="Draft length K (num_speculative_tokens)."),
    overhead: float = typer.Option(
        0.1, "--overhead", min=0.0, help="Draft + verify overhead per step (epsilon)."
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, help="Requests per engine step (decode batch)."
    ),
    ridge_tokens: float = typer.Option(
        DEFAULT_RIDGE_TOKENS,
        "--ridge-tokens",
        min=1.0,
        help="Tokens per step at which compute equals the weight read (roofline model).",
    ),
    mix: str | None = typer.Option(
        None,
        "--mix",
        help="Traffic mix as slice=share:alpha[,...], e.g. chat=0.7:0.7,code=0.3:0.4.",
    ),
    gate: float = typer.Option(0.55, "--gate", min=0.0, max=1.0, help="Alpha gate for --mix."),
    simulate: bool = typer.Option(
        False, "--simulate", help="Run the seeded decode-loop simulation."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed for --simulate."),
    steps: int = typer.Option(1000, "--steps", min=1, max=100_000, help="Engine steps per run."),
    weight_ms: float = typer.Option(
        20.0, "--weight-ms", min=0.001, help="Weight-read time per step."
    ),
    output_tokens: float = typer.Option(
        256.0, "--output-tokens", min=1.0, help="Mean decode length per request (simulation)."
    ),
    sweep: bool = typer.Option(True, "--sweep/--no-sweep", help="Also sweep concurrency."),
    memory: bool = typer.Option(
        False, "--memory", help="GPU memory of each --draft next to the --target."
    ),
    target: str = typer.Option(
        "llama-3.3-70b", "--target", help="Target architecture (built-in name) for --memory."
    ),
    draft: list[str] = typer.Option(
        [], "--draft", help="eagle, eagle3, or a draft model's architecture (repeatable)."
    ),
    target_arch: list[str] = typer.Option(
        [], "--target-arch", help="Override a target number, e.g. layers=40 (repeatable)."
    ),
    draft_arch: list[str] = typer.Option(
        [], "--draft-arch", help="Override a draft-model number, e.g. vocab=128256."
    ),
    context: int = typer.Option(8192, "--context", min=1, help="Tokens per request (KV)."),
    gpu_gb: float = typer.Option(80.0, "--gpu-memory-gb", min=1.0, help="Memory per GPU."),
    gpus: int = typer.Option(1, "--gpus", min=1, help="GPUs per replica."),
    weight_bytes: float = typer.Option(
        2.0, "--weight-bytes", min=0.25, help="Bytes per target weight (2 BF16, 1 FP8)."
    ),
    draft_weight_bytes: float = typer.Option(
        2.0, "--draft-weight-bytes", min=0.25, help="Bytes per draft weight."
    ),
    kv_bytes: float = typer.Option(2.0, "--kv-bytes", min=0.25, help="Bytes per KV value."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines."),
) -> None:
    """Speed-up, break-even and the alpha for 2x/3x; a traffic mix; a decode simulation; or
    the memory of a draft (--memory)."""
    if memory:
        memory_cli.echo(
            memory_cli.reports(
                target=target,
                drafts=draft,
                target_arch=target_arch,
                draft_arch=draft_arch,
                context=context,
                concurrency=concurrency or 64,
                gpu_gb=gpu_gb,
                gpus=gpus,
                weight_bytes=weight_bytes,
                draft_weight_bytes=draft_weight_bytes,
                kv_bytes=kv_bytes,
            ),
            as_json,
        )
        return
    if alpha is not None and mix is not None:
        raise typer.BadParameter("use either --alpha or --mix, not both", param_hint="'--mix'")
    if simulate:
        try:
            cfg = decode_sim.SimConfig(
                alpha=0.8 if alpha is None else alpha,
                k=k,
                overhead=overhead,
                concurrency=concurrency or 64,
                steps=steps,
                seed=seed,
                weight_ms=weight_ms,
                ridge_tokens=ridge_tokens,
                output_tokens=output_tokens,
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        report = simulate_report(cfg, sweep)
        _echo_json(report) if as_json else _print_simulation(report)
        return
    if mix is not None:
        try:
            slices = parse_mix(mix)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--mix'") from None
        report = mix_report(slices, gate, k, overhead, concurrency, ridge_tokens)
        _echo_json(report) if as_json else _print_mix(report)
        return
    if alpha is None:
        raise typer.BadParameter(
            "give --alpha (closed form), --mix (traffic mix) or --simulate", param_hint="'--alpha'"
        )
    report = analytic(alpha, k, overhead, concurrency, ridge_tokens)
    _echo_json(report) if as_json else _print_analytic(report)


def register(app: typer.Typer) -> None:
    """Add `whatif` to the CLI."""
    app.command("whatif")(whatif)

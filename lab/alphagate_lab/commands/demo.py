"""`alphagate demo`: a newcomer's first command, with a live view of the controller at work.

Everything runs on 127.0.0.1 (see `alphagate_lab.sandbox.demo`): a simulated fleet with two
traffic slices, the API server double with the Deployments and a SpeculativeCanary, a local
kubelet, Prometheus when installed (pod scraping otherwise) and the controller in enforce
mode. The terminal shows alpha per slice with its interval, the gate, the state, the latency
quantile the guard compares (per token, canary against baseline), the last decision and why,
a progress bar and recent events; ``--no-live`` prints one line per decision instead. At the
end a report (Markdown and a PNG timeline) is written to ``--out``; ``--json`` prints a
summary of the transitions.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from alphagate.core.model import CheckKind
from alphagate.errors import AlphagateError
from alphagate_lab.report import quantile_name
from alphagate_lab.sandbox.demo import (
    DEFAULT_OUT,
    Decision,
    Demo,
    DemoOptions,
    DemoResult,
    LogLine,
    Snapshot,
    latency_by_slice,
    logging_to,
    why_text,
)
from alphagate_lab.sim.scenario import parse_duration

DEFAULT_SPEED = 1.5
STATE_STYLE = {
    "Off": "bold white on grey30",
    "Probing": "bold black on yellow",
    "On": "bold white on green4",
    "RolledBack": "bold white on red3",
    "Paused": "bold white on blue",
    "Promoted": "bold white on dark_green",
}
VERDICT_STYLE = {"Pass": "green", "Fail": "bold red", "Inconclusive": "yellow", "Error": "bold red"}
MILESTONES = (
    ("enabled", "speculation enabled"),
    ("rolled_back_on_p99", "latency rollback"),
    ("re_enabled", "re-enabled"),
    ("rolled_back_on_alpha", "alpha rollback"),
    ("early_reprobe", "early re-probe"),
)


# ---------------------------------------------------------------- formatting


def _ms(seconds: float) -> str:
    return "—" if not math.isfinite(seconds) else f"{seconds * 1e3:.1f}"


def _verdict(text: str) -> Text:
    return Text(text or "—", style=VERDICT_STYLE.get(text, ""))


def _state(state: str) -> Text:
    return Text(f" {state} ", style=STATE_STYLE.get(state, "bold"))


def _clock(t: float) -> str:
    m, s = divmod(int(max(t, 0)), 60)
    return f"{m:d}:{s:02d}"


def decision_line(d: Decision) -> str:
    """One line per decision for `--no-live` (scripts, logs)."""
    p = d.point
    parts = [f"t={p.t:6.1f}s", f"{p.state:<10}", f"{p.verdict:<12}", f"{p.action:<7}"]
    if p.combined is not None:
        c = p.combined
        alphas = ", ".join(f"{n} {a.value:.3f}" for n, a in sorted(p.alphas.items()))
        parts.append(f"alpha {c.value:.3f} [{c.lower:.3f}, {c.upper:.3f}] ({alphas})")
    if p.latency:
        lat = " ".join(
            f"{n or 'canary'} {_ms(cq)}/{_ms(bq)}" for n, (cq, bq) in sorted(p.latency.items())
        )
        q = quantile_name(p.latency_quantile)
        parts.append(f"{q}/token canary/baseline ms: {lat}")
    if p.transition:
        parts.append(f"[{p.transition}]")
    parts.append(p.reason)
    return "  ".join(parts)


def log_line(line: LogLine) -> str:
    return f"# t={line.t:6.1f}s {line.source}: {line.text}"


# ---------------------------------------------------------------- the live view


def render(snap: Snapshot) -> RenderableType:
    """The whole screen from one snapshot."""
    head = Text.assemble(
        ("alphagate demo", "bold"),
        f"  scenario {snap.scenario}  ·  t {_clock(snap.t)} / {_clock(snap.duration)}",
        f"  ·  {snap.speed:g}× speed" if snap.speed != 1 else "",
        f"  ·  source {'Prometheus' if snap.source == 'prometheus' else 'pod scraping'}",
    )
    last = snap.last
    ev = last.evaluation if last is not None else None
    point = last.point if last is not None else None

    # --- slices
    table = Table(expand=True, box=None, padding=(0, 1), header_style="bold")
    for col, justify in (
        ("slice", "left"),
        ("alpha", "right"),
        ("95% interval", "center"),
        ("drafts", "right"),
        ("weight", "right"),
        ("true α", "right"),
        (f"{quantile_name(point.latency_quantile if point else math.nan)}/token canary", "right"),
        ("baseline", "right"),
        ("verdict", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    latency = latency_by_slice(ev)
    names = sorted(set(snap.truth) | (set(ev.weights) if ev is not None else set()))
    measured = ev is not None and sum(ev.weights.values()) > 0
    for name in names:
        est = ev.estimates.get(name) if ev is not None else None
        weight = ev.weights.get(name) if ev is not None and measured else None
        lat = latency.get(name) or latency.get("", {})
        truth = snap.truth.get(name, {}).get("alpha")
        if est is not None:
            alpha = Text(f"{est.value:.3f}", style="bold")
            interval = f"[{est.lower:.3f}, {est.upper:.3f}]"
            drafts = f"{est.drafts:,.0f}"
        else:
            known = snap.last_alpha.get(name)
            alpha = Text("off" if not snap.speculation_on else "—", style="dim")
            interval = f"last known {known:.3f}" if known is not None else ""
            drafts = "—"
        table.add_row(
            name,
            alpha,
            interval,
            drafts,
            f"{weight:.2f}" if weight is not None else "—",
            f"{truth:.2f}" if truth is not None else "—",
            _ms(lat.get("canary", math.nan)) + " ms" if lat else "—",
            _ms(lat.get("baseline", math.nan)) + " ms" if lat else "—",
            _verdict(lat.get("verdict", "")) if lat else Text("—"),
        )
    acceptance = (
        next((c for c in ev.checks if c.kind is CheckKind.ACCEPTANCE and c.slice is None), None)
        if ev
        else None
    )
    if ev is not None and ev.combined is not None:
        c = ev.combined
        table.add_row(
            Text("combined", style="bold"),
            Text(f"{c.value:.3f}", style="bold"),
            f"[{c.lower:.3f}, {c.upper:.3f}]",
            f"{c.drafts:,.0f}",
            "1.00",
            "",
            "",
            "",
            _verdict(acceptance.verdict.value if acceptance else ""),
        )
    lo, hi = snap.gate
    gate = Text.assemble(
        ("gate ", "bold"),
        f"rollback when alpha's upper bound < {lo:.2f}, enable when its lower bound > {hi:.2f}",
        ("  ·  latency ", "bold"),
        f"{quantile_name(point.latency_quantile if point else math.nan)} per output token, "
        "canary vs baseline",
    )

    # --- state and decision
    spec = {True: Text("speculation ON", style="green"), False: Text("speculation off")}.get(
        snap.speculation_on if snap.speculation_on is not None else False, Text("")
    )
    state_line = Text.assemble(
        ("state ", "bold"),
        _state(snap.state),
        "  ",
        spec,
        "   last verdict ",
        _verdict(point.verdict if point else ""),
    )
    if snap.chaos_active:
        state_line.append("   fault: " + ", ".join(snap.chaos_active), style="bold magenta")
    lines: list[RenderableType] = [state_line]
    if last is not None and point is not None:
        text = Text.assemble(
            ("last decision ", "bold"),
            f"t={point.t:.0f}s ",
            (point.action, "bold"),
            f": {point.reason}",
        )
        lines.append(text)
        why = why_text(ev) if point.verdict != "Pass" else ""
        if last.error and not why:
            why = last.error
        if why:
            lines.append(Text("why: " + why[:400], style="dim"))
    tr = snap.last_transition
    if tr is not None:
        lines.append(
            Text.assemble(
                ("last transition ", "bold"),
                f"t={tr.point.t:.0f}s {tr.point.transition} ({tr.point.action}): ",
                (tr.point.reason[:300], ""),
            )
        )

    # --- progress and log
    bar = Table.grid(expand=True)
    bar.add_column(ratio=1)
    bar.add_column(justify="right", width=16)
    bar.add_row(
        ProgressBar(total=max(snap.duration, 1.0), completed=min(snap.t, snap.duration)),
        f"{snap.t:5.0f}/{snap.duration:.0f} s",
    )
    log = Table.grid(padding=(0, 1))
    log.add_column(justify="right", style="dim", width=7)
    log.add_column(style="dim", width=10)
    log.add_column(ratio=1)
    for line in snap.log[-9:]:
        shown = line.text if len(line.text) <= 150 else line.text[:147] + "..."
        log.add_row(f"{line.t:5.0f}s", line.source, Text(shown, style=line.style))
    return Group(
        head,
        Panel(Group(table, gate), title="alpha per slice", title_align="left"),
        Panel(Group(*lines), title="controller", title_align="left"),
        bar,
        Panel(log, title="events", title_align="left"),
    )


# ---------------------------------------------------------------- the command


def _finish(result: DemoResult, console: Console) -> None:
    marks = "  ".join(
        ("✓ " if result.milestones.get(key) else "✗ ") + label for key, label in MILESTONES
    )
    paths = result.paths
    console.print(f"report: {paths.get('markdown')}")
    if "png" in paths:
        console.print(f"timeline: {paths['png']}")
    console.print(f"story: {marks}")
    for c in result.chaos:
        if c.get("ran"):
            verdicts = ", ".join(f"{n} {v}" for v, n in sorted(c["verdicts"].items()))
            console.print(
                f"fault {c['what']} (t={c['start']:.0f}-{c['end']:.0f}s): {verdicts or 'no'} "
                f"evaluations, {'no flip' if c['flips'] == 0 else str(c['flips']) + ' flips'}"
            )
    m, s = divmod(int(result.wall_seconds), 60)
    console.print(
        f"{'interrupted' if result.interrupted else 'done'} after {m}m{s:02d}s "
        f"({result.sim_seconds:.0f} scenario seconds)"
    )


def demo(
    scenario: Path | None = typer.Option(
        None, "--scenario", help="Scenario YAML (default: the built-in demo scenario)."
    ),
    policy: Path | None = typer.Option(
        None, "--policy", help="SpeculativeCanary YAML (default: the built-in demo policy)."
    ),
    duration: str | None = typer.Option(
        None, "--duration", help="Scenario time to run, e.g. 90s or 4m (default: the scenario's)."
    ),
    speed: float = typer.Option(
        DEFAULT_SPEED,
        "--speed",
        min=0.1,
        max=20.0,
        help="Scenario seconds per wall second; the policy's timings are compressed with it.",
    ),
    source: str = typer.Option(
        "auto", "--source", help="prometheus, scrape, or auto (Prometheus when installed)."
    ),
    chaos: bool = typer.Option(
        False, "--chaos", help="Stop Prometheus, fail the API and delete a pod for a while."
    ),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Where the report is written."),
    live: bool = typer.Option(
        True, "--live/--no-live", help="Live terminal view, or one line per decision."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary at the end."),
    seed: int | None = typer.Option(None, "--seed", help="Simulator seed (default: scenario's)."),
) -> None:
    """Run alphagate against a local simulated fleet and show every decision."""
    if source not in ("auto", "prometheus", "scrape"):
        raise typer.BadParameter("one of prometheus, scrape, auto", param_hint="--source")
    dur = None
    if duration is not None:
        try:
            dur = parse_duration(duration)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--duration") from None
        if dur <= 0:
            raise typer.BadParameter("must be > 0", param_hint="--duration")
    opts = DemoOptions(
        scenario=scenario,
        policy=policy,
        duration=dur,
        speed=speed,
        source=source,  # type: ignore[arg-type]
        chaos=chaos,
        out=out,
        seed=seed,
        log_file=out / "controller.log",
    )
    # With --json, stdout carries only the JSON; everything else goes to stderr.
    console = Console(file=sys.stderr if as_json else sys.stdout, highlight=False)
    interactive = live and console.is_terminal

    def on_decision(d: Decision) -> None:
        if not interactive:
            console.print(decision_line(d), markup=False, soft_wrap=True)

    def on_log(line: LogLine) -> None:
        if not interactive and line.source in ("scenario", "chaos", "demo"):
            console.print(log_line(line), markup=False, soft_wrap=True)

    try:
        engine = Demo(opts, on_decision=on_decision, on_log=on_log)
    except AlphagateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None

    def _interrupt(signum: int, _frame: FrameType | None) -> None:
        # Only a flag: this runs on the main thread between two bytecodes, maybe while it holds
        # a lock (an Event's, the console's file), so it must take none.
        engine.stop()

    in_main = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _interrupt)
    try:
        with logging_to(opts.log_file):
            if interactive:
                with Live(
                    get_renderable=lambda: render(engine.snapshot()),
                    console=console,
                    refresh_per_second=4,
                    redirect_stderr=False,
                ):
                    result = engine.run()
            else:
                console.print(
                    f"# alphagate demo: scenario {engine.scenario.name}, source "
                    f"{engine.source_kind}, speed {engine.speed:g}x, {engine.duration:.0f} s",
                    markup=False,
                )
                result = engine.run()
    except AlphagateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if as_json:
        sys.stdout.write(json.dumps(result.summary(), indent=2) + "\n")
        sys.stdout.flush()
    _finish(result, console)
    if result.interrupted:
        raise typer.Exit(130)


def register(app: typer.Typer) -> None:
    """Add `demo` to the CLI."""
    app.command("demo")(demo)

"""`alphagate backtest --policy FILE`: what a policy would have decided on recorded traffic.

Two sources of recorded metrics:

* ``--recording PATH``: a simulator recording (``alphagate sim -s SCENARIO --fast --record
  PATH``). Pods map to the policy's slices and roles through their labels (``pod``,
  ``namespace``, ``deployment``, ``role``, ``slice``) and the policy's ``matchLabels``. The
  recording carries the truth, so the run is scored: detection delay and false flips.
* ``--prometheus URL --start T --end T [--step S]``: a range of a real Prometheus, read at
  every step with the same PromQL the controller uses.

Either way the same decision core runs, evaluation by evaluation, with a Memory and a
modelled rollout that follow its own decisions. It prints the decision timeline, flips, time
in each state and (with truth) detection delay and false flips; ``--out DIR`` writes the same
report as the demo (Markdown, PNG timeline, points) plus ``backtest.json``; ``--json`` prints
the summary as JSON instead of tables.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from alphagate.config import SpeculativeCanary
from alphagate.errors import AlphagateError, PolicyError
from alphagate_lab import report
from alphagate_lab.backtest import BacktestResult, Options, UnitResult, run_range, run_recording
from alphagate_lab.sim.scenario import parse_duration

WIDE = 150
"""Table width when the output is not a terminal (files, pipes): reasons stay readable."""
_RELATIVE = re.compile(r"^now\s*(?:-\s*(.+))?$")


# --------------------------------------------------------------------------- inputs


def load_policy(path: Path, name: str | None) -> SpeculativeCanary:
    """The one resource to backtest from a policy file; PolicyError naming what is wrong."""
    from alphagate.commands.policy import load_file

    docs = load_file(path)
    bad = [d for d in docs if not d.ok]
    if bad:
        raise PolicyError(
            "; ".join(f"{d.where}: {p.render()}" for d in bad for p in d.problems),
            where=str(path),
        )
    resources = [d.resource for d in docs if d.resource is not None]
    known = ", ".join(r.metadata.name for r in resources)
    if name is not None:
        picked = [r for r in resources if r.metadata.name == name]
        if not picked:
            raise PolicyError(
                f"no resource named {name!r} (the file has: {known})", where=str(path)
            )
        return picked[0]
    if len(resources) > 1:
        raise PolicyError(
            f"the file holds several resources ({known}); pick one with --name", where=str(path)
        )
    return resources[0]


def parse_time(value: str, *, now: float, option: str) -> float:
    """Unix seconds, RFC 3339 / ISO 8601, ``now`` or ``now-30m``."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    m = _RELATIVE.match(text)
    if m is not None:
        if m.group(1) is None:
            return now
        try:
            return now - parse_duration(m.group(1))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=option) from None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"expected unix seconds, an RFC 3339 time, `now` or `now-30m`, got {value!r}",
            param_hint=option,
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _seconds(value: str, option: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    return seconds


# --------------------------------------------------------------------------- rendering


def clock(t: float) -> str:
    """Seconds since the start as h:mm:ss."""
    if not math.isfinite(t):
        return "-"
    sign = "-" if t < 0 else ""
    h, rem = divmod(round(abs(t)), 3600)
    m, s = divmod(rem, 60)
    return f"{sign}{h:d}:{m:02d}:{s:02d}"


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _alpha(p: report.Point) -> str:
    a = p.combined
    if a is None and len(p.alphas) == 1:
        a = next(iter(p.alphas.values()))
    if a is None:
        return "-"
    return f"{a.value:.3f} [{a.lower:.3f}, {a.upper:.3f}]"


_STATE_STYLE = {
    "On": "green",
    "Probing": "yellow",
    "RolledBack": "red",
    "Off": "dim",
    "Paused": "magenta",
    "Promoted": "cyan",
}


def timeline_table(result: BacktestResult, *, every: bool) -> Table:
    """The decisions (transitions and flips; every evaluation with `every`) and recorded events."""
    many = len(result.units) > 1
    truth = result.has_truth
    table = Table(title="Decision timeline", title_justify="left", expand=False)
    table.add_column("time", justify="right", no_wrap=True)
    if many:
        table.add_column("slice", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("action", no_wrap=True)
    table.add_column("alpha [95% interval]", no_wrap=True)
    if truth:
        table.add_column("true alpha", justify="right", no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=1)
    rows: list[tuple[float, int, list[str | Text]]] = []
    for u in result.units:
        for p in u.points:
            if not (every or p.transition or p.action != "hold"):
                continue
            state = Text(p.state, style=_STATE_STYLE.get(p.state, ""))
            action = Text(p.action, style="bold" if p.action != "hold" else "dim")
            cells: list[str | Text] = [clock(p.t)]
            if many:
                cells.append(u.name)
            cells += [state, action, _alpha(p)]
            if truth:
                cells.append("-" if math.isnan(p.truth_alpha) else f"{p.truth_alpha:.3f}")
            cells.append(p.reason)
            rows.append((p.t, 1, cells))
    for ev in result.events:
        if ev.kind != "timeline":
            continue
        t = ev.t - result.start
        cells = [clock(t)]
        if many:
            cells.append("")
        cells += [Text("recorded", style="italic blue"), "", ""]
        if truth:
            cells.append("")
        cells.append(Text(ev.message, style="italic blue"))
        rows.append((t, 0, cells))
    rows.sort(key=lambda r: (r[0], r[1]))
    for _, _, cells in rows:
        table.add_row(*cells)
    return table


def _unit_label(u: UnitResult) -> str:
    return f"slice {u.name}" if u.name else "combined (" + ", ".join(u.slices) + ")"


def summary_table(result: BacktestResult) -> Table:
    table = Table(title="Summary", title_justify="left", show_header=True)
    table.add_column("unit", no_wrap=True)
    table.add_column("evaluations", justify="right")
    table.add_column("flips", justify="right")
    table.add_column("time in each state")
    if result.has_truth:
        table.add_column("detection delay")
        table.add_column("false flips", justify="right")
    for u in result.units:
        s = report.summary(u.points, title="")
        states = ", ".join(
            f"{k} {_span(v)}"
            for k, v in sorted(s["seconds_in_state"].items(), key=lambda kv: -kv[1])
        )
        cells = [_unit_label(u), str(s["evaluations"]), str(s["flips"]), states or "-"]
        if result.has_truth:
            sc = u.score
            if sc is None:
                cells += ["-", "-"]
            else:
                parts = []
                for e in sc.episodes:
                    if e.delay is not None:
                        parts.append(f"{e.delay:.0f} s (from {clock(e.start)})")
                    elif e.missed:
                        parts.append(f"missed (from {clock(e.start)})")
                    else:
                        parts.append(f"already off at {clock(e.start)}")
                cells.append("; ".join(parts) or "no drop below the gate")
                details = ", ".join(f"{f.action} at {clock(f.t)}" for f in sc.false_flips)
                cells.append(f"{len(sc.false_flips)}" + (f" ({details})" if details else ""))
        table.add_row(*cells)
    return table


def _truth_notes(result: BacktestResult, u: UnitResult) -> list[str]:
    if u.score is None:
        return []
    gate = result.gate[0]
    out = []
    for e in u.score.episodes:
        end = clock(e.end) if e.end is not None else "the end"
        head = (
            f"True alpha below {gate:g} from {clock(e.start)} to {end} (lowest {e.min_alpha:.3f})"
        )
        if e.delay is not None:
            out.append(f"{head}: disabled at {clock(e.start + e.delay)}, detection delay "
                       f"{e.delay:.0f} s.")  # fmt: skip
        elif e.missed:
            out.append(f"{head}: never disabled (missed).")
        else:
            out.append(f"{head}: speculation was already off.")
    if not u.score.episodes:
        out.append(f"The true alpha never fell below {gate:g}.")
    out.append(
        f"False flips: {len(u.score.false_flips)}"
        + "".join(
            f"; {f.action} at {clock(f.t)} (true alpha {f.true_alpha:.3f}: {f.why})"
            for f in u.score.false_flips
        )
    )
    return out


def write_reports(result: BacktestResult, out: Path) -> list[Path]:
    """report.write per unit (one dir per slice for perSlice) plus backtest.json."""
    written: list[Path] = []
    events = [
        f"Recorded at {clock(e.t - result.start)}: {e.kind}: {e.message}"
        for e in result.events
        if e.kind == "timeline"
    ]
    for u in result.units:
        target = out / u.name if len(result.units) > 1 else out
        notes = [*_truth_notes(result, u), *result.notes, *events]
        last = u.points[-1].t if u.points else 0.0
        spans = [
            (e.start, e.end if e.end is not None else last, f"true alpha < {result.gate[0]:g}")
            for e in (u.score.episodes if u.score is not None else ())
        ]
        paths = report.write(
            u.points, target, title=result.title(u), gate=result.gate, notes=notes, spans=spans
        )
        written += list(paths.values())
    out.mkdir(parents=True, exist_ok=True)
    js = out / "backtest.json"
    js.write_text(json.dumps(_clean(result.to_json()), indent=2) + "\n", encoding="utf-8")
    written.append(js)
    return written


def _clean(obj: Any) -> Any:
    """JSON without NaN/inf (they become null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def render(result: BacktestResult, console: Console, *, every: bool) -> None:
    spec = result.spec
    src = result.source
    if src.get("kind") == "recording":
        what = (
            f"recording {src.get('path')} (scenario {src.get('scenario')}, seed {src.get('seed')},"
            f" {clock(float(src.get('duration_seconds') or 0))})"
        )
    else:
        what = f"Prometheus {src.get('url', '')} from {src.get('start')} to {src.get('end')}"
    a, t = spec.acceptance, spec.timing
    console.print(
        f"[bold]Backtest of {result.policy}[/bold] ({spec.aggregation.value}, gate "
        f"{a.disable_below:g}/{a.enable_above:g}, every {t.interval_seconds:g} s over "
        f"{t.window_seconds:g} s) on {what}"
    )
    console.print(timeline_table(result, every=every))
    console.print(summary_table(result))
    for note in result.notes:
        console.print(Text("note: " + note, style="dim"))


# --------------------------------------------------------------------------- command


def _progress(console: Console, enabled: bool) -> tuple[Callable[[float], None] | None, Any]:
    if not enabled:
        return None, None
    from rich.progress import Progress, SpinnerColumn, TextColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console,
                   transient=True)  # fmt: skip
    task = bar.add_task("replaying")

    def update(done: float) -> None:
        bar.update(task, description=f"replayed {clock(done)} of recorded time")

    return update, bar


def backtest(
    policy: Path = typer.Option(..., "--policy", "-p", help="SpeculativeCanary YAML file."),
    name: str | None = typer.Option(None, "--name", help="Resource in a multi-document file."),
    recording: Path | None = typer.Option(
        None, "--recording", "-r", help="Simulator recording (alphagate sim --fast --record)."
    ),
    prometheus: str | None = typer.Option(
        None, "--prometheus", help="Prometheus base URL to read a historical range from."
    ),
    start: str | None = typer.Option(
        None, "--start", help="Range start: unix seconds, RFC 3339, `now-2h` (--prometheus)."
    ),
    end: str | None = typer.Option(None, "--end", help="Range end (default now) (--prometheus)."),
    step: str | None = typer.Option(
        None, "--step", help="Evaluate every S, e.g. 30s (default: the policy's interval)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write report.md, timeline.png, points.jsonl, backtest.json."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    initial_state: str = typer.Option(
        "off",
        "--initial-state",
        help="off: a new canary (the first evaluation probes); on: already speculating.",
    ),
    rollout: str = typer.Option(
        "0s", "--rollout", help="Modelled time from a flip to the rollout's completion."
    ),
    every: bool = typer.Option(
        False, "--every-evaluation", help="List every evaluation, not only transitions and flips."
    ),
) -> None:
    """Replay a policy through the decision core over recorded metrics.

    Prints the decision timeline, flips, time in each state and, for simulator recordings
    (they carry the truth), detection delay and false flips. A backtest cannot change recorded
    data: it answers what this policy would have decided on this traffic.

    Example: alphagate sim -s scenarios/chat-to-code.yaml --fast --record rec.jsonl, then
    alphagate backtest -p policy.yaml -r rec.jsonl --out report/
    """
    if (recording is None) == (prometheus is None):
        raise typer.BadParameter("give exactly one of --recording or --prometheus")
    if initial_state not in ("off", "on"):
        raise typer.BadParameter("must be off or on", param_hint="--initial-state")
    options = Options(
        initial_on=initial_state == "on", rollout_seconds=_seconds(rollout, "--rollout")
    )
    console = Console(stderr=as_json)
    if not console.is_terminal:
        console = Console(stderr=as_json, width=max(console.width, WIDE))
    err = Console(stderr=True)
    try:
        canary = load_policy(policy, name)
        spec = canary.spec
        title = canary.metadata.name
        progress, bar = _progress(err, err.is_terminal and not as_json)
        if recording is not None:
            if start or end or step:
                raise typer.BadParameter("--start/--end/--step go with --prometheus only")
            if bar is not None:
                with bar:
                    result = run_recording(
                        spec, recording, policy=title, where=str(policy), options=options,
                        progress=progress,
                    )  # fmt: skip
            else:
                result = run_recording(
                    spec, recording, policy=title, where=str(policy), options=options
                )
        else:
            assert prometheus is not None
            result = _run_prometheus(
                spec, prometheus, start, end, step, title=title, options=options
            )
    except AlphagateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    written = write_reports(result, out) if out is not None else []
    if as_json:
        data = _clean(result.to_json())
        if written:
            data["written"] = [str(p) for p in written]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    render(result, console, every=every)
    if written:
        console.print("report: " + ", ".join(str(p) for p in written))


def _run_prometheus(
    spec: Any,
    url: str,
    start: str | None,
    end: str | None,
    step: str | None,
    *,
    title: str,
    options: Options,
) -> BacktestResult:
    from alphagate.sources.common import redact_url
    from alphagate.sources.endpoints import PrometheusEndpoint, check_url
    from alphagate.sources.prometheus import PrometheusSource

    try:
        check_url(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--prometheus") from None
    if start is None:
        raise typer.BadParameter("--prometheus needs --start", param_hint="--start")
    now = time.time()
    t0 = parse_time(start, now=now, option="--start")
    t1 = parse_time(end, now=now, option="--end") if end is not None else now
    if t1 <= t0:
        raise typer.BadParameter(f"must be after --start ({t0:.0f}), got {t1:.0f}",
                                 param_hint="--end")  # fmt: skip
    step_s = _seconds(step, "--step") if step is not None else None
    if step_s is not None and step_s <= 0:
        raise typer.BadParameter("must be > 0", param_hint="--step")
    # The person at the terminal names the Prometheus: an endpoint of their own.
    base = spec.source.prometheus
    timeout = base.timeout_seconds if base is not None else None
    endpoint = PrometheusEndpoint(url=url, timeout_seconds=timeout or 10.0)
    with PrometheusSource(endpoint) as source:
        try:
            return run_range(
                spec, source, start=t0, end=t1, step=step_s, policy=title, options=options,
                describe={"url": redact_url(url)},
            )  # fmt: skip
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--step") from None


def register(app: typer.Typer) -> None:
    app.command("backtest")(backtest)


__all__ = ["backtest", "load_policy", "parse_time", "register", "write_reports"]

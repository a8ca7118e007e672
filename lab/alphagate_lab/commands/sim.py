"""`alphagate sim --scenario FILE`: run a simulated vLLM fleet.

Real time (default): every pod serves vLLM's ``/metrics`` on its own 127.0.0.1 port, the
command prints the pods and ports, follows the scenario's timeline and, with ``--file-sd``,
keeps a Prometheus file-SD target list up to date. ``POST /sim/args`` on a pod's port
changes its config like a restart. Ctrl-C stops it cleanly.

Fast (``--fast``): the same fleet in-process, thousands of times faster than real time;
``--record PATH`` writes a JSONL recording (see alphagate_lab.sim.recording), otherwise a
per-pod summary is printed.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import typer

from alphagate import vllm
from alphagate.errors import AlphagateError
from alphagate_lab.sim.fleet import Fleet, FleetEvent, FleetSnapshot
from alphagate_lab.sim.recording import RecordingWriter
from alphagate_lab.sim.scenario import load_scenario, parse_duration
from alphagate_lab.sim.server import SimServer

#: Fast mode ticks at most this long (simulated seconds): one tick per usual scrape interval.
FAST_TICK = 15.0
#: How often the real-time loop wakes up (wall seconds).
POLL = 0.2


def _duration(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=name) from None


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


#: What stops the real-time loop: Ctrl-C, and a supervisor's SIGTERM.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _catch_stop_signals() -> tuple[dict[signal.Signals, Any], set[int | signal.Signals]]:
    """Make STOP_SIGNALS raise KeyboardInterrupt, explicitly, and unblock them; return the
    handlers and the signal mask they replaced (`_restore` puts them back).

    Python's default KeyboardInterrupt is not enough: a process started with SIGINT ignored
    keeps it ignored (an ignored disposition survives exec: a shell's background job, a test
    runner's worker), and one started with it blocked never receives it.
    """
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in STOP_SIGNALS}
    return previous, signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _restore(previous: dict[signal.Signals, Any], mask: set[int | signal.Signals]) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for sig, handler in previous.items():
        if handler is not None:  # None: set outside Python, nothing to put back
            signal.signal(sig, handler)


def _fmt_t(t: float) -> str:
    h, rem = divmod(int(t), 3600)
    m, s = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{s:02d}"


def _print_event(ev: FleetEvent, ports: dict[str, int] | None = None) -> None:
    extra = ""
    if ports is not None and ev.kind == "pod_added" and ev.pod in ports:
        extra = f" on 127.0.0.1:{ports[ev.pod]}"
    typer.echo(f"[{_fmt_t(ev.t)}] {ev.kind}: {ev.message}{extra}")


def _pod_table(fleet: Fleet, ports: dict[str, int]) -> None:
    rows = [("POD", "ROLE", "SLICE", "DEPLOYMENT", "K", "STATE", "METRICS")]
    for pod in fleet.pods.values():
        port = ports.get(pod.name)
        url = f"http://127.0.0.1:{port}/metrics" if port else "-"
        rows.append(
            (
                pod.name,
                pod.spec.role,
                pod.spec.slice,
                pod.spec.deployment,
                str(pod.k) if pod.k else "off",
                pod.phase,
                url,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _summary(snap: FleetSnapshot) -> None:
    rows = [("POD", "ROLE", "SLICE", "K", "ALPHA", "TRUE", "GEN TOKENS", "ITL MEAN", "TPOT MEAN")]
    for p in snap.pods:
        c = p.counters
        drafted = c.get(vllm.SPEC_DRAFT_TOKENS, 0)
        alpha = f"{c[vllm.SPEC_ACCEPTED] / drafted:.3f}" if drafted else "-"
        itl, tpot = p.histograms[vllm.ITL], p.histograms[vllm.TPOT]
        truth = snap.truth.slices[p.labels["slice"]].alpha
        rows.append(
            (
                p.name,
                p.labels["role"],
                p.labels["slice"],
                str(p.spec_k or "off"),
                alpha,
                f"{truth:.3f}",
                str(c[vllm.GENERATION_TOKENS]),
                f"{itl.sum / itl.count * 1000:.1f}ms" if itl.count else "-",
                f"{tpot.sum / tpot.count * 1000:.1f}ms" if tpot.count else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def run_fast(
    fleet: Fleet, *, duration: float, every: float, record: Path | None, quiet: bool = False
) -> FleetSnapshot:
    """Run in-process to ``duration``; write a recording if asked. Returns the last snapshot."""
    started = time.perf_counter()
    writer = RecordingWriter(record, fleet, interval=every) if record else None
    last: FleetSnapshot | None = None
    try:
        for snap in fleet.run(duration, every=every):
            events = fleet.drain_events()
            if writer:
                writer.write_events(events)
                writer.write(snap)
            if not quiet:
                for ev in events:
                    if ev.kind != "pod_added" or snap.t > 0:
                        _print_event(ev)
            last = snap
    finally:
        if writer:
            writer.close()
    elapsed = time.perf_counter() - started
    assert last is not None
    speedup = last.t / elapsed if elapsed > 0 else float("inf")
    where = f" to {record}" if record else ""
    typer.echo(
        f"simulated {_fmt_t(last.t)} of {len(last.pods)} pods in {elapsed:.2f}s "
        f"({speedup:,.0f}x real time){where}"
    )
    return last


def run_real_time(
    fleet: Fleet,
    *,
    duration: float,
    speed: float,
    port_base: int | None,
    file_sd: Path | None,
    record: Path | None,
    every: float,
) -> None:
    """Serve the fleet until ``duration`` simulated seconds have passed or Ctrl-C."""
    server = SimServer(fleet, speed=speed, port_base=port_base, file_sd=file_sd)
    writer: RecordingWriter | None = None
    caught = None
    if threading.current_thread() is threading.main_thread():
        caught = _catch_stop_signals()
    try:
        server.start()
        for ev in server.sync():
            if ev.kind != "pod_added":
                _print_event(ev)
        _pod_table(fleet, server.ports)
        if file_sd:
            typer.echo(f"file-SD targets: {file_sd}")
        typer.echo(
            f"running {fleet.scenario.name!r} at {speed:g}x for {_fmt_t(duration)} "
            "(simulated); Ctrl-C stops"
        )
        if record:
            writer = RecordingWriter(record, fleet, interval=every)
        next_record = 0.0
        while True:
            with server.lock:
                events = server.sync()
                ports = server.ports
                if writer and fleet.now >= next_record:
                    writer.write_events(events)
                    writer.write(fleet.snapshot())
                    next_record = fleet.now + every
            for ev in events:
                _print_event(ev, ports)
            if fleet.now >= duration:
                typer.echo(f"[{_fmt_t(fleet.now)}] scenario finished")
                break
            time.sleep(POLL)
    except KeyboardInterrupt:
        typer.echo(f"\n[{_fmt_t(fleet.now)}] interrupted; stopping")
    finally:
        server.close()
        if writer:
            writer.close()
        if caught is not None:
            _restore(*caught)


def sim(
    scenario: Path = typer.Option(
        ..., "--scenario", "-s", help="Scenario YAML file (see scenarios/)."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Random seed (default: the scenario's)."),
    speed: float = typer.Option(
        1.0, "--speed", min=0.001, help="Simulated seconds per wall second (real time)."
    ),
    duration: str | None = typer.Option(
        None, "--duration", help="How long to run, e.g. 90s, 10m, 24h (default: the scenario's)."
    ),
    file_sd: Path | None = typer.Option(
        None, "--file-sd", help="Write a Prometheus file-SD target list here (real time)."
    ),
    port_base: int | None = typer.Option(
        None,
        "--port-base",
        min=1,
        max=65535,
        help="First port; pods get consecutive ports (default: free ports).",
    ),
    record: Path | None = typer.Option(
        None, "--record", help="Write a JSONL recording of snapshots and truth."
    ),
    fast: bool = typer.Option(
        False, "--fast", help="Run in-process as fast as possible instead of serving pods."
    ),
    every: str | None = typer.Option(
        None,
        "--every",
        help="Recording interval (simulated; default: the scenario's Prometheus scrape interval).",
    ),
    tick: str | None = typer.Option(
        None, "--tick", help="Simulation tick (default: scenario's; at most 15s with --fast)."
    ),
) -> None:
    """Run a simulated vLLM fleet from a scenario file."""
    dur = _duration(duration, "--duration")
    given = _duration(every, "--every")
    tick_s = _duration(tick, "--tick")
    if given is not None and given <= 0:
        raise typer.BadParameter("must be > 0", param_hint="--every")
    if tick_s is not None and tick_s <= 0:
        raise typer.BadParameter("must be > 0", param_hint="--tick")
    try:
        sc = load_scenario(scenario)
        interval = sc.prometheus.scrape_interval if given is None else given
        end = sc.duration if dur is None else dur
        if fast:
            t = tick_s if tick_s is not None else min(interval, FAST_TICK)
            if abs(interval / t - round(interval / t)) > 1e-9:
                raise typer.BadParameter(
                    f"the recording interval {interval:g}s is not a multiple of the tick {t:g}s",
                    param_hint="--every",
                )
            fleet = Fleet(sc, seed=seed, tick=t)
            last = run_fast(fleet, duration=end, every=interval, record=record)
            if record is None:
                _summary(last)
        else:
            fleet = Fleet(sc, seed=seed, tick=tick_s, start_epoch=time.time())
            run_real_time(
                fleet,
                duration=end,
                speed=speed,
                port_base=port_base,
                file_sd=file_sd,
                record=record,
                every=interval,
            )
    except AlphagateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)

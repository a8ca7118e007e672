"""``python -m alphagate_lab.bench.decisions [--quick] [--out DIR] [--seeds N] [--hours H] ...``.

Runs every (scenario, seed, policy) of the suite in closed loop on ``--jobs`` processes, scores
each run in its worker, and writes decisions.md, decisions.json and decisions.png under
``--out``. The whole run is bounded by ``--max-minutes``: past it, the runs not finished are
dropped and the outputs say the run is partial. Nothing here asserts anything about speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

from alphagate_lab.bench.decisions import loop, report, score, suite

QUICK_ARGS = ["--quick"]
"""What `python -m alphagate_lab.bench --quick` passes: a smoke run."""

Task = tuple[str, int, tuple[str, ...], float]
Scored = tuple[str, int, str, score.RunScore]


def _task(task: Task) -> list[Scored]:
    """Every policy on one (case, seed), sharing the fleet until each acts."""
    case, seed, policies, hours = task
    runs = loop.run_group(case, seed, policies, hours)
    return [(case, seed, r.policy, score.score_run(r)) for r in runs]


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def _names(value: str, known: tuple[str, ...], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"--{what}: unknown {unknown}; known: {', '.join(known)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m alphagate_lab.bench.decisions", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--out", type=Path, default=Path("decisions-out"), help="output folder")
    p.add_argument("--seeds", type=int, default=20, help="seeds per scenario (default 20)")
    p.add_argument(
        "--hours",
        type=float,
        default=None,
        help="simulated hours per run, for every scenario (default: each scenario's own: "
        f"{suite.HOURS:g} h, {suite.DAY:g} h for the per-day ones)",
    )
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes")
    p.add_argument("--cases", default="", help="comma-separated scenarios (default all)")
    p.add_argument("--policies", default="", help="comma-separated policies (default all)")
    p.add_argument("--max-minutes", type=float, default=45.0, help="wall-time bound")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 0.2 h per run")
    p.add_argument(
        "--from-json", type=Path, help="only re-render the outputs from a decisions.json"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.hours = 2, 0.2
    if args.seeds < 1 or not (args.hours is None or 0 < args.hours <= 24 * 7) or args.jobs < 1:
        p.error("--seeds and --jobs must be >= 1 and --hours in (0, 168]")
    return args


def case_hours(override: float | None, cases: list[str]) -> dict[str, float]:
    """Simulated hours per run of each scenario: its own (a day for the per-day targets),
    unless --hours gives one for all."""
    return {c: override if override is not None else suite.BY_NAME[c].hours for c in cases}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json is not None:
        try:
            saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--from-json {args.from_json}: cannot read it: {exc}") from None
        paths = report.write(saved, args.out)
        print("wrote " + ", ".join(str(p) for p in paths.values()))
        return 0
    all_cases = tuple(c.name for c in suite.SUITE)
    named = (*all_cases, *(c.name for c in suite.EXTRA_CASES))
    cases = _names(args.cases, named, "cases") if args.cases else list(all_cases)
    policies = (
        _names(args.policies, (*loop.POLICY_NAMES, *loop.EXTRA_POLICIES), "policies")
        if args.policies
        else list(loop.POLICY_NAMES)
    )
    if "oracle" not in policies:
        policies.insert(0, "oracle")  # regret needs it
    hours = case_hours(args.hours, cases)
    tasks: list[Task] = [
        # Seed-major, so a run cut short by --max-minutes still covers every scenario; the
        # long scenarios of a seed first, so the short ones fill the processes at the end.
        (c, seed, tuple(policies), hours[c])
        for seed in range(1, args.seeds + 1)
        for c in sorted(cases, key=lambda c: -hours[c])
    ]
    print(
        f"decision benchmark: {len(cases)} scenarios x {args.seeds} seeds x {len(policies)} "
        f"policies = {len(tasks) * len(policies)} runs ({report.hours_text(hours)}) on "
        f"{args.jobs} processes",
        flush=True,
    )
    t0 = time.perf_counter()
    deadline = t0 + args.max_minutes * 60.0
    done: list[Scored] = []
    partial = ""
    ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
    with ctx.Pool(args.jobs) as pool:
        # A TERM (kill <pid>) unwinds like Ctrl-C, so the pool's exit ends its workers too
        # (set after the fork: the workers keep the default handler).
        previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        results = pool.imap_unordered(_task, tasks, chunksize=1)
        for _ in range(len(tasks)):
            left = deadline - time.perf_counter()
            try:
                done.extend(results.next(timeout=max(left, 0.001)))
            except multiprocessing.TimeoutError:
                partial = (
                    f"stopped at --max-minutes {args.max_minutes:g} with {len(done)} of "
                    f"{len(tasks) * len(policies)} runs done"
                )
                pool.terminate()
                break
            total = len(tasks) * len(policies)
            print(f"  {len(done)}/{total} runs, {time.perf_counter() - t0:.0f} s", flush=True)
    signal.signal(signal.SIGTERM, previous)
    wall = time.perf_counter() - t0
    result: dict[str, Any] = {
        "meta": {
            "seeds": args.seeds,
            "hours": args.hours,
            "case_hours": hours,
            "cases": cases,
            "policies": policies,
            "runs": len(done),
            "jobs": args.jobs,
            "wall_seconds": wall,
            "machine": _machine(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "partial": partial,
            "tick_seconds": loop.TICK,
            "decision_step_seconds": loop.STEP,
        },
        "aggregate": score.aggregate(done),
        "renderings": dict(report_renderings()),
    }
    paths = report.write(result, args.out)
    print(report.markdown(result).split("## Per scenario")[0], flush=True)
    print(f"wall time {wall:.0f} s; wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if partial else 0


def report_renderings() -> dict[str, str]:
    from alphagate_lab.bench.decisions import anchors

    return dict(anchors.RENDERING)

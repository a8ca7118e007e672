"""``python -m alphagate_lab.bench.decisions [--quick] [--out DIR] [--seeds N] [--jobs N] ...``.

Runs every (scenario, seed, policy) of the suite in closed loop on ``--jobs`` processes, scores
each run in its worker, and writes decisions.md (issue 21's checklist first), decisions.json,
decisions.png and, when a policy raised, exceptions.txt under ``--out``. One task is one
scenario and seed with all its policies (they share the fleet until each acts). A run never
crashes the benchmark: a policy's exception is recorded and the canary holds; a task that
fails whole is counted and its traceback saved. The whole run is bounded by ``--max-minutes``:
past it, unfinished tasks are dropped and the outputs say the run is partial. Progress (tasks,
runs, elapsed, an estimate of what is left) is printed as tasks finish. Nothing here asserts
anything about speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from alphagate_lab.bench.decisions import calibrate, loop, report, score, suite

QUICK_ARGS = ["--quick"]
"""What `python -m alphagate_lab.bench --quick` passes: a smoke run."""

QUICK_SEEDS = 1
QUICK_HOURS = 0.25

Task = tuple[str, int, tuple[str, ...], float]
Scored = tuple[str, int, str, score.RunScore]
Outcome = tuple[str, int, list[Scored], str]  # case, seed, scored runs, task traceback


def _task(task: Task) -> Outcome:
    """Every policy on one (case, seed), sharing the fleet until each acts; a crash of the
    whole task is returned as its traceback, never raised."""
    case, seed, policies, hours = task
    try:
        runs = loop.run_group(case, seed, policies, hours)
        return case, seed, [(case, seed, r.policy, score.score_run(r)) for r in runs], ""
    except Exception:
        return case, seed, [], f"{case} seed {seed}:\n{traceback.format_exc()}"


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


def _commit() -> str:
    """The checked-out commit (and whether the tree had changes), or "unknown"."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")


def _names(value: str, known: tuple[str, ...], what: str, groups: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for v in (v.strip() for v in value.split(",")):
        if not v:
            continue
        if v in groups:
            names.extend(groups[v])
        elif v in known:
            names.append(v)
        else:
            more = f"; groups: {', '.join(groups)}" if groups else ""
            raise SystemExit(f"--{what}: unknown {v!r}; known: {', '.join(known)}{more}")
    return list(dict.fromkeys(names))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m alphagate_lab.bench.decisions", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--out", type=Path, default=Path("decisions-out"), help="output folder")
    p.add_argument("--seeds", type=int, default=10, help="seeds per scenario (default 10)")
    p.add_argument(
        "--day-seeds",
        type=int,
        default=3,
        help="seeds per per-day scenario (a simulated day each; default 3, at most --seeds)",
    )
    p.add_argument(
        "--hours",
        type=float,
        default=None,
        help="simulated hours per run, for every scenario (default: each scenario's own: "
        f"{suite.HOURS:g} h, {suite.DAY:g} h for the per-day ones)",
    )
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes")
    p.add_argument(
        "--cases",
        default="",
        help="comma-separated scenarios or groups (acceptance, latency, per-day); default all",
    )
    p.add_argument("--policies", default="", help="comma-separated policies (default all)")
    p.add_argument("--max-minutes", type=float, default=90.0, help="wall-time bound")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_SEEDS} seed, {QUICK_HOURS:g} h per run, every scenario",
    )
    p.add_argument(
        "--from-json", type=Path, help="only re-render the outputs from a decisions.json"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.day_seeds, args.hours = QUICK_SEEDS, QUICK_SEEDS, QUICK_HOURS
    if (
        args.seeds < 1
        or args.day_seeds < 1
        or not (args.hours is None or 0 < args.hours <= 24 * 7)
        or args.jobs < 1
    ):
        p.error("--seeds, --day-seeds and --jobs must be >= 1 and --hours in (0, 168]")
    return args


def case_hours(override: float | None, cases: list[str]) -> dict[str, float]:
    """Simulated hours per run of each scenario: its own (a day for the per-day targets),
    unless --hours gives one for all."""
    return {c: override if override is not None else suite.BY_NAME[c].hours for c in cases}


def _cost(task: Task) -> float:
    """A rough cost of a task, for ordering and the progress estimate: simulated hours x pods
    x policies that decide (the oracle's are free)."""
    case = suite.BY_NAME[task[0]]
    topo = suite.TOPOLOGIES[case.topology]
    return task[3] * (topo.canaries + topo.baselines + 2) * max(1, len(task[2]) - 1)


def plan(args: argparse.Namespace) -> tuple[list[str], list[str], list[Task], dict[str, float]]:
    """The cases, policies and tasks a run will do, heaviest first within each seed."""
    all_cases = tuple(c.name for c in suite.SUITE)
    named = tuple(suite.BY_NAME)
    groups = dict(suite.group_names())
    cases = _names(args.cases, named, "cases", groups) if args.cases else list(all_cases)
    known = (*loop.POLICY_NAMES, *loop.EXTRA_POLICIES)
    policies = (
        _names(args.policies, known, "policies", {}) if args.policies else list(loop.POLICY_NAMES)
    )
    if "oracle" not in policies:
        policies.insert(0, "oracle")  # regret needs it
    hours = case_hours(args.hours, cases)
    tasks: list[Task] = []
    for seed in range(1, args.seeds + 1):
        batch = []
        for c in cases:
            case = suite.BY_NAME[c]
            if case.per_day and seed > args.day_seeds:
                continue
            allowed = case.policies or tuple(policies)
            mine = tuple(p for p in policies if p in allowed)
            batch.append((c, seed, mine, hours[c]))
        tasks += sorted(batch, key=lambda t: -_cost(t))
    return cases, policies, tasks, hours


def _calibration(cases: list[str]) -> dict[str, str]:
    """What each latency case injects, in words, from its healthy twin."""
    out = {}
    for name in cases:
        case = suite.BY_NAME[name]
        reg = case.regression
        if reg is None:
            continue
        h = calibrate.healthy(case)
        mean, p99 = calibrate.injected_ratios(case)
        ratios = f"mean/baseline {mean:.2f}, P99/baseline {p99:.2f}"
        if reg.kind == "uniform":
            s = calibrate.uniform_scale(h, reg.factor)
            out[name] = f"steps x{s:.2f}; {ratios}"
        else:
            m = calibrate.tail_factor(h, reg.factor)
            out[name] = f"{suite.TAIL_SHARE:.0%} of requests x{m:.1f}; {ratios}"
    return out


def _progress(done: int, total: int, runs: int, t0: float, cost_done: float, cost: float) -> str:
    elapsed = time.perf_counter() - t0
    left = elapsed * (cost - cost_done) / cost_done if cost_done > 0 else float("nan")
    return (
        f"  [{done}/{total} tasks] {runs} runs, {elapsed / 60:.1f} min elapsed, "
        f"~{left / 60:.0f} min left"
    )


def _unique(tracebacks: list[str]) -> list[str]:
    """Tracebacks with the same body once each, with how often and where it was first met."""
    seen: dict[str, tuple[int, str]] = {}
    for tb in tracebacks:
        head, _, body = tb.partition("\n")
        n, first = seen.get(body, (0, head))
        seen[body] = (n + 1, first)
    return [f"x{n}, first at {first}\n{body}" for body, (n, first) in seen.items()]


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
    cases, policies, tasks, hours = plan(args)
    total_runs = sum(len(t[2]) for t in tasks)
    print(
        f"decision benchmark: {len(cases)} scenarios, {args.seeds} seeds ({args.day_seeds} for "
        f"per-day ones), {len(policies)} policies = {total_runs} runs in {len(tasks)} tasks "
        f"({report.hours_text(hours)}) on {args.jobs} processes",
        flush=True,
    )
    calibration = _calibration(cases)
    t0 = time.perf_counter()
    deadline = t0 + args.max_minutes * 60.0
    done: list[Scored] = []
    tracebacks: list[str] = []
    failures: list[str] = []
    partial = ""
    cost = sum(_cost(t) for t in tasks)
    cost_of = {(t[0], t[1]): _cost(t) for t in tasks}
    cost_done = 0.0
    ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
    with ctx.Pool(args.jobs) as pool:
        # A TERM (kill <pid>) unwinds like Ctrl-C, so the pool's exit ends its workers too
        # (set after the fork: the workers keep the default handler).
        previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        results = pool.imap_unordered(_task, tasks, chunksize=1)
        for i in range(len(tasks)):
            left = deadline - time.perf_counter()
            try:
                case, seed, scored, crash = results.next(timeout=max(left, 0.001))
            except multiprocessing.TimeoutError:
                partial = (
                    f"stopped at --max-minutes {args.max_minutes:g} with {i} of {len(tasks)} "
                    "tasks done"
                )
                pool.terminate()
                break
            done.extend(scored)
            for c, s, p, sc in scored:
                tracebacks += [f"{c} seed {s} {p} {tb}" for tb in sc.tracebacks]
                sc.tracebacks = []
            if crash:
                failures.append(crash)
            cost_done += cost_of[(case, seed)]
            print(_progress(i + 1, len(tasks), len(done), t0, cost_done, cost), flush=True)
    signal.signal(signal.SIGTERM, previous)
    wall = time.perf_counter() - t0
    scored_cases = [c for c in cases if suite.BY_NAME[c].scored]
    aggregate = score.aggregate(done, scored_cases)
    aggregate["task_failures"] = failures
    result: dict[str, Any] = {
        "meta": {
            "seeds": args.seeds,
            "day_seeds": args.day_seeds,
            "hours": args.hours,
            "case_hours": hours,
            "hours_text": report.hours_text(hours),
            "cases": cases,
            "scored": scored_cases,
            "policies": policies,
            "runs": len(done),
            "jobs": args.jobs,
            "wall_seconds": wall,
            "machine": _machine(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _commit(),
            "partial": partial,
            "tick_seconds": loop.TICK,
            "decision_step_seconds": loop.STEP,
            "calibration": calibration,
            "command": "python -m alphagate_lab.bench.decisions " + " ".join(argv or sys.argv[1:]),
        },
        "aggregate": aggregate,
        "renderings": dict(report_renderings()),
    }
    paths = report.write(result, args.out, _unique(tracebacks) + failures)
    print(report.markdown(result).split("## alphagate per scenario")[0], flush=True)
    print(f"wall time {wall:.0f} s; wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if partial else 0


def report_renderings() -> dict[str, str]:
    from alphagate_lab.bench.decisions import anchors

    return dict(anchors.RENDERING)

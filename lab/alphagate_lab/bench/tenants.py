"""`python -m alphagate_lab.bench.tenants`: the noisy-neighbour benchmark (issue 22, item 5).

N healthy canaries (namespace `llm`) beside one hostile tenant (namespace `hostile`), one
attack class at a time (`bench.tenants_attacks.ATTACKS`), each run against a run of the same
victims with no attacker: the real controller (`alphagate run`, a child process, the shipped
budgets) against the API double, pods on loopback (`bench.tenants_pods`), a real Prometheus
for the Prometheus classes. For each class it prints the victims' decisions (their flips, each
with its verdict, and the verdicts seen) against the run without the attacker, their
evaluation delay (the longest gap between two evaluations of a victim, less its interval), the
controller's peak RSS, API requests a second, whether `/healthz` stayed live, what the
attacker's canaries show, and a PASS/FAIL line against the issue's "done when":

  * decisions: every victim is evaluated and decides nothing it did not decide without the
    attacker (its flips begin the same way, no verdict it never gave; a flip not made yet
    because it was evaluated late is the delay's to judge);
  * delay: the victims' worst delay grows by at most one interval;
  * memory and health: peak RSS under the 512 Mi pod limit, `/healthz` answered every time;
  * typed: the attacker's canaries alone are Inconclusive or Error, and a condition names the
    budget they exceeded (a reason containing "Budget": e.g. WithinApiBudget=False
    `CanaryApiBudgetExceeded`; for cross-namespace, whose policy is refused outright,
    SpecValid=False `CrossNamespace`); no victim is Error (the victims' Error reasons are
    printed). A class whose attacker spends nothing shared past a budget (`Attack.exceeds`
    False: concurrency-collapse, prometheus-pools, many-windows; docs/reliability.md has the
    numbers) is judged contained instead: its canaries judged on their own data (evaluated,
    not Error: their verdicts and False conditions printed) or naming a budget they did
    exceed (a loaded Prometheus refusing prometheus-pools' pools), no victim Error.

Numbers only, no assertion on speed; every loop is bounded (`--seconds` per run); binds
127.0.0.1 only. `--quick`: two victims, 45 s runs. `--attacks a,b` runs some classes only.
`--no-api-budget` runs the controller without its Kubernetes API budgets (the "before" of
the slice flood).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from alphagate_lab.bench.fleet import _machine, _page
from alphagate_lab.bench.tenants_attacks import ATTACKS, BY_NAME, Attack, victims
from alphagate_lab.bench.tenants_run import RunResult, run
from alphagate_lab.testing import prometheus as promtest

MEMORY_LIMIT_MIB: Final = 512.0
"""The shipped Deployment's memory limit (deploy/base/deployment.yaml)."""
NO_BUDGET: Final = ("--api-qps", "0", "--api-namespace-qps", "0", "--api-canary-qps", "0")
INTERVAL: Final = 2.0
"""The victims' interval (window four intervals)."""


@dataclass
class Verdict:
    """One attack class judged against its run without the attacker."""

    attack: Attack
    base: RunResult
    got: RunResult
    interval: float

    @property
    def same_decisions(self) -> bool:
        """Every victim evaluated, and no decision different from the run without the
        attacker: the flips of one run begin the other's (one not made yet, because the
        victim was evaluated later or less often, is the delay's to judge) and no verdict
        appears that the run without the attacker never gave."""
        for victim, base_evs in self.base.victims.items():
            got, want = decisions(self.got, victim), decisions(self.base, victim)
            short = min(len(got[0]), len(want[0]))
            if not self.got.victims.get(victim) or not base_evs:
                return False
            if got[0][:short] != want[0][:short] or not got[1] <= want[1]:
                return False
        return True

    @property
    def delay(self) -> float:
        return worst_delay(self.got, self.interval)

    @property
    def delay_ok(self) -> bool:
        return self.delay <= worst_delay(self.base, self.interval) + self.interval

    @property
    def healthy(self) -> bool:
        return (
            self.got.peak_rss_mib < MEMORY_LIMIT_MIB
            and self.got.healthz_failed == 0
            and self.got.healthz_ok > 0
        )

    @property
    def typed(self) -> bool:
        named = [budget_named(st, self.attack.named) for st in self.got.attacker.values()]
        victims_error = any(e.verdict == "Error" for evs in self.got.victims.values() for e in evs)
        return bool(named) and all(n is not None for n in named) and not victims_error

    @property
    def contained(self) -> bool:
        """For a class whose attacker need exceed no budget (`Attack.exceeds` False): each of
        its canaries was judged on its own data (evaluated, not Error) or, where it did spend
        a budget (prometheus-pools on a loaded Prometheus: `server_cost`), names it; and no
        victim is Error."""
        ok = [
            budget_named(st, self.attack.named) is not None
            or (st.get("lastDecision") or {}).get("verdict") not in (None, "", "Error")
            for st in self.got.attacker.values()
        ]
        victims_error = any(e.verdict == "Error" for evs in self.got.victims.values() for e in evs)
        return bool(ok) and all(ok) and not victims_error

    @property
    def attacker_ok(self) -> bool:
        return self.typed if self.attack.exceeds else self.contained

    @property
    def passed(self) -> bool:
        return (
            not self.got.error
            and self.same_decisions
            and self.delay_ok
            and self.healthy
            and self.attacker_ok
        )


def decisions(r: RunResult, victim: str) -> tuple[tuple[tuple[str, str], ...], frozenset[str]]:
    """A victim's flips (action and verdict, holds left out) and every verdict it saw."""
    evs = r.victims.get(victim, [])
    flips = tuple((e.action, e.verdict) for e in evs if e.action not in ("hold", ""))
    return flips, frozenset(e.verdict for e in evs)


def worst_delay(r: RunResult, interval: float) -> float:
    """The longest wait of any victim between two evaluations (or from its last one to the
    end of the run), less its interval; the whole run when a victim was never evaluated."""
    worst = 0.0
    for evs in r.victims.values():
        ats = [e.at for e in evs] + [r.seconds]
        gaps = [b - a for a, b in itertools.pairwise(ats)]
        worst = max(worst, max(gaps, default=r.seconds) - interval)
    if len(r.victims) < 1:
        worst = r.seconds
    return max(worst, 0.0)


def budget_named(status: dict[str, Any], word: str = "budget") -> str | None:
    """The condition (type=reason) naming a budget (or `word`: a class whose policy is refused
    names the refusal), on an Inconclusive or Error canary (or one deferred by a budget, or
    never evaluated); None when there is none."""
    verdict = (status.get("lastDecision") or {}).get("verdict", "")
    for c in status.get("conditions") or []:
        named = c.get("status") == "False" and word.lower() in str(c.get("reason", "")).lower()
        deferred = c.get("type") in ("WithinApiBudget", "WithinQueryBudget")
        judged = verdict in ("Inconclusive", "Error", "") or deferred
        if named and judged:
            return f"{c.get('type')}={c.get('reason')}"
    return None


def victim_errors(r: RunResult) -> str:
    """The distinct reasons the victims' Error evaluations gave (what failed), most seen first."""
    seen: dict[str, int] = {}
    for evs in r.victims.values():
        for e in evs:
            if e.verdict == "Error":
                seen[e.why or "no condition False"] = seen.get(e.why or "no condition False", 0) + 1
    return " | ".join(f"{n}x {why}" for why, n in sorted(seen.items(), key=lambda kv: -kv[1])[:3])


def attacker_text(
    status_by_name: dict[str, dict[str, Any]], word: str = "budget", *, exceeds: bool = True
) -> str:
    """What the attacker's canaries show: verdicts, and the budget named (or not); for a class
    that exceeds no budget, the reasons of its False conditions (its own data's, typed)."""
    verdicts: dict[str, int] = {}
    named: dict[str, int] = {}
    for st in status_by_name.values():
        v = (st.get("lastDecision") or {}).get("verdict") or "never evaluated"
        verdicts[v] = verdicts.get(v, 0) + 1
        if exceeds:
            n = budget_named(st, word) or f"no {word} named"
        else:
            bad = [c for c in st.get("conditions") or [] if c.get("status") == "False"]
            n = ", ".join(f"{c.get('type')}={c.get('reason')}" for c in bad) or "no condition False"
        named[n] = named.get(n, 0) + 1
    return (
        ", ".join(f"{k} x{c}" for k, c in sorted(verdicts.items()))
        + "; "
        + ", ".join(f"{k} x{c}" for k, c in sorted(named.items()))
    )


def _flips(r: RunResult) -> str:
    out = []
    for name in sorted(r.victims):
        flips, verdicts = decisions(r, name)
        out.append(
            f"{name}: {' '.join(f'{a}({v})' for a, v in flips) or 'no flip'} "
            f"[{'/'.join(sorted(verdicts))}]"
        )
    return "; ".join(out)


def _load(r: RunResult) -> str:
    """The machine's load average at the run's start and end ("3.1-9.8")."""
    return f"{r.load[0]:.1f}-{r.load[1]:.1f}"


def report(verdicts: list[Verdict], bases: dict[bool, RunResult], interval: float) -> None:
    print(f"\nvictims' interval {interval:g} s; memory limit {MEMORY_LIMIT_MIB:.0f} MiB")
    for prom, base in sorted(bases.items()):
        path = "Prometheus" if prom else "pod scrape"
        print(f"without an attacker ({path}): delay {worst_delay(base, interval):.1f} s, "
              f"peak RSS {base.peak_rss_mib:.0f} MiB, {base.api_per_second:.0f} API req/s, "
              f"/healthz {'live' if base.healthz_failed == 0 else 'FAILED'}, "
              f"load {_load(base)}; "
              f"{_flips(base)}{' ERROR ' + base.error if base.error else ''}")  # fmt: skip
    head = (
        f"\n{'attack':<21} {'decisions':<9} {'delay s':>7} {'RSS MiB':>7} {'API/s':>6} "
        f"{'healthz':<7} {'load':<9}  attacker"
    )
    print(head)
    for v in verdicts:
        g = v.got
        live = "live" if g.healthz_failed == 0 and g.healthz_ok else f"{g.healthz_failed} fail"
        print(
            f"{v.attack.name:<21} {'same' if v.same_decisions else 'DIFFER':<9} "
            f"{v.delay:>7.1f} {g.peak_rss_mib:>7.0f} {g.api_per_second:>6.0f} {live:<7} "
            f"{_load(g):<9}  "
            f"{attacker_text(g.attacker, v.attack.named, exceeds=v.attack.exceeds)}"
        )
        if not v.same_decisions:
            print(f"{'':<21} victims: {_flips(g)}")
        if victim_errors(g):
            print(f"{'':<21} victims' errors: {victim_errors(g)}")
        if g.error:
            print(f"{'':<21} run error: {g.error}")
    print()
    for v in verdicts:
        why = [
            name
            for name, ok in (
                ("decisions differ", v.same_decisions),
                (f"delay {v.delay:.1f} s > one interval more", v.delay_ok),
                ("memory or /healthz", v.healthy),
                (
                    "attacker not typed with its budget (or a victim Error)"
                    if v.attack.exceeds
                    else "attacker not judged on its own data (or a victim Error)",
                    v.attacker_ok,
                ),
                ("run error", not v.got.error),
            )
            if not ok
        ]
        contained = "" if v.attack.exceeds else " (exceeds no budget: judged on its own data)"
        line = f"PASS{contained}" if v.passed else "FAIL: " + "; ".join(why)
        print(f"{v.attack.name:<21} {line}")


def main(argv: list[str] | None = None) -> list[Verdict]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--victims", type=int, default=4, help="healthy canaries")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds a run")
    parser.add_argument("--attacks", default="", help="classes to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="2 victims, 45 s runs")
    parser.add_argument("--log-dir", default="", help="keep each run's controller log here")
    parser.add_argument(
        "--no-api-budget", action="store_true", help="run the controller without API budgets"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.victims, args.seconds = 2, 45.0
    if not (1 <= args.victims <= 32 and 10 <= args.seconds <= 600):
        parser.error("--victims 1..32, --seconds 10..600")
    names = [n.strip() for n in args.attacks.split(",") if n.strip()] or [a.name for a in ATTACKS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown attack classes {unknown}; known: {', '.join(BY_NAME)}")
    attacks = [BY_NAME[n] for n in names]
    if any(a.prometheus for a in attacks) and not promtest.available():
        print("no prometheus binary: the Prometheus classes are left out")
        attacks = [a for a in attacks if not a.prometheus]
    page, _ = _page(None)
    logs = Path(args.log_dir) if args.log_dir else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    print(f"machine: {_machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"commit {_commit()}; pid {os.getpid()}")  # fmt: skip
    classes = ", ".join(a.name for a in attacks)
    budgets = "no API budgets" if args.no_api_budget else "the shipped API budgets"
    print(f"{args.victims} victims, {args.seconds:g} s a run, {budgets}, classes: {classes}")
    started = time.monotonic()

    def one(attack: Attack | None, prom: bool) -> RunResult:
        label = attack.name if attack else f"no attacker ({'Prometheus' if prom else 'scrape'})"
        print(f"  run: {label} ...", flush=True)
        tenants = [victims(args.victims, INTERVAL, prometheus=prom)]
        if attack is not None:
            tenants.append(attack.build(INTERVAL))
        log = logs / f"{attack.name if attack else 'base'}-{prom}.log" if logs else None
        before = os.getloadavg()[0]
        got = run(tenants, attack, prometheus=prom, seconds=args.seconds, page=page, log=log,
                  controller_args=NO_BUDGET if args.no_api_budget else ())  # fmt: skip
        got.load = (before, os.getloadavg()[0])
        return got

    bases = {prom: one(None, prom) for prom in sorted({a.prometheus for a in attacks})}
    verdicts = [Verdict(a, bases[a.prometheus], one(a, a.prometheus), INTERVAL) for a in attacks]
    report(verdicts, bases, INTERVAL)
    print(f"\nwall time {time.monotonic() - started:.0f} s")
    return verdicts


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).parent,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    main()

"""`python -m alphagate_lab.bench [--quick] [MODULE ...]`: run every benchmark module, then a table.

Each module in this package with a ``main(argv)`` is a benchmark; it prints its own numbers
and ratios. ``--quick`` runs each module with the arguments in its ``QUICK_ARGS`` (smaller
inputs, fewer rounds; none when it has no such list) for a smoke run. A module that fails is
reported in the table; the others still run. Nothing here asserts anything about speed.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import time
import traceback
from collections.abc import Callable

import alphagate_lab.bench as package


def modules() -> list[str]:
    """Benchmark modules, by name: every module of the package except this one."""
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name != "__main__")


def run(name: str, *, quick: bool) -> tuple[str, float, str]:
    """Run one module's main; (status, wall seconds, detail)."""
    t0 = time.perf_counter()
    try:
        module = importlib.import_module(f"{package.__name__}.{name}")
        main: Callable[[list[str]], object] | None = getattr(module, "main", None)
        if main is None:
            return "skipped", 0.0, "no main(argv)"
        main(list(getattr(module, "QUICK_ARGS", ())) if quick else [])
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return "failed", time.perf_counter() - t0, f"exit {exc.code}"
    except Exception as exc:  # last resort: one crashing benchmark is reported, the rest run
        traceback.print_exc()
        return "failed", time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
    return "ok", time.perf_counter() - t0, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"modules to run (default all: {modules()})")
    parser.add_argument("--quick", action="store_true", help="smoke run with small inputs")
    args = parser.parse_args(argv)
    names = args.names or modules()
    unknown = sorted(set(names) - set(modules()))
    if unknown:
        parser.error(f"unknown benchmark modules {unknown}; known: {modules()}")
    results = []
    for name in names:
        print(f"=== alphagate_lab.bench.{name}", flush=True)
        results.append((name, *run(name, quick=args.quick)))
        print(flush=True)
    print(f"{'benchmark':<16} {'status':<8} {'wall s':>8}  detail")
    for name, status, secs, detail in results:
        print(f"{name:<16} {status:<8} {secs:>8.1f}  {detail}")
    return 1 if any(r[1] == "failed" for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())

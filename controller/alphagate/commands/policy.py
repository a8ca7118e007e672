"""`alphagate policy check|show`: validate SpeculativeCanary YAML files before they reach a cluster.

A file may hold several resources separated by `---`. Every problem is reported with the
file, the document's index (1-based), the field path as written in YAML, its line, and the
reason; exit status 1 if anything is wrong. Beyond the schema (`config.parse`), the check
refuses what only shows across resources: the same name twice in a namespace, or two
canaries that would flip the same Deployment.

It also warns (exit status unchanged) where vLLM's default latency buckets cannot resolve the
latency guard's margin, and where the timing cannot work (the controller's advice,
`core.timing`). The scrape interval is `--scrape-interval` for Prometheus sources (default
15 s, the shipped PodMonitor's) and the policy's own intervalSeconds for podScrape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import typer
import yaml
from pydantic import ValidationError

from alphagate import config, files, specconfig, vllm, yamlload, yamlpos
from alphagate.core import resolution, timing
from alphagate.errors import PolicyError

DEFAULT_SCRAPE_INTERVAL = 15.0
"""What `policy check` assumes Prometheus scrapes at: deploy/monitoring's PodMonitor interval."""

policy_app = typer.Typer(
    name="policy",
    help="Check and show SpeculativeCanary policy files.",
    no_args_is_help=True,
)


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str
    line: int | None = None

    def render(self) -> str:
        parts = [f"line {self.line}"] if self.line is not None else []
        if self.path:
            parts.append(self.path)
        return ": ".join([*parts, self.message])


@dataclass(slots=True)
class Document:
    file: str
    index: int  # 1-based; 0 for file-level problems (unreadable, malformed YAML)
    line: int | None = None
    resource: config.SpeculativeCanary | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}: document {self.index}" if self.index else self.file

    @property
    def ok(self) -> bool:
        return self.resource is not None and not self.problems


def _loc_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problems(exc: PolicyError, node: yaml.Node | None) -> list[Problem]:
    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        out = []
        for err in cause.errors(include_url=False):
            loc = tuple(err["loc"])
            msg = config.message(err)
            value = err.get("input")
            scalar = isinstance(value, int | float | str | bool)
            if err["type"] != "missing" and scalar and str(value) not in msg:
                msg += f" (got {value!r})"
            out.append(Problem(_loc_path(loc), msg, yamlpos.line_of(node, loc)))
        return out
    return [Problem(exc.path, exc.reason, yamlpos.line_of(node, ()))]


def load_file(path: Path) -> list[Document]:
    """Never raises for bad content: validated by the same `config.parse` the controller uses."""
    name = str(path)
    try:
        raw = files.read_regular(path, yamlload.MAX_BYTES)
        if len(raw) > yamlload.MAX_BYTES:
            raise yamlload.YamlLimitError(f"larger than {yamlload.MAX_BYTES} bytes")
        text = raw.decode("utf-8")
        loaded = yamlload.load_all(text)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [Document(name, 0, problems=[Problem("", f"cannot read: {reason}")])]
    except yamlload.YamlLimitError as exc:
        line = exc.line or None
        msg = f"refused YAML: {exc.problem}"
        return [Document(name, 0, line, problems=[Problem("", msg, line)])]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        cmark = getattr(exc, "context_mark", None)
        if context and cmark is not None and cmark is not mark:
            context += f" started on line {cmark.line + 1}"
        msg = f"malformed YAML: {problem}" + (f" ({context})" if context else "")
        return [Document(name, 0, line, problems=[Problem("", msg, line)])]
    docs: list[Document] = []
    for i, loaded_doc in enumerate(loaded, start=1):
        data, node = loaded_doc.data, loaded_doc.node
        if data is None:  # an empty document (e.g. a trailing ---) is not a resource
            continue
        doc = Document(name, i, line=node.start_mark.line + 1 if node is not None else None)
        try:
            doc.resource = config.parse(data, where=doc.where)
        except PolicyError as exc:
            doc.problems = _problems(exc, node)
        docs.append(doc)
    if not docs:
        docs.append(Document(name, 0, problems=[Problem("", "no resources in this file")]))
    return docs


def cross_check(docs: list[Document]) -> None:
    """Appended to the later document."""
    names: dict[tuple[str, str], Document] = {}
    flips: dict[tuple[str, str, str], Document] = {}
    for doc in docs:
        res = doc.resource
        if res is None:
            continue
        key = (res.metadata.namespace, res.metadata.name)
        if key in names:
            doc.problems.append(
                Problem(
                    "metadata.name",
                    f"{key[0]}/{key[1]} is already defined in {names[key].where}",
                )
            )
        else:
            names[key] = doc
        for ref in res.spec.canary_deployments():
            dkey = (res.metadata.namespace, ref.kind.value, ref.name)
            other = flips.get(dkey)
            if other is not None and other is not doc:
                doc.problems.append(
                    Problem(
                        "spec.target",
                        f"{dkey[1]} {dkey[0]}/{dkey[2]} is already flipped by {other.where}; "
                        "two canaries would fight over it",
                    )
                )
            else:
                flips.setdefault(dkey, doc)


def summary(res: config.SpeculativeCanary) -> str:
    s = res.spec
    method = s.speculative_config.get("method", "?")
    slices = ", ".join(
        s_.name + (f" (floor {s_.min_alpha:g})" if s_.min_alpha is not None else "")
        for s_ in s.slices
    )
    lat = s.latency
    guard = (
        f"P{lat.quantile * 100:g} {lat.metric} +{lat.max_regression_ratio:.0%}"
        if lat.enabled
        else "latency guard off"
    )
    flips = ", ".join(
        d.name if d.kind is config.WorkloadKind.DEPLOYMENT else f"{d.kind} {d.name}"
        for d in s.canary_deployments()
    )
    return (
        f"{res.metadata.namespace}/{res.metadata.name}: {s.mode} {s.aggregation}, "
        f"flips {flips}, K={s.k} {method}, slices {slices}, "
        f"gate {s.acceptance.disable_below:g}/{s.acceptance.enable_above:g}, {guard}, "
        f"source {s.source.kind}"
    )


def _doc_json(doc: Document) -> dict[str, Any]:
    return {
        "file": doc.file,
        "document": doc.index,
        "line": doc.line,
        "ok": doc.ok,
        "name": doc.resource.metadata.name if doc.resource else None,
        "namespace": doc.resource.metadata.namespace if doc.resource else None,
        "errors": [{"path": p.path, "line": p.line, "message": p.message} for p in doc.problems],
    }


def _load_all(files: list[Path]) -> list[Document]:
    docs: list[Document] = []
    for path in files:
        docs.extend(load_file(path))
    cross_check(docs)
    return docs


def _report_errors(docs: list[Document]) -> None:
    for doc in docs:
        for p in doc.problems:
            typer.echo(f"{doc.where}: {p.render()}", err=True)


def spec_config_check(docs: list[Document], vllm_version: str | None) -> dict[int, list[str]]:
    """The speculative-config table beyond the schema: errors that depend on the vLLM version
    become problems; warnings (vLLM starts, but ...) are returned per document to print."""
    warnings: dict[int, list[str]] = {}
    for i, doc in enumerate(docs):
        if doc.resource is None:
            continue
        found = specconfig.check(doc.resource.spec.speculative_config, vllm_version=vllm_version)
        for p in found:
            path = "spec.speculativeConfig" + (f".{p.field}" if p.field else "")
            if p.severity is specconfig.Severity.ERROR:
                doc.problems.append(Problem(path, f"vLLM {vllm_version}: {p.vllm_says}; {p.fix}"))
            else:
                warnings.setdefault(i, []).append(f"{path}: {p.vllm_says}; {p.fix}")
    return warnings


def timing_check(
    docs: list[Document], scrape_interval: float
) -> dict[int, list[timing.TimingWarning]]:
    """The timing advice per document (index into `docs`) for valid resources, with whether
    one canary pod's window holds two blocks of alpha."""
    out: dict[int, list[timing.TimingWarning]] = {}
    for i, doc in enumerate(docs):
        if doc.resource is not None:
            spec = doc.resource.spec
            found = timing.advise(spec, scrape_interval)
            found += timing.batches_advice(spec, scrape_interval)
            if found:
                out[i] = list(found)
    return out


# Where per-token and per-step latencies of served models live (seconds).
LATENCY_RANGE: Final = (0.01, 0.2)


def latency_check(docs: list[Document]) -> dict[int, tuple[str, dict[str, Any]]]:
    """Per valid document whose latency guard vLLM's default buckets cannot resolve: the
    warning and its typed form for --json. Relative guards: no default bucket between 10 and
    200 ms is as narrow as 1 + maxRegressionRatio; perStepAbsolute: the limit is no bound."""
    out: dict[int, tuple[str, dict[str, Any]]] = {}
    for i, doc in enumerate(docs):
        guard = doc.resource.spec.latency if doc.resource is not None else None
        if guard is None or not guard.enabled:
            continue
        if guard.metric is config.LatencyMetric.PER_STEP_ABSOLUTE:
            found = _absolute_advice(guard)
        else:
            found = _relative_advice(guard)
        if found is not None:
            out[i] = found
    return out


def _relative_advice(guard: config.LatencyGuard) -> tuple[str, dict[str, Any]] | None:
    low, high = LATENCY_RANGE
    s = resolution.survey(vllm.TPOT_BUCKETS, guard.max_regression_ratio, low, high)
    if s.resolvable:
        return None
    q, m = f"P{guard.quantile * 100:g}", guard.max_regression_ratio
    sure = [r.effective_margin for r in s.buckets]
    typical = next((r for r in s.buckets if r.bucket_lo <= 0.03 < r.bucket_hi), None)
    at = (
        f" ({typical.least_margin:+.0%} to {typical.effective_margin:+.0%} at a "
        f"{typical.bucket_lo * 1e3:g}-{typical.bucket_hi * 1e3:g} ms {q})"
        if typical is not None
        else ""
    )
    claim = (
        "with confirmOn meanAndQuantile the check can never pass there (Inconclusive, unresolvable)"
        if guard.confirm_on is config.ConfirmOn.MEAN_AND_QUANTILE
        else f"a Pass rests on the exact mean (confirmOn mean) and the {q} only fails"
    )
    text = (
        f"spec.latency: {q} within +{m:.0%} cannot be resolved by vLLM's default buckets (each "
        f"between {low * 1e3:g} and {high * 1e3:g} ms is {s.widths[0]:.2f}-{s.widths[1]:.1f}x "
        f"wide): {claim}; the smallest {q} regression it could show is {s.least_margin:+.0%}, "
        f"and it surely sees only {min(sure):+.0%} to {max(sure):+.0%}{at}. Give both pools "
        "finer buckets with --custom-histogram-buckets (`alphagate plan` writes a ~10% layout)"
    )
    typed = {
        "layout": "vllm-default",
        "quantile": guard.quantile,
        "margin": m,
        "resolvable": False,
        "least_margin": s.least_margin,
        "buckets": [
            {
                "lo": r.bucket_lo,
                "hi": r.bucket_hi,
                "fail_edge": r.fail_edge,
                "least_margin": r.least_margin,
                "effective_margin": r.effective_margin,
            }
            for r in s.buckets
        ],
    }
    return text, typed


def _absolute_advice(guard: config.LatencyGuard) -> tuple[str, dict[str, Any]] | None:
    limit = float(guard.max_step_seconds or 0.0)
    r = resolution.absolute(vllm.ITL_BUCKETS, limit)
    if r.pass_edge is not None and r.pass_edge >= limit * (1 - resolution.REL_TOL):
        return None
    shown = f"{r.pass_edge:g} s" if r.pass_edge is not None else "no bound"
    fails = f"above {r.fail_edge:g} s" if r.fail_edge is not None else "never"
    text = (
        f"spec.latency.maxStepSeconds: {limit:g} s is not a bound of vLLM's default per-step "
        f"buckets: a Pass is shown at {shown}, a Fail {fails}; pick a bound or set "
        "--custom-histogram-buckets"
    )
    typed = {
        "layout": "vllm-default",
        "limit": limit,
        "pass_edge": r.pass_edge,
        "fail_edge": r.fail_edge,
        "resolvable": False,
    }
    return text, typed


def _timing_json(w: timing.TimingWarning) -> dict[str, Any]:
    return {
        "problem": w.problem.value,
        "field": w.field,
        "seconds": w.seconds,
        "needed_seconds": w.needed_seconds,
        "scrape_interval_seconds": w.scrape_interval_seconds,
    }


@policy_app.command("check")
def check(
    files: list[Path] = typer.Argument(..., help="YAML files with SpeculativeCanary resources."),
    vllm_version: str | None = typer.Option(
        None, "--vllm-version", help="Also apply the rules of this vLLM version (e.g. 0.13.0)."
    ),
    scrape_interval: float = typer.Option(
        DEFAULT_SCRAPE_INTERVAL,
        "--scrape-interval",
        min=0.1,
        max=3600.0,
        help=(
            "Seconds between Prometheus scrapes of the vLLM pods (default 15, the shipped "
            "PodMonitor's); podScrape policies use their own intervalSeconds."
        ),
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines."),
) -> None:
    """Validate policy files: one line per resource, or every problem with file, field and line."""
    docs = _load_all(files)
    warnings = spec_config_check(docs, vllm_version)
    advice = timing_check(docs, scrape_interval)
    for i, found in advice.items():
        warnings.setdefault(i, []).extend(f"{w.field}: {w.message}" for w in found)
    buckets = latency_check(docs)
    for i, (text, _) in buckets.items():
        warnings.setdefault(i, []).append(text)
    bad = [d for d in docs if not d.ok]
    if as_json:
        out = [
            _doc_json(d)
            | {
                "warnings": warnings.get(i, []),
                "timing": [_timing_json(w) for w in advice.get(i, [])],
                "latency": buckets[i][1] if i in buckets else None,
            }
            for i, d in enumerate(docs)
        ]
        typer.echo(json.dumps(out, indent=2))
    else:
        for i, doc in enumerate(docs):
            if doc.ok and doc.resource is not None:
                typer.echo(f"ok  {doc.where}: {summary(doc.resource)}")
            for w in warnings.get(i, []):
                typer.echo(f"warn  {doc.where}: {w}", err=True)
        _report_errors(docs)
        n_ok = len(docs) - len(bad)
        line = f"{n_ok} valid, {len(bad)} invalid, in {len(files)} file(s)"
        typer.echo(line, err=bool(bad))
    if bad:
        raise typer.Exit(1)


@policy_app.command("show")
def show(
    file: Path = typer.Argument(..., help="A YAML file with SpeculativeCanary resources."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
) -> None:
    """Print the resources with every default filled in (what the controller will use)."""
    docs = _load_all([file])
    if any(not d.ok for d in docs):
        _report_errors(docs)
        raise typer.Exit(1)
    dumped = [config.dump(d.resource) for d in docs if d.resource is not None]
    if as_json:
        typer.echo(json.dumps(dumped if len(dumped) > 1 else dumped[0], indent=2))
    else:
        typer.echo(yaml.safe_dump_all(dumped, sort_keys=False, width=100).rstrip())


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")

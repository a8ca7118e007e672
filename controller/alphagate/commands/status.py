"""`alphagate status [NAME]`: what the controller wrote, as kubectl users read it.

The kubernetes client and the status readers are imported when the command runs (`status
--help` and the CLI's help do not load them)."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich import box
from rich.console import Console
from rich.table import Table

from alphagate.commands.kubeopts import (
    CONTEXT,
    KUBECONFIG,
    NAMESPACE,
    SERVER,
    connect,
    read_canary,
    resolve_namespace,
)
from alphagate.config import GROUP, PLURAL, VERSION
from alphagate.errors import ForbiddenError

if TYPE_CHECKING:
    from alphagate.kube.client import Kube
    from alphagate.kube.status.resource import CanaryStatus


class Output(StrEnum):
    """kubectl's -o: the resource as the API returns it (json, yaml), or more columns (wide)."""

    JSON = "json"
    YAML = "yaml"
    WIDE = "wide"


def _console() -> Console:
    # markup off: reasons carry brackets ("[0.38, 0.44]") that must print as written
    return Console(highlight=False, soft_wrap=False, markup=False)


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _interval(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f} ms"


def _ago(text: str | None) -> str:
    from alphagate.kube.status.fields import parse_time

    ts = parse_time(text)
    if ts is None:
        return "-"
    secs = max(0.0, time.time() - ts)
    if secs < 120:
        return f"{secs:.0f}s ago"
    if secs < 7200:
        return f"{secs / 60:.0f}m ago"
    return f"{secs / 3600:.1f}h ago"


def status(
    name: str | None = typer.Argument(None, help="SpeculativeCanary name (omit to list)."),
    namespace: str | None = NAMESPACE,
    all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A", help="List everywhere."),
    output: Output | None = typer.Option(
        None,
        "--output",
        "-o",
        help="json|yaml: the resource (or a List) as the API returns it; wide: more columns.",
    ),
    watch: bool = typer.Option(
        False, "--watch", "-w", help="Keep watching; print again whenever something changes."
    ),
    interval: float = typer.Option(
        2.0, "--interval", min=0.05, help="Seconds between polls with --watch."
    ),
    watch_limit: int = typer.Option(
        0, "--watch-limit", hidden=True, min=0, help="Stop --watch after this many polls (tests)."
    ),
    as_json: bool = typer.Option(False, "--json", hidden=True, help="The status only, as JSON."),
    events: int = typer.Option(10, "--events", help="How many recent Events to show."),
    server: str | None = SERVER,
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
) -> None:
    """Show what the controller decided and the evidence behind it."""
    scope = None if all_namespaces else resolve_namespace(namespace, server, kubeconfig, context)
    kube = connect(server, kubeconfig, context)
    try:
        seen: tuple[Any, ...] | None = None
        polls = 0
        while True:
            if name is None:
                items = _fetch_list(kube, scope)
                key: tuple[Any, ...] = tuple(_version(i) for i in items)
                if key != seen:
                    if seen is not None and output not in (Output.JSON, Output.YAML):
                        typer.echo("")
                    _list(items, output, as_json)
            else:
                obj = read_canary(kube, scope or "default", name)
                key = (_version(obj),)
                if key != seen:
                    if seen is not None and output not in (Output.JSON, Output.YAML):
                        typer.echo("")
                    _detail(kube, obj, output, as_json, events)
            seen = key
            polls += 1
            if not watch or (watch_limit and polls >= watch_limit):
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
    finally:
        kube.close()


def _version(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str(meta.get("resourceVersion", "")) + json.dumps(obj.get("status"), sort_keys=True),
    )


def _dump(obj: Any, output: Output) -> None:
    if output is Output.JSON:
        typer.echo(json.dumps(obj, indent=2))
    else:
        typer.echo(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False), nl=False)


def _fetch_list(kube: Kube, namespace: str | None) -> list[dict[str, Any]]:
    from alphagate.kube.client import call

    if namespace is None:
        result = call(
            f"list {PLURAL}.{GROUP}",
            lambda: kube.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL),
        )
    else:
        result = call(
            f"list {PLURAL}.{GROUP} in {namespace}",
            lambda: kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL),
        )
    items = result.get("items", []) if isinstance(result, dict) else []
    return [i for i in items if isinstance(i, dict)]


def _list(items: list[dict[str, Any]], output: Output | None, as_json: bool) -> None:
    from alphagate.kube.status.resource import parse_status

    if output in (Output.JSON, Output.YAML):
        assert output is not None
        _dump({"apiVersion": "v1", "kind": "List", "items": items}, output)
        return
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "namespace": i["metadata"].get("namespace"),
                        "name": i["metadata"]["name"],
                        "status": i.get("status", {}),
                    }
                    for i in items
                ],
                indent=2,
            )
        )
        return
    wide = output is Output.WIDE
    table = Table(box=box.SIMPLE_HEAD)
    columns = [
        "NAMESPACE",
        "NAME",
        "MODE",
        "STATE",
        "SPEC",
        "ALPHA",
        "INTERVAL",
        "P99 RATIO",
        "LAST DECISION",
        "EVALUATED",
    ]
    if wide:
        columns += ["TARGET", "AGGREGATION", "SLICES", "READY", "GENERATION"]
    for col in columns:
        table.add_column(col)
    for item in items:
        st = parse_status(item)
        spec = item.get("spec") or {}
        row = [
            item["metadata"].get("namespace", ""),
            item["metadata"]["name"],
            str(spec.get("mode", "")),
            st.state or "-",
            _onoff(st.speculation_on),
            _num(st.combined_alpha),
            _interval(st.combined_lower, st.combined_upper),
            _num(st.p99_ratio, 2),
            st.last_decision.summary if st.last_decision else "-",
            _ago(st.last_evaluated),
        ]
        if wide:
            ready = st.condition("Ready")
            generation = item["metadata"].get("generation", "-")
            observed = "-" if st.observed_generation is None else st.observed_generation
            row += [
                str((spec.get("target") or {}).get("name", "-")),
                str(spec.get("aggregation", "combined")),
                str(len(spec.get("slices") or [])),
                ready.status if ready else "-",
                f"{observed}/{generation}",
            ]
        table.add_row(*row)
    if not items:
        typer.echo("no SpeculativeCanary resources found")
        return
    _console().print(table)


def _onoff(on: bool | None) -> str:
    return "-" if on is None else ("on" if on else "off")


def _table(title: str, columns: tuple[str, ...]) -> Table:
    """Long cells fold instead of being cut."""
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _detail(
    kube: Kube, obj: dict[str, Any], output: Output | None, as_json: bool, n_events: int
) -> None:
    from alphagate.kube.events import list_events
    from alphagate.kube.status.resource import parse_status

    st = parse_status(obj)
    if output in (Output.JSON, Output.YAML):
        assert output is not None
        _dump(obj, output)
        return
    if as_json:
        typer.echo(json.dumps(obj.get("status", {}), indent=2))
        return
    con = _console()
    meta = obj.get("metadata", {})
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    spec = obj.get("spec", {})
    target = (spec.get("target") or {}).get("name", "?")
    mode = spec.get("mode", "enforce")
    con.print(f"{namespace}/{name}  target Deployment {target}  mode {mode}")
    interval = _interval(st.combined_lower, st.combined_upper)
    con.print(
        f"state {st.state or 'unknown'}  speculation {_onoff(st.speculation_on)}  "
        f"combined alpha {_num(st.combined_alpha)} {interval}  "
        f"P99 ratio {_num(st.p99_ratio, 2)}  generation {meta.get('generation', '?')} "
        f"(observed {st.observed_generation if st.observed_generation is not None else '-'})  "
        f"evaluated {_ago(st.last_evaluated)}"
    )
    if st.last_decision is not None:
        d = st.last_decision
        applied = "applied" if d.applied else ("dry-run" if d.dry_run else "not applied")
        con.print(f"last decision: {d.action} ({d.verdict}, {applied}, {_ago(d.at)}): {d.reason}")
    _units_table(con, st)
    _slices_table(con, st)
    _latency_table(con, st)
    _conditions_table(con, st)
    _history_table(con, st)
    if n_events > 0:
        try:
            evs = list_events(kube.api_client, namespace, name)
        except ForbiddenError:
            con.print("events: not allowed to list Events")
            evs = []
        if evs:
            table = _table("Events", ("TIME", "TYPE", "REASON", "COUNT", "MESSAGE"))
            for e in evs[-n_events:]:
                table.add_row(
                    str(e["time"])[:19], e["type"], e["reason"], str(e["count"]), e["message"]
                )
            con.print(table)


def _units_table(con: Console, st: CanaryStatus) -> None:
    """perSlice aggregation: each slice's own Deployment, state and decision."""
    if not st.units:
        return
    table = _table("Canaries by slice", ("SLICE", "DEPLOYMENTS", "STATE", "SPEC", "LAST DECISION"))
    for u in st.units:
        table.add_row(
            u.name,
            ", ".join(u.deployments),
            u.state,
            _onoff(u.speculation_on),
            u.last_decision.summary if u.last_decision else "-",
        )
    con.print(table)


def _slices_table(con: Console, st: CanaryStatus) -> None:
    if not st.slices:
        return
    table = _table(
        "Acceptance by slice",
        (
            "SLICE",
            "WEIGHT",
            "ALPHA",
            "INTERVAL",
            "DRAFTS",
            "ACC.LEN",
            "METHOD",
            "VERDICT",
            "REASON",
        ),
    )
    for s in st.slices:
        table.add_row(
            s.name,
            _num(s.weight, 2),
            _num(s.alpha),
            _interval(s.lower, s.upper),
            "-" if s.drafts is None else f"{s.drafts:.0f}",
            _num(s.mean_acceptance_length, 2),
            s.method or "-",
            s.verdict or "-",
            s.reason,
        )
    con.print(table)


def _latency_table(con: Console, st: CanaryStatus) -> None:
    if not st.latency:
        return
    table = _table(
        "Latency guard",
        (
            "CHECK",
            "VERDICT",
            "CANARY P99",
            "BASELINE P99",
            "RATIO",
            "CANARY BUCKET",
            "ABOVE EDGE",
            "P",
            "REASON",
        ),
    )
    for e in st.latency:
        bucket = (
            "-"
            if e.canary_bucket_lower_seconds is None or e.canary_bucket_upper_seconds is None
            else f"({_ms(e.canary_bucket_lower_seconds)}, {_ms(e.canary_bucket_upper_seconds)}]"
        )
        above = "-" if e.exceedance is None else f"{e.exceedance:.2%}"
        table.add_row(
            e.check,
            e.verdict,
            _ms(e.canary_p99_seconds),
            _ms(e.baseline_p99_seconds),
            _num(e.ratio, 2),
            bucket,
            above,
            "-" if e.p_value is None else f"{e.p_value:.2g}",
            e.reason,
        )
    con.print(table)


def _conditions_table(con: Console, st: CanaryStatus) -> None:
    if not st.conditions:
        return
    table = _table("Conditions", ("TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"))
    for c in st.conditions:
        table.add_row(c.type, c.status, c.reason, _ago(c.last_transition_time), c.message)
    con.print(table)


def _history_table(con: Console, st: CanaryStatus) -> None:
    if not st.history:
        return
    table = _table("History", ("AT", "FROM", "TO", "REASON"))
    for h in st.history[-10:]:
        table.add_row(h.at, h.from_state, h.to_state, h.reason)
    con.print(table)


def register(app: typer.Typer) -> None:
    app.command("status")(status)

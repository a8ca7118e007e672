"""Builds dashboards/alphagate.json, the Grafana dashboard for alphagate, with
grafana-foundation-sdk (Grafana's own typed builders).

Pin the SDK: its versions are ``EPOCH!GRAFANA_VERSION`` and a bare ``pip install`` picks the
Grafana 10.1 variant. This file targets Grafana 11.6:
``pip install 'grafana-foundation-sdk==1769699379!11.6.0'``.

The JSON is committed (Grafana's sidecar loads it from the ConfigMap dashboards/kustomization.yaml
makes); tests/ship fail when it differs from what this script builds, when a query is not valid
PromQL, or when it names a metric that neither the controller (alphagate.shell.metric_names) nor
vLLM (alphagate.vllm, the recording rules) exports.

This module assembles the dashboard (identity, variables, annotation, the rows in order) and
writes it; the panel builders are in ``dashboard_panels``, the rows in ``dashboard_decision``,
``dashboard_measures`` and ``dashboard_controller``. Rerun after an edit of any of them, from
the repository's root (it writes the checkout's dashboards/alphagate.json, or the path given):

    python -m alphagate_lab.dashboard [PATH]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from alphagate_lab.dashboard_controller import add_controller_row
from alphagate_lab.dashboard_decision import add_decision_row
from alphagate_lab.dashboard_measures import add_acceptance_rows, add_latency_row
from alphagate_lab.dashboard_panels import DS, C

UID = "alphagate-overview"
OUT = Path(__file__).resolve().parents[2] / "dashboards" / "alphagate.json"  # in a checkout

STATES = ("Off", "Probing", "On", "RolledBack", "Paused", "Promoted")
STATE_COLORS = {
    "Off": "text",
    "Probing": "yellow",
    "On": "green",
    "RolledBack": "red",
    "Paused": "blue",
    "Promoted": "purple",
}


def build() -> db.Dashboard:
    """The dashboard's identity, variables and annotation, then its rows top to bottom."""
    dash = (
        db.Dashboard("alphagate: speculative decoding canary")
        .uid(UID)
        .description(
            "Is speculative decoding paying for itself on the traffic served right now? alpha "
            "per slice with its confidence interval against the gate, latency canary vs "
            "baseline, and what the alphagate controller decided."
        )
        .tags(["alphagate", "vllm", "speculative-decoding"])
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("browser")
        .with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            db.QueryVariable("namespace")
            .label("Namespace")
            .datasource(DS)
            .query("label_values(alphagate_state, namespace)")
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
        )
        .with_variable(
            db.QueryVariable("canary")
            .label("SpeculativeCanary")
            .datasource(DS)
            .query('label_values(alphagate_state{namespace="$namespace"}, canary)')
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
        )
        .with_variable(
            db.QueryVariable("slice")
            .label("Slice")
            .datasource(DS)
            .query(f"label_values(alphagate_slice_weight_ratio{{{C}}}, slice)")
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
        .annotation(
            db.AnnotationQuery()
            .name("Transitions")
            .datasource(DS)
            .enable(True)
            .icon_color("orange")
            .expr(
                f"sum by (from_state, to_state) "
                f"(increase(alphagate_transitions_total{{{C}}}[2m])) > 0"
            )
        )
    )
    dash = add_decision_row(dash)
    dash = add_acceptance_rows(dash)
    dash = add_latency_row(dash)
    return add_controller_row(dash)


def render() -> str:
    data: dict[str, Any] = json.loads(json.dumps(build().build(), cls=JSONEncoder))
    _finish(data)
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def _finish(data: dict[str, Any]) -> None:
    """What the SDK's schema does not model: Prometheus annotation formatting and the
    state-timeline colors per state; plus unique panel ids."""
    for ann in data.get("annotations", {}).get("list", []):
        if ann.get("name") == "Transitions":
            ann["titleFormat"] = "{{from_state}} -> {{to_state}}"
            ann["step"] = "1m"
            ann["useValueForTime"] = False
    next_id = 1
    for panel in _panels(data):
        panel["id"] = next_id
        next_id += 1
        if panel.get("title") == "State over time":
            overrides = panel.setdefault("fieldConfig", {}).setdefault("overrides", [])
            for state in STATES:
                overrides.append(
                    {
                        "matcher": {"id": "byName", "options": state},
                        "properties": [
                            {
                                "id": "mappings",
                                "value": [
                                    {
                                        "type": "value",
                                        "options": {
                                            "0": {"text": " ", "color": "transparent", "index": 0},
                                            "1": {
                                                "text": state,
                                                "color": STATE_COLORS[state],
                                                "index": 1,
                                            },
                                        },
                                    }
                                ],
                            }
                        ],
                    }
                )


def _panels(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in data.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else OUT
    out.write_text(render())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

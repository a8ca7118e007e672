"""The dashboard's panel builders: a query, a time series, a stat, alpha with its band, the
label matchers every query carries. The rows (``dashboard_decision``, ``dashboard_measures``,
``dashboard_controller``) lay them out; ``dashboard`` assembles and writes the JSON."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label matchers every query carries (Grafana substitutes the variables).
C = 'namespace="$namespace", canary="$canary"'
S = f'{C}, slice=~"$slice"'
V = 'namespace="$namespace", slice=~"$slice"'  # vLLM series (slice/role pod labels)


def q(expr: str, legend: str = "", ref: str = "A") -> prom.Dataquery:
    query = prom.Dataquery().expr(expr).ref_id(ref).range()
    if legend:
        query = query.legend_format(legend)
    return query


def ts(title: str, description: str, unit: str, *queries: prom.Dataquery) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .height(8)
        .span(12)
        .line_width(2)
        .fill_opacity(0)
        .legend(cb.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST))
        .tooltip(cb.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI))
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def fixed(color: str) -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})


def dashed() -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(
        id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}
    )


def alpha_band(
    title: str, description: str, value: str, lower: str, upper: str, gate_matchers: str
) -> timeseries.Panel:
    """alpha with its confidence band (upper filled down to lower) and the two gate lines."""
    return (
        ts(
            title,
            description,
            "percentunit",
            q(value, "alpha", "A"),
            q(lower, "lower", "B"),
            q(upper, "upper", "C"),
            q(
                f'max(alphagate_alpha_gate_ratio{{{gate_matchers}, bound="disable"}})',
                "disable below",
                "D",
            ),
            q(
                f'max(alphagate_alpha_gate_ratio{{{gate_matchers}, bound="enable"}})',
                "enable above",
                "E",
            ),
        )
        .min(0)
        .max(1)
        .override_by_name(
            "upper",
            [
                dm.DynamicConfigValue(id_val="custom.fillBelowTo", value="lower"),
                dm.DynamicConfigValue(id_val="custom.fillOpacity", value=20),
                dm.DynamicConfigValue(id_val="custom.lineWidth", value=0),
                fixed("blue"),
            ],
        )
        .override_by_name(
            "lower",
            [
                dm.DynamicConfigValue(id_val="custom.lineWidth", value=0),
                fixed("blue"),
            ],
        )
        .override_by_name("alpha", [fixed("blue")])
        .override_by_name("disable below", [fixed("red"), dashed()])
        .override_by_name("enable above", [fixed("green"), dashed()])
    )


def traffic_light(*steps: tuple[float, str]) -> db.ThresholdsConfig:
    """Absolute thresholds: green below the first step, then each (value, color) from there."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps(
            [dm.Threshold(value=None, color="green")]
            + [dm.Threshold(value=v, color=c) for v, c in steps]
        )
    )


def stat_panel(title: str, description: str, unit: str, query: prom.Dataquery) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .height(4)
        .span(3)  # eight across the top row
        .with_target(query)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )

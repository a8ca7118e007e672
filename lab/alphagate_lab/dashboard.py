"""Builds dashboards/alphagate.json, the Grafana dashboard for alphagate, with
grafana-foundation-sdk (Grafana's own typed builders).

Pin the SDK: its versions are ``EPOCH!GRAFANA_VERSION`` and a bare ``pip install`` picks the
Grafana 10.1 variant. This file targets Grafana 11.6:
``pip install 'grafana-foundation-sdk==1769699379!11.6.0'``.

The JSON is committed (Grafana's sidecar loads it from the ConfigMap dashboards/kustomization.yaml
makes); tests/ship fail when it differs from what this script builds, when a query is not valid
PromQL, or when it names a metric that neither the controller (alphagate.shell.metric_names) nor
vLLM (alphagate.vllm, the recording rules) exports. Rerun after an edit, from the repository's
root (it writes the checkout's dashboards/alphagate.json, or the path given):

    python -m alphagate_lab.dashboard [PATH]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import stat, statetimeline, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm

UID = "alphagate-overview"
OUT = Path(__file__).resolve().parents[2] / "dashboards" / "alphagate.json"  # in a checkout
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label matchers every query carries (Grafana substitutes the variables).
C = 'namespace="$namespace", canary="$canary"'
S = f'{C}, slice=~"$slice"'
V = 'namespace="$namespace", slice=~"$slice"'  # vLLM series (slice/role pod labels)

STATES = ("Off", "Probing", "On", "RolledBack", "Paused", "Promoted")
STATE_COLORS = {
    "Off": "text",
    "Probing": "yellow",
    "On": "green",
    "RolledBack": "red",
    "Paused": "blue",
    "Promoted": "purple",
}
VERDICT_CODES = {"Pass": 0, "Inconclusive": 1, "Error": 2, "Fail": 3}
VERDICT_COLORS = {"Pass": "green", "Inconclusive": "text", "Error": "orange", "Fail": "red"}


def q(expr: str, legend: str = "", ref: str = "A") -> prom.Dataquery:
    query = prom.Dataquery().expr(expr).ref_id(ref).range()
    if legend:
        query = query.legend_format(legend)
    return query


def _value_map(codes: dict[str, int], colors: dict[str, str]) -> dm.ValueMap:
    return dm.ValueMap(
        options={
            str(code): dm.ValueMappingResult(text=name, color=colors[name], index=i)
            for i, (name, code) in enumerate(codes.items())
        }
    )


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


def build() -> db.Dashboard:
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

    # ------------------------------------------------------------ decision
    dash = dash.with_row(db.Row("Decision"))
    dash = dash.with_panel(
        statetimeline.Panel()
        .title("State over time")
        .description(
            "The canary's state (Off, Probing, On, RolledBack, Paused, Promoted) and whether "
            "its pods run with --speculative-config. Transitions are annotated."
        )
        .datasource(DS)
        .height(6)
        .span(24)
        .with_target(q(f"max by (state) (alphagate_state{{{C}}})", "{{state}}", "A"))
        .with_target(q(f"max(alphagate_speculation_enabled{{{C}}})", "speculation on", "B"))
        .mappings(
            [
                dm.ValueMap(
                    options={
                        "0": dm.ValueMappingResult(text="no", color="transparent", index=0),
                        "1": dm.ValueMappingResult(text="yes", color="green", index=1),
                    }
                )
            ]
        )
        .show_value(common.VisibilityMode.NEVER)
        .merge_values(True)
    )
    dash = dash.with_panel(
        stat_panel(
            "Combined alpha",
            "Traffic-weighted alpha over the slices, last evaluation.",
            "percentunit",
            q(f"max(alphagate_combined_alpha_ratio{{{C}}})", "alpha"),
        )
    )
    dash = dash.with_panel(
        stat_panel(
            "Predicted speed-up",
            "(1 + K*alpha) / (1 + overhead) at the combined alpha: above 1 speculation pays.",
            "x",
            q(f"max(alphagate_predicted_speedup_ratio{{{C}}})", "speed-up"),
        )
    )
    dash = dash.with_panel(
        stat_panel(
            "Source error streak",
            "Consecutive evaluations whose metrics read failed. 3 or more raises an alert.",
            "none",
            q(f"max(alphagate_error_streak{{{C}}})", "errors in a row"),
        ).thresholds(traffic_light((1, "orange"), (3, "red")))
    )
    dash = dash.with_panel(
        stat_panel(
            "Speculation",
            "Does the canary run with --speculative-config right now?",
            "none",
            q(f"max(alphagate_speculation_enabled{{{C}}})", "speculation"),
        ).mappings(
            [
                dm.ValueMap(
                    options={
                        "0": dm.ValueMappingResult(text="off", color="text", index=0),
                        "1": dm.ValueMappingResult(text="on", color="green", index=1),
                    }
                )
            ]
        )
    )
    dash = dash.with_panel(
        stat_panel(
            "Last successful evaluation",
            "Seconds since the last evaluation whose metrics read succeeded.",
            "s",
            q(f"time() - max(alphagate_last_success_timestamp_seconds{{{C}}})", "age"),
        )
    )
    dash = dash.with_panel(
        stat_panel(
            "Longest verdict age",
            "Probing or On: the longest the canary went without a conclusive verdict (Pass or "
            "Fail) in the range, every window Inconclusive or Error; speculation runs unchecked "
            "meanwhile. At staleness.afterSeconds (default 30 min) AlphagateVerdictStale fires.",
            "s",
            q(
                f"max(max_over_time(alphagate_verdict_age_seconds{{{C}}}[$__range]))",
                "verdict age",
            ),
        ).thresholds(traffic_light((900, "orange"), (1800, "red")))
    )
    dash = dash.with_panel(
        stat_panel(
            "Timing problems",
            "Problems of the policy's timing against the scrape interval right now (core/timing:"
            " a window or interval spanning fewer than two scrapes leaves increase() empty at "
            "times). 0: it fits. See the TimingFits condition; AlphagateTimingTooShort fires.",
            "none",
            q(
                'count(alphagate_timing_problem{namespace="$namespace", '
                'canary=~"$canary|$canary/.*"}) or on() vector(0)',
                "problems",
            ),
        ).thresholds(traffic_light((1, "red")))
    )
    dash = dash.with_panel(
        stat_panel(
            "Leader",
            "Controller replicas holding the leader lease (want exactly 1).",
            "none",
            q('sum by (namespace, job) (alphagate_leader{job="alphagate-metrics"})', "leaders"),
        )
    )
    dash = dash.with_panel(
        ts(
            "Shards per replica",
            "With run --shards: the shards each controller replica holds and the decision units "
            "it evaluates in them. Every shard is held once (the held total equals the shards); "
            "after a replica dies its shards move within the lease duration.",
            "none",
            q('sum by (pod) (alphagate_shard_held{job="alphagate-metrics"})', "{{pod}} shards"),
            q(
                'sum by (pod) (alphagate_shard_units{job="alphagate-metrics"})',
                "{{pod}} units",
                "B",
            ),
            q('max(alphagate_shards{job="alphagate-metrics"})', "shards configured", "C"),
        ).span(24)
    )
    dash = dash.with_panel(
        statetimeline.Panel()
        .title("Check verdicts")
        .description(
            "Each check's verdict per evaluation: only Fail flips; Inconclusive "
            "(too little data) and Error (source failed) hold the state."
        )
        .datasource(DS)
        .height(6)
        .span(24)
        .with_target(
            q(
                " + ".join(
                    f'{code} * max by (check) (alphagate_check_verdict{{{C}, verdict="{name}"}})'
                    for name, code in VERDICT_CODES.items()
                ),
                "{{check}}",
            )
        )
        .mappings([_value_map(VERDICT_CODES, VERDICT_COLORS)])
        .show_value(common.VisibilityMode.AUTO)
        .merge_values(True)
    )
    dash = dash.with_panel(
        ts(
            "Decisions",
            "Evaluations per action and machine reason (5m).",
            "none",
            q(
                f"sum by (action, reason) (increase(alphagate_decisions_total{{{C}}}[5m]))",
                "{{action}} ({{reason}})",
            ),
        ).span(24)
    )

    # ------------------------------------------------------------ acceptance (controller)
    dash = dash.with_row(db.Row("Acceptance: what the controller judged"))
    dash = dash.with_panel(
        alpha_band(
            "alpha on $slice with its confidence interval",
            "alpha = accepted / proposed draft tokens over the window, with the interval the "
            "gate uses: disable when the upper bound is below 'disable below', enable when the "
            "lower bound is above 'enable above'.",
            f'max(alphagate_alpha_ratio{{{C}, slice=~"$slice"}})',
            f'max(alphagate_alpha_lower_ratio{{{C}, slice=~"$slice"}})',
            f'max(alphagate_alpha_upper_ratio{{{C}, slice=~"$slice"}})',
            C,
        )
        .repeat("slice")
        .repeat_direction("h")
        .max_per_row(3)
    )
    dash = dash.with_panel(
        alpha_band(
            "Combined alpha with its confidence interval",
            "Traffic-weighted alpha over every slice, with the same gate lines.",
            f"max(alphagate_combined_alpha_ratio{{{C}}})",
            f"max(alphagate_combined_alpha_lower_ratio{{{C}}})",
            f"max(alphagate_combined_alpha_upper_ratio{{{C}}})",
            C,
        )
    )
    dash = dash.with_panel(
        ts(
            "Predicted speed-up",
            "Throughput speed-up the speed-up model predicts at the combined "
            "alpha; 1 is break-even.",
            "x",
            q(f"max(alphagate_predicted_speedup_ratio{{{C}}})", "predicted speed-up"),
        )
    )
    dash = dash.with_panel(
        ts(
            "Samples per window",
            "Drafts (alpha's sample unit) in each evaluation window.",
            "short",
            q(f"max by (slice) (alphagate_window_drafts{{{S}}})", "{{slice}}"),
        )
    )
    dash = dash.with_panel(
        ts(
            "Traffic share per slice",
            "Measured generated tokens per slice: the weights of the combined alpha.",
            "percentunit",
            q(f"max by (slice) (alphagate_slice_weight_ratio{{{S}}})", "{{slice}}"),
        )
        .stacking(cb.StackingConfig().mode(common.StackingMode.NORMAL))
        .fill_opacity(30)
    )

    # ------------------------------------------------------------ acceptance (vLLM counters)
    dash = dash.with_row(db.Row("Acceptance: vLLM's counters"))
    dash = dash.with_panel(
        ts(
            "alpha from vLLM counters",
            "rate(accepted) / rate(draft tokens) over 5m per slice "
            "and role, straight from vLLM (recording rule).",
            "percentunit",
            q(
                f"namespace_model_slice_role:vllm_spec_decode_alpha:ratio_rate5m{{{V}}}",
                "{{slice}} {{role}}",
            ),
        )
        .min(0)
        .max(1)
    )
    dash = dash.with_panel(
        ts(
            "Mean acceptance length",
            "1 + accepted / drafts: tokens a request gets per target "
            "pass (vLLM's convention, bonus token included).",
            "short",
            q(
                f"namespace_model_slice_role:vllm_spec_decode_mean_acceptance_length:ratio_rate5m{{{V}}}",
                "{{slice}} {{role}}",
            ),
        )
    )
    dash = dash.with_panel(
        ts(
            "Acceptance per draft position",
            "Share of drafts whose position i was accepted "
            "(falls with i; a long draft only pays if the last positions stay high).",
            "percentunit",
            q(
                "namespace_model_slice_role_position:vllm_spec_decode_acceptance_per_position"
                f":ratio_rate5m{{{V}}}",
                "{{slice}} {{role}} pos {{position}}",
            ),
        )
        .min(0)
        .max(1)
    )
    dash = dash.with_panel(
        ts(
            "Draft length: configured and recommended K",
            "num_speculative_tokens the canary runs, and the K its per-position acceptance "
            "supports (core.draft_length: a tail position is dropped only when even its upper "
            "bound is below its break-even). Per-position rates as the controller judged them.",
            "short",
            q(f"max(alphagate_draft_length_configured{{{C}}})", "configured K", "A"),
            q(f"max(alphagate_draft_length_recommended{{{C}}})", "recommended K", "B"),
            q(
                f"max by (position) (alphagate_draft_position_acceptance_ratio{{{C}}})",
                "accepted at position {{position}}",
                "C",
            ),
        ).min(0)
    )
    dash = dash.with_panel(
        ts(
            "Generated tokens per second",
            "Traffic per model, slice and role: generated tokens per second (the slice weights) "
            "and drafts per second (the sample size behind alpha).",
            "short",
            q(
                f"namespace_model_slice_role:vllm_generation_tokens:rate5m{{{V}}}",
                "{{model_name}} {{slice}} {{role}}",
                "A",
            ),
            q(
                f"namespace_model_slice_role:vllm_spec_decode_drafts:rate5m{{{V}}}",
                "drafts/s {{model_name}} {{slice}} {{role}}",
                "B",
            ),
        )
    )

    # ------------------------------------------------------------ latency
    dash = dash.with_row(db.Row("Latency: canary vs baseline"))
    dash = dash.with_panel(
        ts(
            "Time per output token, P50 and P99 (per token)",
            "vllm:request_time_per_output_token_seconds: one observation per request, so a "
            "speculating canary and a plain baseline compare like for like. The guard's default.",
            "s",
            q(
                f"namespace_model_slice_role:vllm_request_time_per_output_token_seconds:p99_rate5m{{{V}}}",
                "P99 {{slice}} {{role}}",
                "A",
            ),
            q(
                f"namespace_model_slice_role:vllm_request_time_per_output_token_seconds:p50_rate5m{{{V}}}",
                "P50 {{slice}} {{role}}",
                "B",
            ),
        )
    )
    dash = dash.with_panel(
        ts(
            "Inter-token latency, P50 and P99 (per engine step)",
            "vllm:inter_token_latency_seconds is observed once per engine step, and a "
            "speculating step carries 1 + accepted tokens: the canary's per-step ITL is higher "
            "by design. Read it as the longest gap a streaming user sees.",
            "s",
            q(
                f"namespace_model_slice_role:vllm_inter_token_latency_seconds:p99_rate5m{{{V}}}",
                "P99 {{slice}} {{role}}",
                "A",
            ),
            q(
                f"namespace_model_slice_role:vllm_inter_token_latency_seconds:p50_rate5m{{{V}}}",
                "P50 {{slice}} {{role}}",
                "B",
            ),
        )
    )
    dash = dash.with_panel(
        ts(
            "Measured speed-up (baseline / canary mean time per token)",
            "From vLLM's exact _sum/_count of request_time_per_output_token_seconds, per pod and "
            "interval, with its 95% interval: above 1 speculation is net positive at the live "
            "concurrency.",
            "none",
            q(f"max by (slice) (alphagate_measured_speedup_ratio{{{S}}})", "{{slice}}", "A"),
            q(
                f"max by (slice) (alphagate_measured_speedup_lower_ratio{{{S}}})",
                "{{slice}} lower",
                "B",
            ),
            q(
                f"max by (slice) (alphagate_measured_speedup_upper_ratio{{{S}}})",
                "{{slice}} upper",
                "C",
            ),
        )
    )
    dash = dash.with_panel(
        ts(
            "P99 ratio canary / baseline",
            "Per token, from vLLM (recording rule) and as the controller's latency guard "
            "computed it. Above 1.10 is a 10% regression.",
            "none",
            q(
                "namespace_model_slice:vllm_request_time_per_output_token_seconds_p99:canary_over_baseline"
                f"{{{V}}}",
                "vLLM {{slice}}",
                "A",
            ),
            q(f"max by (slice) (alphagate_latency_ratio{{{S}}})", "controller {{slice}}", "B"),
        )
        .thresholds(traffic_light((1.1, "red")))
        .thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
        )
    )
    dash = dash.with_panel(
        ts(
            "Quantiles the latency guard compared",
            "The quantiles the controller's latency check used in its last window, per role; "
            "metric says per_token or per_step.",
            "s",
            q(
                f"max by (slice, role, metric, quantile) (alphagate_itl_quantile_seconds{{{S}}})",
                "{{role}} {{metric}} q{{quantile}} {{slice}}",
            ),
        )
    )
    dash = dash.with_panel(
        ts(
            "Tokens per engine step",
            "Generated tokens / ITL observations: about the mean "
            "acceptance length while speculating, 1 when not.",
            "short",
            q(
                f"namespace_model_slice_role:vllm_tokens_per_step:ratio_rate5m{{{V}}}",
                "{{slice}} {{role}}",
            ),
        )
    )

    # ------------------------------------------------------------ controller health
    dash = dash.with_row(db.Row("Controller"))
    dash = dash.with_panel(
        ts(
            "Source errors",
            "Failed metrics reads per kind (5m): unreachable, timeout, "
            "http_status, query_error, empty, ...",
            "short",
            q(f"sum by (kind) (increase(alphagate_source_errors_total{{{C}}}[5m]))", "{{kind}}"),
        )
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
    )
    dash = dash.with_panel(
        ts(
            "API budget deferrals",
            "Evaluations deferred (15m) because a Kubernetes API budget lacked what one costs, "
            "per canary and budget (canary, namespace, overall); the canary's WithinApiBudget "
            "condition says how late. Alert: AlphagateApiBudgetExceeded.",
            "short",
            q(
                # every canary's series, zeros included: an empty panel would read as
                # "no data" rather than "never deferred"
                "sum by (canary, scope) "
                f"(increase(alphagate_api_budget_deferrals_total{{{C}}}[15m]))",
                "{{canary}} {{scope}}",
            ),
        )
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
    )
    dash = dash.with_panel(
        ts(
            "Evaluation time",
            "Observe, estimate, judge and decide for one canary.",
            "s",
            q(
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(alphagate_evaluation_duration_seconds_bucket{{{C}}}[5m])))",
                "P99",
                "A",
            ),
            q(
                "histogram_quantile(0.5, sum by (le) "
                f"(rate(alphagate_evaluation_duration_seconds_bucket{{{C}}}[5m])))",
                "P50",
                "B",
            ),
        )
    )
    dash = dash.with_panel(
        ts(
            "Warnings: patches, permissions, specs",
            "Warning Events per reason (15m): PatchFailed, Forbidden (HTTP 403), InvalidSpec, "
            "ConflictRetriesExhausted, TargetNotFound. Alerts: AlphagatePatchFailing, "
            "AlphagateForbidden, AlphagateSpecInvalid.",
            "short",
            q(
                f"sum by (reason) (increase(alphagate_warnings_total{{{C}}}[15m]))",
                "{{reason}}",
            ),
        )
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
    )
    # The controller's own process (prometheus_client's process and GC collectors).
    dash = dash.with_panel(
        ts(
            "Controller memory",
            "Resident memory per controller replica; the container limit is 512Mi "
            "(AlphagateControllerMemoryHigh at 400Mi).",
            "bytes",
            q('process_resident_memory_bytes{job="alphagate-metrics"}', "{{pod}}"),
        )
    )
    dash = dash.with_panel(
        ts(
            "Controller CPU",
            "CPU seconds per second per controller replica.",
            "short",
            q('rate(process_cpu_seconds_total{job="alphagate-metrics"}[5m])', "{{pod}}"),
        )
    )
    dash = dash.with_panel(
        ts(
            "Controller open files and GC",
            "Open file descriptors (sockets to the API server, Prometheus and pods) and Python "
            "garbage collections per second.",
            "short",
            q('process_open_fds{job="alphagate-metrics"}', "fds {{pod}}", "A"),
            q(
                'sum by (pod) (rate(python_gc_collections_total{job="alphagate-metrics"}[5m]))',
                "gc/s {{pod}}",
                "B",
            ),
        )
    )
    return dash


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

"""The dashboard's first row, Decision: the canary's state over time, the last evaluation's
numbers at a glance, the controller's leadership and shards, each check's verdict, and the
decisions taken."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import statetimeline
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm

from alphagate_lab.dashboard_panels import DS, C, q, stat_panel, traffic_light, ts

VERDICT_CODES = {"Pass": 0, "Inconclusive": 1, "Error": 2, "Fail": 3}
VERDICT_COLORS = {"Pass": "green", "Inconclusive": "text", "Error": "orange", "Fail": "red"}


def _value_map(codes: dict[str, int], colors: dict[str, str]) -> dm.ValueMap:
    return dm.ValueMap(
        options={
            str(code): dm.ValueMappingResult(text=name, color=colors[name], index=i)
            for i, (name, code) in enumerate(codes.items())
        }
    )


def add_decision_row(dash: db.Dashboard) -> db.Dashboard:
    """The Decision row, appended to ``dash``."""
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
    return dash

"""The dashboard's Controller row: the controller's own health (source errors, API budget
deferrals, evaluation time, warnings, and its process's memory, CPU, files and GC)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import common

from alphagate_lab.dashboard_panels import C, q, ts


def add_controller_row(dash: db.Dashboard) -> db.Dashboard:
    """The Controller row, appended to ``dash``."""
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

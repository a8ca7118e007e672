"""The dashboard's rows of what the controller measures: acceptance as the controller judged
it, acceptance from vLLM's own counters (the recording rules), and latency, canary against
baseline."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import common

from alphagate_lab.dashboard_panels import C, S, V, alpha_band, q, traffic_light, ts


def add_acceptance_rows(dash: db.Dashboard) -> db.Dashboard:
    """The two acceptance rows, the controller's judgement then vLLM's counters."""
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
    return dash


def add_latency_row(dash: db.Dashboard) -> db.Dashboard:
    """The latency row, canary against baseline."""
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
    return dash

"""`alphagate plan`: a staged rollout plan (Markdown) and a ready SpeculativeCanary manifest.

From a target model, its traffic slices with their expected alpha, the target concurrency and
K, it writes the lesson's recipe as steps with the PromQL and commands for each, the cases
where speculation should stay off, and a manifest that passes `alphagate policy check`.
Printed to stdout, or written to `--out DIR` as `<name>.md` and `<name>.yaml`.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from alphagate import config
from alphagate.core.speedup import DEFAULT_RIDGE_TOKENS
from alphagate.errors import PolicyError
from alphagate_lab.commands import memory as memory_cli
from alphagate_lab.planning.plan import DEFAULT_PROMETHEUS_ENDPOINT, PlanInput, build
from alphagate_lab.planning.render import render
from alphagate_lab.planning.slices import parse_slices


def plan(
    model: str = typer.Option(..., "--model", help="Target model, e.g. meta-llama/Llama-3.3-70B."),
    slices: list[str] = typer.Option(
        ..., "--slice", help="A traffic slice as name:share:alpha (repeat the option)."
    ),
    concurrency: int = typer.Option(..., "--concurrency", min=1, help="Target concurrency."),
    k: int = typer.Option(5, "--k", min=1, help="Draft length K (num_speculative_tokens)."),
    overhead: float = typer.Option(0.15, "--overhead", min=0.0, help="Verify overhead epsilon."),
    gate: float = typer.Option(0.55, "--gate", min=0.0, max=1.0, help="Alpha gate."),
    method: str = typer.Option("eagle3", "--method", help="vLLM speculative method."),
    draft_model: str | None = typer.Option(
        None, "--draft-model", help="Draft model or EAGLE-3 head for --speculative-config."
    ),
    namespace: str = typer.Option("default", "--namespace", help="Kubernetes namespace."),
    prometheus_endpoint: str = typer.Option(
        DEFAULT_PROMETHEUS_ENDPOINT,
        "--prometheus-endpoint",
        help="Name of the Prometheus endpoint configured for the controller (alphagate run "
        "--config).",
    ),
    output_tokens: float | None = typer.Option(
        None, "--output-tokens", min=1.0, help="Expected mean output length in tokens."
    ),
    offline: bool = typer.Option(
        False, "--offline", help="The workload is offline batch-1 generation."
    ),
    aggregation: str | None = typer.Option(
        None, "--aggregation", help="combined or perSlice (default: chosen from the numbers)."
    ),
    ridge_tokens: float = typer.Option(
        DEFAULT_RIDGE_TOKENS, "--ridge-tokens", min=1.0, help="Roofline ridge, tokens per step."
    ),
    vllm_version: str | None = typer.Option(
        None, "--vllm-version", help="vLLM version of the image, for version-specific checks."
    ),
    context: int = typer.Option(8192, "--context", min=1, help="Tokens per request (KV)."),
    gpu_gb: float = typer.Option(80.0, "--gpu-memory-gb", min=1.0, help="Memory per GPU."),
    gpus: int = typer.Option(1, "--gpus", min=1, help="GPUs per replica."),
    target_arch: list[str] = typer.Option(
        [], "--target-arch", help="Override a target architecture number, e.g. layers=40."
    ),
    draft_arch: list[str] = typer.Option(
        [], "--draft-arch", help="Override a draft-model architecture number."
    ),
    tpot_median_ms: float | None = typer.Option(
        None,
        "--tpot-median-ms",
        min=0.001,
        max=10000.0,
        help="Expected median time per output token (ms), for the latency buckets the pods get.",
    ),
    tpot_p99_ms: float | None = typer.Option(
        None,
        "--tpot-p99-ms",
        min=0.001,
        max=10000.0,
        help="Expected P99 time per output token (ms), for the latency buckets the pods get.",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Write <name>.md and <name>.yaml into this directory."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines."),
) -> None:
    """Write a staged rollout plan and a SpeculativeCanary manifest for a model and its traffic."""
    try:
        parsed = parse_slices(slices)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--slice'") from None
    agg: config.Aggregation | None = None
    if aggregation is not None:
        try:
            agg = config.Aggregation(aggregation)
        except ValueError:
            choices = ", ".join(a.value for a in config.Aggregation)
            raise typer.BadParameter(
                f"{aggregation!r} is not one of {choices}", param_hint="'--aggregation'"
            ) from None
    t_over = memory_cli.parse_overrides(target_arch, "--target-arch")
    d_over = memory_cli.parse_overrides(draft_arch, "--draft-arch")
    t_arch = memory_cli.arch(model, t_over, "--model") if t_over else None
    d_arch = (
        memory_cli.arch(draft_model or "", d_over, "--draft-model")
        if d_over and draft_model
        else None
    )
    try:
        inp = PlanInput(
            model=model,
            slices=tuple(parsed),
            concurrency=concurrency,
            k=k,
            overhead=overhead,
            gate=gate,
            method=method,
            draft_model=draft_model,
            namespace=namespace,
            prometheus_endpoint=prometheus_endpoint,
            output_tokens=output_tokens,
            offline_batch1=offline,
            aggregation=agg,
            ridge_tokens=ridge_tokens,
            vllm_version=vllm_version,
            context=context,
            gpu_gb=gpu_gb,
            gpus=gpus,
            target_arch=t_arch,
            draft_arch=d_arch,
            tpot_median_seconds=tpot_median_ms / 1e3 if tpot_median_ms is not None else None,
            tpot_p99_seconds=tpot_p99_ms / 1e3 if tpot_p99_ms is not None else None,
        )
        result = build(inp)
    except (ValueError, PolicyError) as exc:
        # PolicyError: an input (namespace, URL, ...) the manifest schema refuses.
        raise typer.BadParameter(str(exc)) from None
    markdown = render(result)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        md_path = out / f"{result.name}.md"
        yaml_path = out / f"{result.name}.yaml"
        md_path.write_text(markdown, encoding="utf-8")
        yaml_path.write_text(result.manifest_yaml(), encoding="utf-8")
        if as_json:
            typer.echo(json.dumps({"markdown": str(md_path), "manifest": str(yaml_path)}))
        else:
            typer.echo(f"wrote {md_path}")
            typer.echo(f"wrote {yaml_path}")
        return
    if as_json:
        data = result.to_dict()
        data["markdown"] = markdown
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(markdown)


def register(app: typer.Typer) -> None:
    """Add `plan` to the CLI."""
    app.command("plan")(plan)

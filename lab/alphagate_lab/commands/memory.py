"""`alphagate whatif --memory`: what each draft costs in GPU memory next to its target.

The numbers come from `planning.memory` (architecture tables with overrides); this module only
parses the options and prints. Several drafts side by side answer exercise 5 directly:
`alphagate whatif --memory --target llama-3.3-70b --draft eagle3 --draft llama-3.2-1b`.
"""

from __future__ import annotations

import json

import typer

from alphagate_lab.planning import memory as mem


def parse_overrides(items: list[str] | None, option: str) -> dict[str, str]:
    """`["layers=40", "tied=true"]` -> {"layers": "40", "tied": "true"}; names the bad item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise typer.BadParameter(f"{item!r} is not key=value", param_hint=f"'{option}'")
        out[key.strip()] = value.strip()
    return out


def arch(name: str, overrides: dict[str, str], option: str) -> mem.Arch:
    try:
        return mem.override(mem.lookup(name), overrides) if overrides else mem.lookup(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{option}'") from None


def reports(
    *,
    target: str,
    drafts: list[str],
    target_arch: list[str] | None,
    draft_arch: list[str] | None,
    context: int,
    concurrency: int,
    gpu_gb: float,
    gpus: int,
    weight_bytes: float,
    draft_weight_bytes: float,
    kv_bytes: float,
) -> list[mem.MemoryReport]:
    t = arch(target, parse_overrides(target_arch, "--target-arch"), "--target")
    d_over = parse_overrides(draft_arch, "--draft-arch")
    out = []
    for d in drafts or ["eagle3"]:
        kind = {"eagle": mem.DraftKind.EAGLE, "eagle3": mem.DraftKind.EAGLE3}.get(d.lower())
        draft = None
        if kind is None:
            kind = mem.DraftKind.DRAFT_MODEL
            draft = arch(d, d_over, "--draft")
        try:
            out.append(
                mem.footprint(
                    t,
                    kind,
                    draft=draft,
                    context=context,
                    concurrency=concurrency,
                    target_weight_bytes=weight_bytes,
                    draft_weight_bytes=draft_weight_bytes,
                    kv_dtype_bytes=kv_bytes,
                    gpu_gb=gpu_gb,
                    gpus=gpus,
                )
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--draft'") from None
    return out


def echo(rs: list[mem.MemoryReport], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rs], indent=2))
        return
    for i, r in enumerate(rs):
        if i:
            typer.echo("")
        typer.echo(mem.render(r))

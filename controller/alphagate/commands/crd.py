"""`alphagate crd`: print (or write) the SpeculativeCanary CRD generated from the models;
`--check FILE` is for CI, when someone edits a model and forgets to regenerate."""

from __future__ import annotations

import difflib
from pathlib import Path

import typer

from alphagate.kube.crd import DEPLOY_PATH, render_crd


def crd(
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the CRD to this file instead of stdout."
    ),
    check: Path | None = typer.Option(
        None, "--check", help=f"Compare with a file (e.g. {DEPLOY_PATH}); exit 1 if it drifted."
    ),
) -> None:
    """Print the SpeculativeCanary CustomResourceDefinition (YAML)."""
    text = render_crd()
    if check is not None:
        try:
            current = check.read_text()
        except OSError as exc:
            typer.echo(f"error: {check}: {exc.strerror or exc}", err=True)
            raise typer.Exit(1) from exc
        if current == text:
            typer.echo(f"{check}: up to date")
            return
        diff = difflib.unified_diff(
            current.splitlines(), text.splitlines(), str(check), "generated", lineterm="", n=1
        )
        typer.echo("\n".join(list(diff)[:40]), err=True)
        typer.echo(
            f"error: {check} drifted from the models; regenerate with `alphagate crd -o {check}`",
            err=True,
        )
        raise typer.Exit(1)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        typer.echo(f"wrote {output}")
        return
    typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.command("crd")(crd)

"""What every command that talks to the cluster shares: `--server`, `--kubeconfig`,
`--context`, `-n` (defaulting as kubectl does), the connection, and reading one
SpeculativeCanary.

The kubernetes client is imported when a command connects, not when the CLI starts: help and
the commands that never talk to the API server do not pay for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from alphagate.config import GROUP, PLURAL, VERSION

if TYPE_CHECKING:
    from alphagate.kube.client import Kube

# --server is for the sandbox and tests (a URL with no auth): hidden from help.
SERVER = typer.Option(
    None,
    "--server",
    envvar="ALPHAGATE_SERVER",
    hidden=True,
    help="API server URL (no auth; sandbox/tests).",
)
KUBECONFIG = typer.Option(
    None, "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, a merged list, as kubectl)."
)
CONTEXT = typer.Option(None, "--context", help="Kubeconfig context.")
NAMESPACE = typer.Option(
    None,
    "--namespace",
    "-n",
    help="Namespace of the canary (default: the kubeconfig context's, as kubectl).",
)


def connect(server: str | None, kubeconfig: str | None, context: str | None) -> Kube:
    from alphagate.kube.client import Kube

    return Kube.connect(server=server, kubeconfig=kubeconfig, context=context)


def resolve_namespace(
    namespace: str | None, server: str | None, kubeconfig: str | None, context: str | None
) -> str:
    """-n if given, else the namespace kubectl would use for this kubeconfig and context."""
    from alphagate.kube.client import default_namespace

    return namespace or default_namespace(server=server, kubeconfig=kubeconfig, context=context)


def read_canary(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    from alphagate.kube.client import call

    obj = call(
        f"read {PLURAL}.{GROUP} {namespace}/{name}",
        lambda: kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
    )
    return obj if isinstance(obj, dict) else {}

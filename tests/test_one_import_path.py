"""One name, one import path: a module's `__all__` names only what that module defines, and
no module gives a second name to a type defined elsewhere (`DeploymentState = WorkloadState`).

Re-exporting shims ("split X, X re-exports") cost every reader a wrong first file. A package's
`__init__` may be its public face (kopf's `kopf/__init__.py`), and `alphagate.core.model` is
the one declared facade of the core's vocabulary (`core.vocab`, `core.evidence`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (ROOT / "controller" / "alphagate", ROOT / "lab" / "alphagate_lab")
FACADES = frozenset({"alphagate.core.model"})
# The controller's package faces: what a user's policy is (`config`, one schema for the YAML,
# the CRD and the checker) and vLLM's --speculative-config rules (`specconfig`, one table, one
# checker). Any other controller package's __init__ re-exporting its modules is a shim.
CONTROLLER_FACES = frozenset({"alphagate.config", "alphagate.specconfig"})


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted(pkg.rglob("*.py")):
            parts = path.relative_to(pkg.parent).with_suffix("").parts
            out.append((".".join(parts), path))
    return out


def _all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(node, ast.Assign)
            value = ast.literal_eval(node.value)
            return [str(v) for v in value]
    return []


def _top_level(tree: ast.Module) -> tuple[set[str], list[tuple[str, str]]]:
    """Names the module defines, and its `A = B` aliases of imported names."""
    defined: set[str] = set()
    imported: set[str] = set()
    aliases: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    defined.add(t.id)
                    if isinstance(node.value, ast.Name) and node.value.id in imported:
                        aliases.append((t.id, node.value.id))
    return defined, aliases


MODULES = _modules()


def test_the_scan_sees_both_packages() -> None:
    names = {m for m, _ in MODULES}
    assert {"alphagate.core.machine", "alphagate_lab.sim.fleet"} <= names
    assert len(names) > 150


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_a_module_exports_only_what_it_defines(module: str, path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined, aliases = _top_level(tree)
    assert not aliases, f"{module}: a second name for an imported type: {aliases}"
    if module in FACADES:
        return
    if path.name == "__init__.py":
        package = module.removesuffix(".__init__")
        if package.startswith("alphagate_lab") or package in CONTROLLER_FACES:
            return
    foreign = [n for n in _all(tree) if n not in defined]
    assert not foreign, f"{module}.__all__ names what other modules define: {foreign}"


def test_a_shim_is_caught() -> None:
    shim = ast.parse("from x import A, B\nC = B\n__all__ = ['A', 'C']\n")
    defined, aliases = _top_level(shim)
    assert aliases == [("C", "B")]
    assert [n for n in _all(shim) if n not in defined] == ["A"]

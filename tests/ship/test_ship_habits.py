"""The project's habits hold: the LICENSE is the license pyproject declares, pre-commit runs what
`make lint` runs, `make test` lints (beside the tests, and fails with lint), and the changelog
keeps an Unreleased section and the CRD's version policy."""

from __future__ import annotations

import re
import tomllib

import ship_support as ship


def _recipe(target: str) -> list[str]:
    makefile = (ship.ROOT / "Makefile").read_text()
    (body,) = re.findall(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    return [line.strip() for line in body.splitlines()]


def test_license_is_the_apache_text_both_distributions_declare() -> None:
    text = (ship.ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    for pyproject in (ship.ROOT / "pyproject.toml", ship.ROOT / "lab" / "pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        assert project["license"] == {"text": "Apache-2.0"}, pyproject


def test_pre_commit_runs_what_make_lint_runs_in_order() -> None:
    config = ship.yaml_load((ship.ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [h for repo in config["repos"] for h in repo["hooks"]]
    assert all(h["language"] == "system" and h["pass_filenames"] is False for h in hooks)
    lint = [line.replace("$(BIN)/", ".venv/bin/") for line in _recipe("lint")]
    assert [h["entry"] for h in hooks] == lint


def test_make_test_lints_beside_the_tests_and_fails_with_lint() -> None:
    recipe = " ".join(_recipe("test")).replace("\\ ", "")
    started = recipe.index("$(MAKE) --no-print-directory lint")
    assert recipe.index("/pytest") > started  # lint starts first, then runs beside the tests
    assert "wait $$lint; linted=$$?" in recipe  # its status is collected
    assert "[ $$tests -eq 0 ] && [ $$story -eq 0 ] && [ $$linted -eq 0 ]" in recipe  # each fails it


def test_make_test_runs_the_real_time_story_beside_the_suite_at_a_higher_priority() -> None:
    recipe = " ".join(_recipe("test")).replace("\\ ", "")
    story = recipe.index('$(BIN)/pytest tests/demo -m "realtime and not vllm"')
    suite = recipe.index('nice -n $(NICE) $(BIN)/pytest -m "not vllm and not realtime"')
    assert story < suite and "nice -n $(NICE) $(MAKE) --no-print-directory lint" in recipe
    assert recipe[story - len("; ") : story] == "; "  # not niced itself
    assert "wait $$realtime; story=$$?" in recipe


def test_every_real_time_test_lives_where_the_story_collects() -> None:
    """The story's process collects tests/demo alone and the suite deselects `realtime`: a
    test marked so anywhere else would run in neither."""
    marked = [
        path.relative_to(ship.ROOT).as_posix()
        for path in (ship.ROOT / "tests").rglob("test_*.py")
        if re.search(r"mark\.realtime\b", path.read_text())
    ]
    assert marked and all(p.startswith("tests/demo/") for p in marked), marked

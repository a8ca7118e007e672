"""How `make test` hands the suite to its xdist workers (tests/conftest.py): a renamed module
must not silently drop out of LONGEST_FIRST, and the order must reach the scheduler."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

import conftest

TESTS = Path(__file__).resolve().parent


def test_every_longest_first_group_exists() -> None:
    groups = set(conftest.XDIST_GROUPS.values())
    missing = [
        g for g in conftest.LONGEST_FIRST if g not in groups and not (TESTS.parent / g).is_file()
    ]
    assert missing == [], f"LONGEST_FIRST names no group or module: {missing}"


def test_every_module_that_reads_the_backtest_recordings_shares_their_group() -> None:
    """The recordings are session fixtures: a module on another worker would make them again."""
    folder = TESTS / "backtest"
    fixtures = ("chat_to_code", "steady_chat")
    assert all(f"def {name}(" in (folder / "conftest.py").read_text() for name in fixtures)
    readers = [
        p.relative_to(TESTS.parent).as_posix()
        for p in sorted(folder.glob("test_*.py"))
        if any(name in p.read_text() for name in fixtures)
    ]
    assert readers, "no module reads the recordings"
    group = {path: conftest.xdist_group(f"{path}::t") for path in readers}
    apart = [path for path, g in group.items() if g != "backtest-recordings"]
    assert apart == [], f"read the session recordings outside their group: {apart}"


def _nodeid(group: str, name: str) -> str:
    """A test in `group`: in its module, or in the first path XDIST_GROUPS gathers into it."""
    path = next((p for p, g in conftest.XDIST_GROUPS.items() if g == group), group)
    return f"{path}test_x.py::{name}" if path.endswith("/") else f"{path}::{name}"


SMALL = "tests/core/test_small.py::a"
BIG = ("tests/core/test_big.py::a", "tests/core/test_big.py::b")


def _sorted(config: object, *nodeids: str) -> list[str]:
    items = [cast(pytest.Item, SimpleNamespace(nodeid=n)) for n in nodeids]
    conftest.pytest_collection_modifyitems(cast(pytest.Config, config), items)
    return [i.nodeid for i in items]


def test_workers_sort_the_longest_groups_first_then_the_bigger_ones() -> None:
    first, second = (_nodeid(g, "t") for g in conftest.LONGEST_FIRST[:2])
    worker = SimpleNamespace(workerinput={})
    assert _sorted(worker, SMALL, *BIG, second, first) == [first, second, *BIG, SMALL]
    assert _sorted(SimpleNamespace(), SMALL, first) == [SMALL, first]  # a plain run: as is


class _Worker:
    """What the scheduler asks of an xdist worker: the tests it is sent, in order."""

    def __init__(self, collection: list[str]) -> None:
        self.collection, self.sent, self.shutting_down = collection, list[str](), False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent += [self.collection[i] for i in indexes]

    def shutdown(self) -> None:
        self.shutting_down = True


def test_the_scheduler_hands_groups_out_in_collection_order() -> None:
    """xdist's own scheduler would put the groups with more tests first (`loadscopereorder`)."""
    first = _nodeid(conftest.LONGEST_FIRST[0], "t")
    collection = _sorted(SimpleNamespace(workerinput={}), *BIG, SMALL, first)
    option = SimpleNamespace(dist="loadgroup", tx=["popen"], loadscopereorder=True)
    config: Any = SimpleNamespace(option=option, getvalue=lambda name: getattr(option, name))
    scheduler = conftest.pytest_xdist_make_scheduler(config, log=None)
    worker = _Worker(collection)
    scheduler.add_node(worker)
    scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    assert worker.sent == [first, *BIG]  # two groups to start with, the longest first

"""Namespaces in turn: the control loop's one thread decides arrived reads round robin over
namespaces, not in arrival order, so one tenant's twenty canaries whose reads end together
cannot hold another namespace's decision behind them (`shell.turns`)."""

from __future__ import annotations

from typing import Any, cast

from alphagate.core.model import Observation
from alphagate.shell.cycles import Cycle
from alphagate.shell.outcome import Outcome
from alphagate.shell.turns import Turns, in_turn


def cycle_of(keys: list[tuple[str, str]]) -> Cycle:
    """A cycle whose canaries are all waiting for their reads (no read thread started)."""
    begun = [(cast(Outcome, object()), cast(Any, object())) for _ in keys]
    return Cycle(keys, begun)


def arrive(cycle: Cycle, i: int) -> None:
    cycle.arrived.put((i, cast(Observation, object())))


def decided(cycle: Cycle) -> list[tuple[str, str]]:
    """The keys in the order the loop takes them (`Reconciler.finish_arrived` uses `take`)."""
    order = []
    while (arrival := cycle.take(block=False)) is not None:
        cycle.waiting.discard(arrival[0])
        order.append(cycle.keys[arrival[0]])
    return order


def test_one_victim_arriving_after_twenty_of_a_tenant_is_decided_second() -> None:
    keys = [("noisy", f"c{n}") for n in range(20)] + [("victim", "v")]
    cycle = cycle_of(keys)
    for i in range(len(keys)):  # the attacker's twenty end first, then the victim's
        arrive(cycle, i)
    order = decided(cycle)
    assert order.index(("victim", "v")) <= 1
    assert [k for k in order if k[0] == "noisy"] == keys[:20]  # longest due first inside one
    assert len(order) == len(keys)


def test_turns_go_round_between_namespaces_across_arrivals() -> None:
    keys = [("a", "a0"), ("a", "a1"), ("a", "a2"), ("b", "b0"), ("b", "b1"), ("c", "c0")]
    cycle = cycle_of(keys)
    for i in range(4):  # a0 a1 a2 b0 have arrived
        arrive(cycle, i)
    first = cycle.take(block=False)
    assert first is not None and cycle.keys[first[0]] == ("a", "a0")
    cycle.waiting.discard(first[0])
    arrive(cycle, 5)  # c0 arrives while a0 is decided: it waits for b's turn only
    arrive(cycle, 4)
    assert decided(cycle) == [("b", "b0"), ("a", "a1"), ("c", "c0"), ("b", "b1"), ("a", "a2")]


def test_an_arrival_told_twice_is_taken_once() -> None:
    cycle = cycle_of([("a", "x"), ("b", "y")])
    arrive(cycle, 0)
    arrive(cycle, 0)
    arrive(cycle, 1)
    assert decided(cycle) == [("a", "x"), ("b", "y")]
    assert cycle.take(block=False) is None


def test_due_keys_are_admitted_namespaces_in_turn() -> None:
    keys = [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1"), ("c", "1"), ("b", "2")]
    assert in_turn(keys) == [("a", "1"), ("b", "1"), ("c", "1"), ("a", "2"), ("b", "2"), ("a", "3")]
    assert in_turn([]) == []


def test_turns_rank_orders_inside_a_namespace() -> None:
    turns: Turns[str] = Turns()
    turns.push("a", 5, "late")
    turns.push("a", 1, "early")
    turns.push("b", 3, "b")
    assert [turns.pop() for _ in range(len(turns))] == ["early", "b", "late"]

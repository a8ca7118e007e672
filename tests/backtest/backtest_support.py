"""Helpers for the backtest tests: policies that select the simulator's pods, recordings."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from alphagate.config import SpeculativeCanarySpec, parse
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.recording import record
from alphagate_lab.sim.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"

#: The simulator labels each pod with its slice and role, so a policy selects pools by those.
BASE: dict[str, Any] = {
    "apiVersion": "alphagate.io/v1alpha1",
    "kind": "SpeculativeCanary",
    "metadata": {"name": "backtest-test"},
    "spec": {
        "target": {"name": "chat-canary"},
        "baseline": {"name": "chat-baseline"},
        "speculativeConfig": {
            "method": "eagle3",
            "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": 5,
        },
        "aggregation": "combined",
        "slices": [],
        "acceptance": {
            "disableBelow": 0.55,
            "enableAbove": 0.60,
            "minDrafts": 500,  # the chat policy's (policies/general-chat-eagle3.yaml)
            "consecutiveWindows": 2,  # = default
        },
        "timing": {
            "intervalSeconds": 30,  # = default
            "windowSeconds": 300,  # = default
            "warmupSeconds": 120,  # = default
            "minDwellSeconds": 600,  # = default
            "maxFlipsPerHour": 6,  # 4 shipped: the recorded story flips 5 times in an hour
            # Longer than the chat-to-code shift (40 min): the only way back is the early
            # re-probe when the mix returns to chat, so no probe lands while alpha is low.
            "cooldown": {"initialSeconds": 3600, "maxSeconds": 14400},
        },
        "source": {"kind": "podScrape"},
    },
}


def policy_doc(
    slices: Sequence[str] = ("chat", "code"),
    *,
    aggregation: str = "combined",
    timing: Mapping[str, Any] | None = None,
    acceptance: Mapping[str, Any] | None = None,
    latency: Mapping[str, Any] | None = None,
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A policy over the simulator's slices; `selector` replaces every pool's matchLabels."""
    doc = copy.deepcopy(BASE)
    spec = doc["spec"]
    spec["aggregation"] = aggregation
    for name in slices:
        spec["slices"].append(
            {
                "name": name,
                "canary": {"matchLabels": dict(selector or {"slice": name, "role": "canary"})},
                "baseline": {"matchLabels": dict(selector or {"slice": name, "role": "baseline"})},
                "deployment": {"name": f"{name}-canary"},
            }
        )
    spec["timing"].update(timing or {})
    spec["acceptance"].update(acceptance or {})
    if latency:
        spec["latency"] = dict(latency)
    return doc


def spec_of(doc: Mapping[str, Any]) -> SpeculativeCanarySpec:
    return parse(dict(doc)).spec


def write_policy(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")
    return path


def scenario(name: str) -> Scenario:
    return load_scenario(SCENARIOS / f"{name}.yaml")


def make_recording(
    sc: Scenario, path: Path, *, duration: float | None = None, every: float = 15.0
) -> Path:
    """Record `sc` in-process with 15 s ticks (what `alphagate sim --fast --record` does)."""
    record(Fleet(sc, tick=15.0), path, duration=duration, every=every)
    return path

"""What the `alphagate evaluate` tests share: one chat policy read from simulated pods, a
scenario of the pools that serve it, and the `--scrape-target` flags for a SimServer."""

from __future__ import annotations

from typing import Any

from alphagate_lab.sim.scenario import Scenario
from alphagate_lab.sim.server import SimServer

POLICY = """\
apiVersion: alphagate.io/v1alpha1
kind: SpeculativeCanary
metadata: {name: chat, namespace: llm}
spec:
  target: {name: chat-canary}
  baseline: {name: chat-baseline}
  speculativeConfig: {method: ngram, num_speculative_tokens: 4}
  slices:
    - name: chat
      canary: {matchLabels: {role: canary, slice: chat}}
      baseline: {matchLabels: {role: baseline, slice: chat}}
  # A few seconds of a simulated fleet through the real sources: windows of seconds hold
  # tens of drafts and a few requests, and there is no rollout to warm up after.
  acceptance: {minDrafts: 50}  # 200 shipped; a 10 s window holds ~100
  latency: {minCount: 5}  # 100 shipped; a 10 s window holds ~10 requests
  timing: {intervalSeconds: 2, windowSeconds: 10, warmupSeconds: 0}  # seconds, not minutes
  source: {kind: podScrape}
"""


def chat_scenario(name: str, *, seed: int, rate: float, chat: dict[str, Any]) -> Scenario:
    """Two speculating canary pods and one plain baseline pod serving the `chat` slice."""
    return Scenario.model_validate(
        {
            "name": name,
            "seed": seed,
            "tick": 0.5,
            "traffic": {"rate": rate},
            "slices": {"chat": chat},
            "pools": [
                {
                    "name": "chat-canary",
                    "role": "canary",
                    "slice": "chat",
                    "replicas": 2,
                    "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
                },
                {"name": "chat-baseline", "role": "baseline", "slice": "chat", "replicas": 1},
            ],
        }
    )


def scrape_target_args(sim: SimServer) -> list[str]:
    """`--scrape-target chat:<role>=<url>` for every pod of `sim`."""
    out: list[str] = []
    for name in sim.ports:
        role = "canary" if "canary" in name else "baseline"
        out += ["--scrape-target", f"chat:{role}={sim.url(name)}"]
    return out

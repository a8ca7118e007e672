"""One spec builder for every test folder: a base document with overrides deep-merged, then
validated, so a bad test policy fails at once. A plain function (not only a fixture) so a
module-level `SPEC = make_spec()` works; tests/conftest.py's `make_spec` fixture uses it too."""

from __future__ import annotations

import copy
from typing import Any

from alphagate.config import SpeculativeCanarySpec

# A small valid spec: one slice, pods told apart by a `track` label, scraped directly.
BASE_SPEC: dict[str, Any] = {
    "target": {"name": "canary"},
    "baseline": {"name": "baseline"},
    "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 5},
    "slices": [
        {
            "name": "chat",
            "canary": {"matchLabels": {"track": "canary"}},
            "baseline": {"matchLabels": {"track": "baseline"}},
        }
    ],
    "source": {"kind": "podScrape"},
}

# The pools the source tests serve: chat-canary against chat-baseline, by role and slice
# labels; each test adds its own `source`.
SOURCE_SPEC: dict[str, Any] = {
    "target": {"name": "chat-canary"},
    "baseline": {"name": "chat-baseline"},
    "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
    "slices": [
        {
            "name": "chat",
            "canary": {"matchLabels": {"role": "canary", "slice": "chat"}},
            "baseline": {"matchLabels": {"role": "baseline", "slice": "chat"}},
        }
    ],
}


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` merged in: nested dicts merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def spec_from(base: dict[str, Any], /, **over: Any) -> SpeculativeCanarySpec:
    """`spec_from(BASE, timing={"intervalSeconds": 10})`: `base` with the overrides merged."""
    return SpeculativeCanarySpec.model_validate(merge(base, over))


# The state machine tests' spec: Prometheus as the source (no pods to scrape) and the timing
# every machine test reasons about (30 s interval, 300 s window, 120 s warm-up, 600 s dwell,
# 900 s probe, 4 flips an hour, cooldown 900 s x2 up to 3,600 s). Tests merge their changes in.
MACHINE_SPEC: dict[str, Any] = merge(
    BASE_SPEC,
    {
        "source": {"kind": "prometheus", "prometheus": {}},
        "timing": {
            # the shipped defaults, written out because the machine tests compute with them
            "intervalSeconds": 30,  # = default
            "windowSeconds": 300,  # = default
            "warmupSeconds": 120,  # = default
            "minDwellSeconds": 600,  # = default
            "probeSeconds": 900,  # = default
            "maxFlipsPerHour": 4,  # = default
            # maxSeconds 3,600, not the default 4 h: the backoff tests reach the cap in a few
            # rollbacks (900, 1,800, 3,600, 3,600, ...)
            "cooldown": {"initialSeconds": 900, "factor": 2, "maxSeconds": 3600},
        },
    },
)

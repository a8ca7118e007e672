"""The speculative-config table against the installed real vLLM: same fields, same methods, and
alphagate refuses exactly what vLLM's SpeculativeConfig refuses (for configs that need no
checkpoint download). One import of vLLM, about 15 s."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from alphagate import specconfig as sc
from alphagate_lab.sandbox.vllm_server import vllm_python, vllm_unavailable_reason

K = "num_speculative_tokens"

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(300)]

INTERNAL = {"target_model_config", "target_parallel_config", "draft_model_config",
            "draft_parallel_config"}  # fmt: skip

# Configs SpeculativeConfig can judge without a target model or a checkpoint.
CASES: list[dict[str, Any]] = [
    {"method": "ngram", K: 3},
    {"method": "ngram", K: 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
    {"method": "ngram", K: 4, "prompt_lookup_min": 5, "prompt_lookup_max": 2},
    {"method": "ngram", K: 0},
    {"method": "ngram", K: 3, "bogus": True},
    {"method": "ngram", K: 3, "tensor_parallel_size": 2},
    {"method": "ngram", K: 3, "draft_sample_method": "sampled"},
    {"method": "ngram", K: 3, "rejection_sample_method": "synthetic"},
    {"method": "ngram", K: 2, "rejection_sample_method": "synthetic",
     "synthetic_acceptance_rates": [0.5, 0.7]},
    {"method": "ngram", K: 2, "rejection_sample_method": "synthetic",
     "synthetic_acceptance_rates": [0.7, 0.5]},
    {"method": "ngram", K: 2, "synthetic_acceptance_length": 2.0},
    {"method": "ngram", K: 2, "use_heterogeneous_vocab": True},
    {"method": "ngram", K: 2, "enable_adaptive_verification": True},
    {"method": "eagle3", K: 3},
    {"method": "draft_model", K: 3},
    {K: 3},
    {"method": "medusa2", K: 3},
]  # fmt: skip

PROBE = r"""
import dataclasses, json, sys, typing
from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod, MTPModelTypes
def flat(t):
    out = []
    for a in typing.get_args(t):
        out += flat(a) if typing.get_origin(a) is typing.Literal else [a]
    return out
cases = json.loads(sys.argv[1])
verdicts = []
for cfg in cases:
    try:
        SpeculativeConfig(**cfg)
        verdicts.append(None)
    except Exception as exc:
        verdicts.append(str(exc))
print(json.dumps({
    "fields": [f.name for f in dataclasses.fields(SpeculativeConfig)],
    "methods": sorted(set(flat(SpeculativeMethod)) - set(flat(MTPModelTypes))),
    "mtp": sorted(flat(MTPModelTypes)),
    "verdicts": verdicts,
}))
"""


def test_table_matches_the_installed_vllm(tmp_path: Path) -> None:
    why = vllm_unavailable_reason()
    if why is not None:
        pytest.skip(why)
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    run = subprocess.run(
        [str(vllm_python()), str(script), json.dumps(CASES)],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
        env={"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
             "PATH": "/usr/bin:/bin", "VLLM_CACHE_ROOT": str(tmp_path / "cache")},
    )  # fmt: skip
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(got["fields"]) - INTERNAL == set(sc.FIELDS)
    assert set(got["methods"]) | {"mtp"} == set(sc.METHODS)
    assert set(got["mtp"]) == sc.MTP_ALIASES | {"mtp"}
    for cfg, said in zip(CASES, got["verdicts"], strict=True):
        ours = sc.errors(cfg)
        assert bool(ours) == (said is not None), (cfg, said, ours)
        if said is not None and ours[0].code is not Code.ABSURD_K:
            # the first words alphagate quotes appear in vLLM's own message
            assert ours[0].vllm_says.split(" (")[0].rstrip(".")[:40] in said, (cfg, said)


Code = sc.Code

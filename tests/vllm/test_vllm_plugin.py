"""The synthetic-acceptance plugin's kernels, run in the vLLM venv against vLLM's own CPU ops.

Seconds, not minutes: no server, only torch and `vllm.utils.cpu_triton_utils`. Checks that
flat rates give alpha = rate, that decreasing rates give the per-position acceptance asked
for, that rejection emits the target's token and acceptance the bonus, and that outside
synthetic mode the patched functions give exactly what vLLM's originals give.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from alphagate_lab.sandbox.vllm_server import vllm_python, vllm_unavailable_reason

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

PROBE = textwrap.dedent(
    """
    import json
    import torch
    from vllm.platforms import current_platform
    current_platform.import_kernels()  # the _C build for this CPU (AVX2/AVX512) -> torch.ops._C
    from vllm.utils import cpu_triton_utils as cpu_tl
    from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates
    import alphagate_vllm_synthetic as plugin

    orig_greedy = cpu_tl._rejection_greedy_sample_kernel_impl
    orig_random = cpu_tl._rejection_random_sample_kernel_impl
    plugin.register()
    greedy = cpu_tl._rejection_greedy_sample_kernel_impl
    random_ = cpu_tl._rejection_random_sample_kernel_impl
    plugin.register()  # loaded in every process, maybe twice: must not wrap twice
    out = {"patched": greedy is not orig_greedy and random_ is not orig_random,
           "idempotent": cpu_tl._rejection_greedy_sample_kernel_impl is greedy}

    K, B, V = 4, 4000, 16
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(1, K + 1, (B,), generator=gen)
    cu = torch.cumsum(lens, 0).to(torch.int32)
    n = int(cu[-1])
    draft = torch.randint(0, V, (n,), generator=gen, dtype=torch.int32)
    argmax = (draft.to(torch.int64) + 1) % V  # the target never agrees with the draft
    bonus = torch.full((B, 1), 99, dtype=torch.int64)
    uniform = torch.rand((n,), generator=gen, dtype=torch.float64)

    def run(fn, rates, *, random_path=False):
        o = torch.full((B, K + 1), -1, dtype=torch.int32)
        cond = torch.tensor(unconditional_to_conditional_rates(rates), dtype=torch.float32)
        if random_path:
            probs = torch.full((n, V), 1.0 / V)
            recovered = argmax.to(torch.int32)
            fn(o, cu, draft, None, probs, bonus, recovered, uniform,
               torch.zeros(B, dtype=torch.bool), K, V, cond, True, True)
        else:
            fn(o, cu, draft, argmax, bonus, None, K, uniform, cond, True)
        return o

    def stats(o):
        accepted = drafted = bonus_seen = full = 0
        per_pos = [0] * K
        first_reject_is_target = True
        starts = [0] + cu.tolist()[:-1]
        for b in range(B):
            L = int(lens[b]); s = starts[b]
            row = o[b].tolist()
            acc = 0
            while acc < L and row[acc] == int(draft[s + acc]):
                acc += 1
            for p in range(acc):
                per_pos[p] += 1
            accepted += acc; drafted += L
            if acc < L and row[acc] != int(argmax[s + acc]):
                first_reject_is_target = False
            if acc == L:
                full += 1
                bonus_seen += row[L] == 99
            if acc < L and any(t != -1 for t in row[acc + 1:]):
                first_reject_is_target = False  # nothing may follow a rejection
        return {"alpha": accepted / drafted, "per_pos": per_pos,
                "drafts_by_pos": [int((lens > p).sum()) for p in range(K)],
                "reject_emits_target": first_reject_is_target,
                "bonus_seen": bonus_seen, "fully_accepted": full}

    out["flat04_greedy"] = stats(run(greedy, [0.4] * K))
    out["flat07_random"] = stats(run(random_, [0.7] * K, random_path=True))
    out["decreasing_greedy"] = stats(run(greedy, [0.9, 0.6, 0.3, 0.1]))

    # Outside synthetic mode: identical to vLLM's own kernels.
    same = True
    for fn_new, fn_old in ((greedy, orig_greedy),):
        a = torch.full((B, K + 1), -1, dtype=torch.int32)
        b = torch.full((B, K + 1), -1, dtype=torch.int32)
        tgt = torch.where(uniform < 0.5, draft.to(torch.int64), argmax)
        fn_new(a, cu, draft, tgt, bonus, None, K, None, None, False)
        fn_old(b, cu, draft, tgt, bonus, None, K, None, None, False)
        same = same and bool(torch.equal(a, b))
    out["non_synthetic_identical"] = same
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(autouse=True)
def _require_vllm() -> None:
    reason = vllm_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("ALPHAGATE_REQUIRE_VLLM") == "1":
        pytest.fail(f"ALPHAGATE_REQUIRE_VLLM=1 but {reason}")
    pytest.skip(reason)


def test_vllm_plugin_synthetic_kernels_match_the_rates() -> None:
    proc = subprocess.run(
        [str(vllm_python()), "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"probe failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out["patched"] and out["idempotent"]
    assert out["non_synthetic_identical"]

    # ~10,000 draft tokens each: the binomial spread is ~0.01, so ±0.03 is > 3 sigma.
    for key, rate in (("flat04_greedy", 0.4), ("flat07_random", 0.7)):
        st = out[key]
        assert abs(st["alpha"] - rate) < 0.03, (key, st["alpha"])
        assert st["reject_emits_target"], key
        assert st["bonus_seen"] == st["fully_accepted"] > 0, (key, st)
        # Flat unconditional rates: every position's acceptance among drafts that reach it
        # is `rate` (all the rejection sits at position 0).
        for p in range(4):
            assert abs(st["per_pos"][p] / st["drafts_by_pos"][p] - rate) < 0.04, (key, p, st)

    # Decreasing unconditional rates: P(positions 0..p all accepted) = r_p.
    st = out["decreasing_greedy"]
    for p, r in enumerate([0.9, 0.6, 0.3, 0.1]):
        assert abs(st["per_pos"][p] / st["drafts_by_pos"][p] - r) < 0.04, (p, st)

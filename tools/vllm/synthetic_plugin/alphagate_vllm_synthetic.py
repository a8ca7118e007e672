"""vLLM general plugin: make `rejection_sample_method: "synthetic"` work on the CPU backend.

vLLM 0.32 supports synthetic acceptance (`synthetic_acceptance_rates`, per position the
unconditional probability that positions 0..i are all accepted) in its config and in the
Triton rejection kernels, but the CPU stand-ins in `vllm/utils/cpu_triton_utils.py` assert
`not SYNTHETIC_MODE`. This plugin swaps those two module attributes for versions that
implement the synthetic branch exactly as the Triton kernels in
`vllm/v1/sample/rejection_sampler.py` do, and call the originals otherwise.

Why it takes effect: every worker runs `load_general_plugins()` and only then
`current_platform.register_triton_kernel_overrides()`, which reads these attributes.
The rates handed to the kernels are already conditional (c_i = r_i / r_{i-1}); position i
is accepted while u_i < c_i, decoding stops at the first rejection (the target's token
replaces the draft), and the bonus token is appended when no draft was rejected. With flat
rates [a, a, ...] the measured acceptance (accepted / drafted tokens) is a for any length.

Loaded in every vLLM process, possibly more than once: registering is idempotent.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

logger = logging.getLogger("vllm.alphagate_synthetic")

_MARK = "_alphagate_synthetic"

_GREEDY_PARAMS = (
    "output_token_ids",
    "cu_num_draft_tokens",
    "draft_token_ids",
    "target_argmax",
    "bonus_token_ids",
    "is_greedy",
    "max_spec_len",
    "uniform_probs",
    "synthetic_conditional_rates",
    "SYNTHETIC_MODE",
)
_RANDOM_PARAMS = (
    "output_token_ids",
    "cu_num_draft_tokens",
    "draft_token_ids",
    "draft_probs",
    "target_probs",
    "bonus_token_ids",
    "recovered_token_ids",
    "uniform_probs",
    "is_greedy",
    "max_spec_len",
    "vocab_size",
    "synthetic_conditional_rates",
    "NO_DRAFT_PROBS",
    "SYNTHETIC_MODE",
)


def _synthetic_fill(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    fallback_token_ids: Any,
    bonus_token_ids: Any,
    uniform_probs: Any,
    synthetic_conditional_rates: Any,
    take_request: list[bool],
) -> None:
    """Synthetic acceptance for the requests in `take_request`; others stay untouched.

    `fallback_token_ids` is what a rejected position emits: the target argmax (greedy) or
    the recovered token (random), as in the Triton kernels.
    """
    import torch

    out = output_token_ids.tolist()
    cu = cu_num_draft_tokens.tolist()
    drafts = draft_token_ids.tolist()
    fallback = fallback_token_ids.tolist()
    bonus = bonus_token_ids.reshape(-1).tolist()
    uniform = uniform_probs.tolist()
    rates = synthetic_conditional_rates.tolist()

    start = 0
    for req, end in enumerate(cu):
        end = int(end)
        if take_request[req]:
            n = end - start
            rejected = False
            for pos in range(n):
                draft = int(drafts[start + pos])
                rate = rates[pos] if pos < len(rates) else 0.0
                # -1 marks a padded draft slot, which is always rejected.
                accepted = draft >= 0 and uniform[start + pos] < rate
                out[req][pos] = draft if accepted else int(fallback[start + pos])
                if not accepted:
                    rejected = True
                    break
            if not rejected:
                out[req][n] = int(bonus[req])
        start = end
    output_token_ids.copy_(torch.tensor(out, dtype=output_token_ids.dtype))


def _make_greedy(original: Any) -> Any:
    def _rejection_greedy_sample_kernel_impl(
        output_token_ids: Any,
        cu_num_draft_tokens: Any,
        draft_token_ids: Any,
        target_argmax: Any,
        bonus_token_ids: Any,
        is_greedy: Any,
        max_spec_len: Any,
        uniform_probs: Any = None,
        synthetic_conditional_rates: Any = None,
        SYNTHETIC_MODE: Any = False,
    ) -> None:
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                target_argmax,
                bonus_token_ids,
                is_greedy,
                max_spec_len,
                uniform_probs,
                synthetic_conditional_rates,
                SYNTHETIC_MODE,
            )
        batch = int(output_token_ids.shape[0])
        take = [True] * batch if is_greedy is None else [bool(g) for g in is_greedy.tolist()]
        _synthetic_fill(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_argmax,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            take,
        )
        return None

    setattr(_rejection_greedy_sample_kernel_impl, _MARK, True)
    return _rejection_greedy_sample_kernel_impl


def _make_random(original: Any) -> Any:
    def _rejection_random_sample_kernel_impl(
        output_token_ids: Any,
        cu_num_draft_tokens: Any,
        draft_token_ids: Any,
        draft_probs: Any,
        target_probs: Any,
        bonus_token_ids: Any,
        recovered_token_ids: Any,
        uniform_probs: Any,
        is_greedy: Any,
        max_spec_len: Any,
        vocab_size: Any,
        synthetic_conditional_rates: Any = None,
        NO_DRAFT_PROBS: Any = False,
        SYNTHETIC_MODE: Any = False,
    ) -> None:
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                draft_probs,
                target_probs,
                bonus_token_ids,
                recovered_token_ids,
                uniform_probs,
                is_greedy,
                max_spec_len,
                vocab_size,
                synthetic_conditional_rates,
                NO_DRAFT_PROBS,
                SYNTHETIC_MODE,
            )
        take = [not bool(g) for g in is_greedy.tolist()]
        _synthetic_fill(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            recovered_token_ids,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            take,
        )
        return None

    setattr(_rejection_random_sample_kernel_impl, _MARK, True)
    return _rejection_random_sample_kernel_impl


def _params(fn: Any) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def register() -> None:
    """Entry point (`vllm.general_plugins`): patch the CPU rejection stand-ins once."""
    try:
        from vllm.utils import cpu_triton_utils as cpu_tl
    except Exception as exc:  # not a CPU build, or vLLM moved the module
        logger.warning("alphagate synthetic plugin: cpu_triton_utils unavailable (%s)", exc)
        return
    patches = (
        ("_rejection_greedy_sample_kernel_impl", _GREEDY_PARAMS, _make_greedy),
        ("_rejection_random_sample_kernel_impl", _RANDOM_PARAMS, _make_random),
    )
    for name, expected, make in patches:
        original = getattr(cpu_tl, name, None)
        if original is None or getattr(original, _MARK, False):
            continue
        if _params(original) != expected:
            # A different vLLM: refuse rather than mis-route arguments.
            logger.warning(
                "alphagate synthetic plugin: %s has parameters %s, expected %s; not patched",
                name,
                _params(original),
                expected,
            )
            continue
        setattr(cpu_tl, name, make(original))
        logger.info("alphagate synthetic plugin: patched cpu_triton_utils.%s", name)

"""What vLLM 0.32.0's `SpeculativeConfig` accepts: its methods with what each needs, its fields
with their JSON types and bounds, and alphagate's own bounds on K (see the package docstring for
the sources)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

VLLM_VERSION_READ: Final = "0.32.0"
MAX_K: Final = 32
WARN_K: Final = 10


class Family(StrEnum):
    PROMPT_LOOKUP = "promptLookup"  # drafts from the prompt or past outputs; no weights
    HEAD = "head"  # a small head on the target's hidden states (EAGLE, MTP, Medusa ...)
    DRAFT_MODEL = "draftModel"  # a separate, smaller language model
    CUSTOM = "custom"


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    family: Family
    needs_model: bool  # vLLM refuses it without `model`
    cost_per_position: float  # alphagate's default draft cost per position at batch 1
    note: str = ""


# The `SpeculativeMethod` literal of vLLM 0.32.0, with what each needs.
METHODS: Final[dict[str, Method]] = {
    m.name: m
    for m in (
        Method("ngram", Family.PROMPT_LOOKUP, False, 0.01, "prompt lookup on CPU"),
        Method("ngram_gpu", Family.PROMPT_LOOKUP, False, 0.01, "prompt lookup on the GPU"),
        Method("suffix", Family.PROMPT_LOOKUP, False, 0.01, "needs arctic-inference installed"),
        Method("eagle", Family.HEAD, True, 0.04),
        Method("eagle3", Family.HEAD, True, 0.05),
        Method("mtp", Family.HEAD, False, 0.05, "uses the target's own MTP layers"),
        Method("medusa", Family.HEAD, True, 0.02),
        Method("mlp_speculator", Family.HEAD, True, 0.03),
        Method("dflash", Family.HEAD, True, 0.05, "parallel drafting"),
        Method("dspark", Family.HEAD, False, 0.05, "weights may ship in the target"),
        Method("extract_hidden_states", Family.HEAD, False, 0.0, "not a drafter"),
        Method("draft_model", Family.DRAFT_MODEL, True, 0.10),
        Method("custom_class", Family.CUSTOM, True, 0.05, "model is a dotted import path"),
    )
}
# vLLM's MTPModelTypes: accepted as `method`, logged as deprecated and replaced with "mtp".
MTP_ALIASES: Final = frozenset(
    {
        "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
        "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
        "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
        "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "kimi_k3_mtp",
        "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp",
        "inkling_mtp", "glm5_next_mtp",
    }
)  # fmt: skip

INTEGER, BOOLEAN, STRING, NUMBER, ARRAY = "integer", "boolean", "string", "number", "array"
# Every user-settable field of SpeculativeConfig 0.32.0: JSON type and lower bound (None: none).
FIELDS: Final[dict[str, tuple[str, float | None]]] = {
    "enforce_eager": (BOOLEAN, None),
    "num_speculative_tokens": (INTEGER, 1),
    "model": (STRING, None),
    "method": (STRING, None),
    "draft_tensor_parallel_size": (INTEGER, 1),
    "tensor_parallel_size": (INTEGER, None),  # exists only to be refused with a hint
    "quantization": (STRING, None),
    "moe_backend": (STRING, None),
    "attention_backend": (STRING, None),
    "kv_cache_dtype": (STRING, None),
    "max_model_len": (INTEGER, 1),
    "revision": (STRING, None),
    "code_revision": (STRING, None),
    "index_share_for_mtp_iteration": (BOOLEAN, None),
    "disable_padded_drafter_batch": (BOOLEAN, None),
    "disable_eagle_block_drop": (BOOLEAN, None),
    "use_local_argmax_reduction": (BOOLEAN, None),
    "use_heterogeneous_vocab": (BOOLEAN, None),
    "prompt_lookup_max": (INTEGER, 1),
    "prompt_lookup_min": (INTEGER, 1),
    "parallel_drafting": (BOOLEAN, None),
    "num_speculative_tokens_per_batch_size": (ARRAY, None),
    "suffix_decoding_max_tree_depth": (INTEGER, 1),
    "suffix_decoding_max_cached_requests": (INTEGER, 0),
    "suffix_decoding_max_spec_factor": (NUMBER, 0),
    "suffix_decoding_min_token_prob": (NUMBER, 0),
    "draft_load_config": ("object", None),
    "rejection_sample_method": (STRING, None),
    "synthetic_acceptance_rates": (ARRAY, None),
    "synthetic_acceptance_length": (NUMBER, 1),
    "enable_adaptive_verification": (BOOLEAN, None),
    "draft_sample_method": (STRING, None),
    "dspark_draft_topk": (INTEGER, 1),
}
CHOICES: Final[dict[str, tuple[str, ...]]] = {
    "rejection_sample_method": ("standard", "synthetic", "block"),
    "draft_sample_method": ("greedy", "probabilistic"),
}

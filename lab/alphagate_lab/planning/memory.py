"""What a draft costs in GPU memory: weights and KV cache of an EAGLE head or a draft model.

Exercise 5 of the lesson: the EAGLE-3 head for Llama 3.3 70B against Llama 3.2 1B as a classic
draft. Parameters are counted from architecture numbers (a built-in table for common families,
every number overridable), with the layer shapes vLLM builds:

* a dense decoder layer: q/o projections h x (heads*head_dim), k/v h x (kv_heads*head_dim),
  a SwiGLU MLP 3*h*intermediate (norms are noise and left out);
* EAGLE-1 (`method: eagle`): one decoder layer plus `fc` (2h -> h); embeddings and LM head are
  the target's. This reproduces vLLM's docs table: 0.25B for Llama 3 8B, 0.99B for Llama 3 70B;
* EAGLE-3 (`method: eagle3`): `fc` fuses three target layers (3h -> h), the one decoder
  layer's q/k/v read 2h (token embedding and fused state side by side), and the head has its
  own LM head over a reduced draft vocabulary (32k in the published Llama heads); embeddings
  are the target's;
* a draft model: a whole smaller model (embeddings and LM head included, tied or not).

KV cache per token = layers * 2 (K and V) * kv_heads * head_dim * bytes. An EAGLE head has one
layer with the target's KV shape; a draft model has all of its own. Pure arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

GIB: Final = 1024.0**3
GB: Final = 1e9
EAGLE3_DRAFT_VOCAB: Final = 32_000


@dataclass(frozen=True, slots=True)
class Arch:
    """Architecture numbers as in a Hugging Face config.json."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = False  # tie_word_embeddings

    def __post_init__(self) -> None:
        for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{self.name}: {key} must be a positive integer, got {v!r}")


def _a(name: str, h: int, n: int, q: int, kv: int, hd: int, i: int, v: int, t: bool) -> Arch:
    return Arch(name, h, n, q, kv, hd, i, v, t)


# From each model's config.json (hidden, layers, heads, kv heads, head dim, intermediate, vocab,
# tied embeddings).
ARCHS: Final[dict[str, Arch]] = {
    a.name: a
    for a in (
        _a("llama-3.3-70b", 8192, 80, 64, 8, 128, 28672, 128256, False),
        _a("llama-3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256, False),
        _a("llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, False),
        _a("llama-3-8b", 4096, 32, 32, 8, 128, 14336, 128256, False),
        _a("llama-3-70b", 8192, 80, 64, 8, 128, 28672, 128256, False),
        _a("llama-3.2-3b", 3072, 28, 24, 8, 128, 8192, 128256, True),
        _a("llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, True),
        _a("qwen2-7b", 3584, 28, 28, 4, 128, 18944, 152064, False),
        _a("qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, False),
        _a("qwen2-72b", 8192, 80, 64, 8, 128, 29568, 152064, False),
        _a("qwen2.5-72b", 8192, 80, 64, 8, 128, 29568, 152064, False),
        _a("qwen2.5-0.5b", 896, 24, 14, 2, 64, 4864, 151936, True),
        _a("qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, False),
        _a("qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, True),
        _a("mistral-7b", 4096, 32, 32, 8, 128, 14336, 32768, False),
        _a("mistral-small-24b", 5120, 40, 32, 8, 128, 32768, 131072, False),
    )
}


def lookup(name: str) -> Arch:
    """A built-in architecture by a loose name (`meta-llama/Llama-3.3-70B-Instruct` works)."""
    key = name.strip().rsplit("/", 1)[-1].lower()
    for suffix in ("-instruct", "-chat", "-it", "-base"):
        key = key.removesuffix(suffix)
    key = key.replace("meta-", "").replace("_", "-")
    if key in ARCHS:
        return ARCHS[key]
    known = ", ".join(sorted(ARCHS))
    raise ValueError(f"no built-in architecture for {name!r}; known: {known} (or give the numbers)")


def override(arch: Arch, changes: dict[str, str]) -> Arch:
    """`{"layers": "40"}` -> a copy with those numbers; names the bad key or value."""
    fields = {"hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "tied"}
    kw: dict[str, int | bool] = {}
    for key, raw in changes.items():
        if key not in fields:
            raise ValueError(f"unknown architecture number {key!r}; one of {sorted(fields)}")
        if key == "tied":
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"tied must be true or false, got {raw!r}")
            kw[key] = raw.lower() in ("true", "1", "yes")
            continue
        try:
            kw[key] = int(raw)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {raw!r}") from None
    return replace(arch, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ parameters


def _attention(h_in: int, a: Arch) -> int:
    q = a.heads * a.head_dim
    kv = a.kv_heads * a.head_dim
    return h_in * q + 2 * h_in * kv + q * a.hidden


def _mlp(a: Arch) -> int:
    return 3 * a.hidden * a.intermediate


def model_params(a: Arch) -> int:
    """Parameters of a whole dense decoder model (embeddings and LM head included)."""
    embed = a.vocab * a.hidden
    head = 0 if a.tied else a.vocab * a.hidden
    return embed + head + a.layers * (_attention(a.hidden, a) + _mlp(a))


class DraftKind(StrEnum):
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    DRAFT_MODEL = "draft_model"


def eagle_params(target: Arch, *, draft_vocab: int = EAGLE3_DRAFT_VOCAB, v3: bool = True) -> int:
    """Parameters of an EAGLE (v3: EAGLE-3) head for `target` (see the module docstring)."""
    h = target.hidden
    if not v3:
        return 2 * h * h + _attention(h, target) + _mlp(target)
    return 3 * h * h + _attention(2 * h, target) + _mlp(target) + draft_vocab * h


def kv_bytes_per_token(layers: int, a: Arch, dtype_bytes: float) -> float:
    return layers * 2 * a.kv_heads * a.head_dim * dtype_bytes


@dataclass(frozen=True, slots=True)
class Footprint:
    """Weights and KV cache of one model (target or draft) at a context and concurrency."""

    name: str
    params: int
    weight_bytes: float
    kv_bytes_per_token: float
    kv_bytes: float  # at context * concurrency tokens

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes


@dataclass(frozen=True, slots=True)
class MemoryReport:
    target: Footprint
    draft: Footprint
    kind: DraftKind
    context: int
    concurrency: int
    gpu_bytes: float  # all GPUs of one replica
    gpus: int

    @property
    def draft_share_of_gpu(self) -> float:
        """The draft's weights + KV as a share of the replica's GPU memory."""
        return self.draft.total_bytes / self.gpu_bytes if self.gpu_bytes > 0 else math.nan

    @property
    def draft_share_of_target(self) -> float:
        return self.draft.total_bytes / self.target.total_bytes

    @property
    def fits(self) -> bool:
        return self.target.total_bytes + self.draft.total_bytes <= self.gpu_bytes

    def to_dict(self) -> dict[str, object]:
        def fp(f: Footprint) -> dict[str, object]:
            return {
                "name": f.name,
                "params": f.params,
                "weights_gb": f.weight_bytes / GB,
                "kv_bytes_per_token": f.kv_bytes_per_token,
                "kv_gb": f.kv_bytes / GB,
                "total_gb": f.total_bytes / GB,
            }

        return {
            "kind": self.kind.value,
            "context": self.context,
            "concurrency": self.concurrency,
            "gpus": self.gpus,
            "gpu_gb": self.gpu_bytes / GB,
            "target": fp(self.target),
            "draft": fp(self.draft),
            "draft_share_of_gpu": self.draft_share_of_gpu,
            "draft_share_of_target": self.draft_share_of_target,
            "fits": self.fits,
        }


def footprint(
    target: Arch,
    kind: DraftKind,
    *,
    draft: Arch | None = None,
    context: int = 8192,
    concurrency: int = 64,
    target_weight_bytes: float = 2.0,
    draft_weight_bytes: float = 2.0,
    kv_dtype_bytes: float = 2.0,
    draft_vocab: int = EAGLE3_DRAFT_VOCAB,
    gpu_gb: float = 80.0,
    gpus: int = 1,
) -> MemoryReport:
    """Target and draft memory at `context` tokens for each of `concurrency` requests.

    Bytes per weight: 2 for BF16, 1 for FP8/INT8. The KV dtype is shared (vLLM's draft inherits
    the target's `--kv-cache-dtype` unless told otherwise). The draft's KV is sized for the same
    tokens as the target's: it runs over every sequence the target holds."""
    if context < 1 or concurrency < 1 or gpus < 1 or not gpu_gb > 0:
        raise ValueError("context, concurrency, gpus and gpu memory must be positive")
    tokens = float(context) * concurrency
    t_params = model_params(target)
    t_kv = kv_bytes_per_token(target.layers, target, kv_dtype_bytes)
    tgt = Footprint(target.name, t_params, t_params * target_weight_bytes, t_kv, t_kv * tokens)
    if kind is DraftKind.DRAFT_MODEL:
        if draft is None:
            raise ValueError("a draft model needs its architecture (e.g. llama-3.2-1b)")
        if draft.vocab != target.vocab:
            raise ValueError(
                f"draft {draft.name} has vocabulary {draft.vocab}, target {target.vocab}: vLLM "
                f"refuses a draft model with another vocabulary (unless use_heterogeneous_vocab)"
            )
        d_params = model_params(draft)
        d_kv = kv_bytes_per_token(draft.layers, draft, kv_dtype_bytes)
        name = draft.name
    else:
        d_params = eagle_params(target, draft_vocab=draft_vocab, v3=kind is DraftKind.EAGLE3)
        d_kv = kv_bytes_per_token(1, target, kv_dtype_bytes)
        name = f"{kind.value} head for {target.name}"
    drf = Footprint(name, d_params, d_params * draft_weight_bytes, d_kv, d_kv * tokens)
    return MemoryReport(tgt, drf, kind, context, concurrency, gpu_gb * GB * gpus, gpus)


def render(r: MemoryReport) -> str:
    """A short table for people."""

    def row(f: Footprint) -> str:
        return (
            f"  {f.name:<34} {f.params / 1e9:7.2f}B params  {f.weight_bytes / GB:7.1f} GB weights"
            f"  {f.kv_bytes_per_token / 1024:6.1f} KiB/token  {f.kv_bytes / GB:7.1f} GB KV"
        )

    lines = [
        f"memory at {r.context} tokens x {r.concurrency} requests on {r.gpus} GPU(s) of "
        f"{r.gpu_bytes / r.gpus / GB:g} GB:",
        row(r.target),
        row(r.draft),
        f"  the draft takes {r.draft.total_bytes / GB:.1f} GB: {r.draft_share_of_gpu:.1%} of the "
        f"GPU memory, {r.draft_share_of_target:.1%} of what the target needs"
        + ("" if r.fits else "; target and draft do NOT fit together"),
    ]
    return "\n".join(lines)

"""Broken copies of the shipped policies, shared by the `policy check` tests and the CRD's CEL
tests: one list of documents, judged by both the controller's models and admission."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICIES = sorted((ROOT / "policies").glob("*.yaml"))
CHAT = ROOT / "policies" / "general-chat-eagle3.yaml"
MIXED = ROOT / "policies" / "mixed-fleet.yaml"
CODE = ROOT / "policies" / "code-slice.yaml"


@dataclass(frozen=True)
class Case:
    """`old` replaced by `new` in `source`; `field` and `reason` as `policy check` reports them.
    `cross_field`: a rule across fields, which admission checks with CEL (`x-kubernetes-
    validations`) rather than the OpenAPI schema."""

    old: str
    new: str
    field: str
    reason: str
    source: Path = CHAT
    cross_field: bool = False

    @property
    def id(self) -> str:
        return f"{self.source.stem}:{self.field}:{self.new.strip()[:24]}"

    def text(self) -> str:
        original = self.source.read_text()
        assert self.old in original, f"{self.old!r} not in {self.source.name}"
        return original.replace(self.old, self.new, 1)


CASES = [
    Case(
        "disableBelow: 0.55",
        "disableBelow: 1.55",
        "spec.acceptance.disableBelow",
        "less than or equal to 1",
    ),
    Case(
        "enableAbove: 0.60",
        "enableAbove: -0.1",
        "spec.acceptance.enableAbove",
        "greater than or equal to 0",
    ),
    Case(
        "    confidence: 0.95",
        "    confidance: 0.95",
        "spec.acceptance.confidance",
        "Extra inputs are not permitted",
    ),
    Case("  mode: enforce", "  mode: sometimes", "spec.mode", "enforce"),
    Case("kind: SpeculativeCanary", "kind: Canary", "kind", "SpeculativeCanary"),
    Case("    name: llama-3-1-8b-chat-canary\n", "", "spec.target.name", "Field required"),
    # cross-field rules: pydantic model validators here, CEL rules in the CRD
    Case(
        "enableAbove: 0.60",
        "enableAbove: 0.50",
        "spec.acceptance",
        "enableAbove (0.5) must not be below disableBelow",
        cross_field=True,
    ),
    Case(
        "num_speculative_tokens: 3",
        "num_speculative_tokens: 0",
        "spec.speculativeConfig",
        "num_speculative_tokens must be at least 1",
        cross_field=True,
    ),
    Case(
        "num_speculative_tokens: 3",
        'num_speculative_tokens: "3"',
        "spec.speculativeConfig",
        "must be an integer",
        cross_field=True,
    ),
    # what vLLM would refuse (alphagate.specconfig): the schema, policy check and CEL agree
    Case(
        "    model: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B\n",
        "",
        "spec.speculativeConfig",
        "without speculative model",
        cross_field=True,
    ),
    Case(
        "method: eagle3",
        "method: eagle4",
        "spec.speculativeConfig",
        "Input should be 'ngram'",
        cross_field=True,
    ),
    Case(
        "num_speculative_tokens: 3",
        "num_speculative_tokens: 300",
        "spec.speculativeConfig",
        "alphagate refuses K=300",
        cross_field=True,
    ),
    Case(
        "prompt_lookup_min: 2",
        "prompt_lookup_min: 6",
        "spec.speculativeConfig",
        "prompt_lookup_min=6 must be <= prompt_lookup_max=4",
        source=CODE,
        cross_field=True,
    ),
    Case(
        "num_speculative_tokens: 3",
        "num_speculative_tokens: 3\n    tensor_parallel_size: 2",
        "spec.speculativeConfig",
        "Please pass 'draft_tensor_parallel_size' instead",
        cross_field=True,
    ),
    Case(
        "method: eagle3",
        "method: 3",
        "spec.speculativeConfig",
        "method must be a string",
        cross_field=True,
    ),
    Case(
        "    metric: perToken",
        "    metric: perStepAbsolute",
        "spec.latency",
        "metric perStepAbsolute needs maxStepSeconds",
        cross_field=True,
    ),
    Case(
        "windowSeconds: 300",
        "windowSeconds: 20",
        "spec.timing",
        "windowSeconds must not be shorter than intervalSeconds",
        cross_field=True,
    ),
    Case(
        "maxSeconds: 86400",
        "maxSeconds: 600",
        "spec.timing.cooldown",
        "maxSeconds must not be below initialSeconds",
        cross_field=True,
    ),
    Case(
        "    prometheus:\n"
        "      # The Prometheus the controller's admin configured (alphagate run --config or\n"
        "      # --prometheus-url); a policy names it and never holds a URL or a credential.\n"
        "      endpoint: default\n      matchLabels: {namespace: llm}\n",
        "",
        "spec.source",
        "kind prometheus needs a `prometheus` block",
        cross_field=True,
    ),
    Case(
        "  mode: enforce\n",
        "  mode: enforce\n  promotion: {enabled: true}\n",
        "spec.promotion",
        "promotion enabled needs `stable`",
        cross_field=True,
    ),
    Case(
        "  mode: enforce\n",
        "  mode: enforce\n  draftLength: {tuning: {enabled: true, minK: 2, maxK: 1}}\n",
        "spec.draftLength.tuning",
        "maxK (1) must not be below minK (2)",
        cross_field=True,
    ),
    Case(
        "  mode: enforce\n",
        "  mode: enforce\n  draftLength: {tuning: {enabled: true, minK: 6, maxK: 8}}\n",
        "spec",
        "must lie within minK",
        cross_field=True,
    ),
    Case(
        "    - name: code\n",
        "    - name: chat\n",
        "spec",
        "slice names must be unique; repeated: chat",
        source=MIXED,
        cross_field=True,
    ),
    Case(
        "      deployment:\n        name: qwen-coder-canary\n        container: vllm\n",
        "",
        "spec",
        "aggregation perSlice needs a deployment on every slice",
        source=CODE,
        cross_field=True,
    ),
    Case(
        "        name: qwen-coder-canary\n        container: vllm\n  acceptance:",
        "        name: qwen-coder-canary\n        container: vllm\n"
        "    - name: code-long\n"
        "      canary:\n        matchLabels: {app: qwen-coder, role: canary, length: long}\n"
        "      baseline:\n        matchLabels: {app: qwen-coder, role: baseline}\n"
        "      deployment:\n        name: qwen-coder-canary\n        container: vllm\n"
        "  acceptance:",
        "spec",
        "aggregation perSlice needs its own deployment on every slice",
        source=CODE,
        cross_field=True,
    ),
    # the baseline is never flipped: target = baseline, or a slice naming it
    Case(
        "    name: llama-3-1-8b-chat-canary\n",
        "    name: llama-3-1-8b-chat-baseline\n",
        "spec",
        "target and baseline are the same Deployment 'llama-3-1-8b-chat-baseline'",
        cross_field=True,
    ),
    Case(
        "        name: qwen-coder-canary\n",
        "        name: qwen-coder-baseline\n",
        "spec",
        "slice code names the baseline Deployment 'qwen-coder-baseline'",
        source=CODE,
        cross_field=True,
    ),
    # label keys and values as the API server checks them: a ',' would split the selector
    Case(
        "matchLabels: {app: llama-3-1-8b, slice: chat, role: canary}",
        'matchLabels: {app: "llama-3-1-8b,tier", slice: chat, role: canary}',
        "spec.slices[0].canary.matchLabels",
        "value of app 'llama-3-1-8b,tier'",
    ),
    Case(
        "matchLabels: {app: llama-3-1-8b, slice: chat, role: baseline}",
        'matchLabels: {"app name": llama-3-1-8b, slice: chat, role: baseline}',
        "spec.slices[0].baseline.matchLabels",
        "key 'app name'",
    ),
    Case(
        "matchLabels: {app: llama-3-1-8b, slice: chat, role: canary}",
        'matchLabels: {app: llama-3-1-8b, "Example.COM/slice": chat, role: canary}',
        "spec.slices[0].canary.matchLabels",
        "key 'Example.COM/slice': the prefix",
    ),
    Case(
        "matchLabels: {app: llama-3-1-8b, slice: chat, role: canary}",
        'matchLabels: {app: llama-3-1-8b, slice: "chat!=x", role: canary}',
        "spec.slices[0].canary.matchLabels",
        "value of slice 'chat!=x'",
    ),
]

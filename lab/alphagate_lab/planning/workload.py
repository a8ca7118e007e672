"""The lesson's three reasons not to speculate, judged from a described workload (`plan`).

Live data judges the first of them in `alphagate.core.suitability`; before a deployment only a
description can, so this is the planner's, with the same typed findings.
"""

from __future__ import annotations

from dataclasses import dataclass

from alphagate.core.suitability import MIN_OUTPUT_TOKENS, Condition, Finding, Suitability


@dataclass(frozen=True, slots=True)
class Workload:
    """A described workload, for `plan` (every field optional: None is 'not said')."""

    mean_output_tokens: float | None = None
    concurrency: float | None = None
    offline: bool | None = None  # nobody waits for the tokens (batch jobs)
    specialised_domain: bool | None = None  # code, medical, legal ... not general chat
    domain_trained_head: bool | None = None  # the draft was trained on this domain


def assess(w: Workload, *, min_mean_tokens: float = MIN_OUTPUT_TOKENS) -> tuple[Suitability, ...]:
    """The three conditions for a described workload, in the lesson's order."""
    out: list[Suitability] = []
    m = w.mean_output_tokens
    if m is None:
        out.append(Suitability(Condition.SHORT_OUTPUTS, Finding.UNKNOWN, "output length not given"))
    elif m < min_mean_tokens:
        out.append(
            Suitability(
                Condition.SHORT_OUTPUTS,
                Finding.HOLDS,
                f"outputs of {m:g} tokens are under {min_mean_tokens:g}: the draft and verify "
                f"overhead dominate; serve the target alone",
                {"mean_output_tokens": m},
            )
        )
    else:
        out.append(
            Suitability(
                Condition.SHORT_OUTPUTS,
                Finding.CLEAR,
                f"outputs of {m:g} tokens are long enough",
                {"mean_output_tokens": m},
            )
        )
    c, off = w.concurrency, w.offline
    if off is None or c is None:
        out.append(
            Suitability(
                Condition.BATCH1_OFFLINE, Finding.UNKNOWN, "concurrency or offline not given"
            )
        )
    elif off and c <= 1:
        out.append(
            Suitability(
                Condition.BATCH1_OFFLINE,
                Finding.HOLDS,
                "batch-1 offline generation: latency does not matter, the plain target is the "
                "cheapest per token; do not speculate",
                {"concurrency": c},
            )
        )
    else:
        why = "online traffic" if not off else f"offline at concurrency {c:g}"
        out.append(
            Suitability(
                Condition.BATCH1_OFFLINE,
                Finding.CLEAR,
                f"{why}: latency matters or the batch is shared",
                {"concurrency": c},
            )
        )
    dom, head = w.specialised_domain, w.domain_trained_head
    if dom is None:
        out.append(
            Suitability(Condition.DOMAIN_WITHOUT_HEAD, Finding.UNKNOWN, "domain not described")
        )
    elif dom and head is not True:
        out.append(
            Suitability(
                Condition.DOMAIN_WITHOUT_HEAD,
                Finding.HOLDS,
                "a specialised domain without a domain-trained head: expect alpha 0.4-0.6, "
                "near or under break-even; train a head on this traffic first, or try n-gram "
                "if outputs copy from the prompt",
            )
        )
    else:
        why = "general traffic" if not dom else "the head is trained on this domain"
        out.append(Suitability(Condition.DOMAIN_WITHOUT_HEAD, Finding.CLEAR, why))
    return tuple(out)

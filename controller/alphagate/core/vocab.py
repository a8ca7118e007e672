"""The core's words: the enums every decision is spoken in (roles, verdicts, states, actions,
commands, check kinds, alerts, causes, guards, why data is missing). Code branches on these;
the reason text is for people. `core.model` re-exports them."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    CANARY = "canary"
    BASELINE = "baseline"


class Verdict(StrEnum):
    """Outcome of one check. Only FAIL flips; INCONCLUSIVE and ERROR hold."""

    PASS = "Pass"
    FAIL = "Fail"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class State(StrEnum):
    """Where a canary stands (the state diagram in `core.machine`)."""

    OFF = "Off"
    PROBING = "Probing"
    ON = "On"
    ROLLED_BACK = "RolledBack"
    PAUSED = "Paused"
    PROMOTED = "Promoted"


class Action(StrEnum):
    """What the shell must do after a decision."""

    ENABLE = "enable"
    DISABLE = "disable"
    HOLD = "hold"
    PROMOTE = "promote"


class Command(StrEnum):
    """A person's instruction (CLI or annotation). Overrides the policy; recorded as "manual"."""

    PAUSE = "pause"
    RESUME = "resume"
    ENABLE = "enable"
    DISABLE = "disable"
    PROMOTE = "promote"


class CheckKind(StrEnum):
    """What a check judged. Metric labels, status and Events derive from it, never from text."""

    ACCEPTANCE = "acceptance"  # alpha against the gate (combined, or one slice in perSlice)
    FLOOR = "floor"  # a slice's minAlpha veto in combined mode
    LATENCY = "latency"  # the P-quantile guard of one slice
    SOURCE = "source"  # the metrics read failed
    WINDOW = "window"  # the window may not be judged (rollout or warm-up)


class Alert(StrEnum):
    """A condition a person should hear about; the values are stable metric labels."""

    SOURCE_ERRORS = "source-errors"
    FLIP_BUDGET = "flip-budget"
    PROBE_STALLED = "probe-stalled"
    ROLLOUT_TIMEOUT = "rollout-timeout"
    # Probing or On with no conclusive verdict for staleness.afterSeconds: speculation runs
    # unchecked (endless Inconclusive or Error windows)
    VERDICT_STALE = "verdict-stale"


class Cause(StrEnum):
    """Why a transition happened: what Events, metrics and reports branch on (not the reason).

    UNKNOWN only appears on transitions recorded by a controller that did not store causes."""

    PROBE = "probe"  # Off/RolledBack -> Probing: a new canary, or the cooldown is over
    EARLY_REPROBE = "early-reprobe"  # the traffic mix shifted towards slices that did well
    POLICY_PASS = "policy-pass"  # a probe confirmed by consecutive passing windows
    POLICY_FAIL = "policy-fail"  # consecutive failing windows rolled speculation back
    FAIL_SAFE = "fail-safe"  # consecutive source errors with failSafe: disable
    STALE_FAIL_SAFE = "stale-fail-safe"  # no conclusive verdict for staleness.afterSeconds
    BAKED = "baked"  # on for bakeSeconds with a passing window: promoted
    SPEC_PAUSE = "spec-pause"  # spec.paused became true
    SPEC_RESUME = "spec-resume"  # spec.paused became false
    MANUAL = "manual"  # a person's command, carried out (or a no-op, still recorded)
    REFUSED = "refused"  # a person's command the machine refused (recorded, nothing changes)
    UNKNOWN = "unknown"


class Guard(StrEnum):
    """What stands between a person's command and the change: the guards that refused it
    (cause REFUSED) or that `--force` overrode (cause MANUAL, forced)."""

    FLIP_BUDGET = "flip-budget"  # timing.maxFlipsPerHour leaves no room for it and a rollback
    MIN_DWELL = "min-dwell"  # timing.minDwellSeconds since the last flip has not passed
    COOLDOWN = "cooldown"  # the rollback cooldown has not passed
    PROMOTION_DISABLED = "promotion-disabled"  # promote without promotion.enabled
    SPECULATION_OFF = "speculation-off"  # promote while the canary does not speculate
    SPEC_PAUSED = "spec-paused"  # resume while spec.paused is true


class NoData(StrEnum):
    """Why a canary that should speculate shows no drafts in a window: typed evidence of an
    Inconclusive acceptance check. Never read as "speculation off"."""

    # spec-decode series exist, every increment is zero: speculating, but no traffic
    NO_TRAFFIC = "no-traffic"
    # the series exist but the range holds fewer than two scrapes: increase() is empty
    SPARSE_SCRAPES = "sparse-scrapes"
    # no spec-decode series at all although speculation should run (rollout, wrong pods)
    NO_SPEC_SERIES = "no-spec-series"
    UNKNOWN = "unknown"  # no drafts; the source did not say why

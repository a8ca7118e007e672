"""The SpeculativeCanary policy schema: the single source of truth for the CRD.

These pydantic models define what a user may write (spec); the controller's status models are
in `kube/status/`. The CRD's OpenAPI schema is generated from them; YAML keys are camelCase as
in Kubernetes, Python attributes snake_case. This package validates and parses only: it reads
no files and talks to no API (the shell does). Callers import the schema from here.
"""

from alphagate.config.base import (
    API_VERSION,
    GROUP,
    KIND,
    MAX_SECONDS,
    MIN_INTERVAL_SECONDS,
    PLURAL,
    VERSION,
    IntervalSeconds,
    NonNegativeSeconds,
    PositiveSeconds,
    Ratio,
    StrictModel,
    TimeoutSeconds,
)
from alphagate.config.draft import DraftLength, DraftLengthTuning, OutputLength
from alphagate.config.enums import (
    Aggregation,
    ConfirmOn,
    FailSafe,
    LatencyMetric,
    Mode,
    SourceKind,
    WorkloadKind,
)
from alphagate.config.judging import (
    AcceptanceGate,
    Backoff,
    ErrorPolicy,
    LatencyGuard,
    Staleness,
    Timing,
)
from alphagate.config.source import (
    ADMIN_ONLY_SOURCE_FIELDS,
    SCRAPE_MEMORY_BUDGET,
    PrometheusSettings,
    ScrapeSettings,
    SourceSettings,
    scrape_page_cost,
)
from alphagate.config.spec import (
    ObjectMeta,
    SpeculativeCanary,
    SpeculativeCanarySpec,
    dump,
    message,
    parse,
)
from alphagate.config.targets import DeploymentRef, PodSelector, Promotion, Slice, WorkloadRef

__all__ = [
    "ADMIN_ONLY_SOURCE_FIELDS",
    "API_VERSION",
    "GROUP",
    "KIND",
    "MAX_SECONDS",
    "MIN_INTERVAL_SECONDS",
    "PLURAL",
    "SCRAPE_MEMORY_BUDGET",
    "VERSION",
    "AcceptanceGate",
    "Aggregation",
    "Backoff",
    "ConfirmOn",
    "DeploymentRef",
    "DraftLength",
    "DraftLengthTuning",
    "ErrorPolicy",
    "FailSafe",
    "IntervalSeconds",
    "LatencyGuard",
    "LatencyMetric",
    "Mode",
    "NonNegativeSeconds",
    "ObjectMeta",
    "OutputLength",
    "PodSelector",
    "PositiveSeconds",
    "PrometheusSettings",
    "Promotion",
    "Ratio",
    "ScrapeSettings",
    "Slice",
    "SourceKind",
    "SourceSettings",
    "SpeculativeCanary",
    "SpeculativeCanarySpec",
    "Staleness",
    "StrictModel",
    "TimeoutSeconds",
    "Timing",
    "WorkloadKind",
    "WorkloadRef",
    "dump",
    "message",
    "parse",
    "scrape_page_cost",
]

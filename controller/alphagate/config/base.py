"""What every policy model shares: the API names, bounded number types and the strict base."""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP: Final = "alphagate.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SpeculativeCanary"
PLURAL: Final = "speculativecanaries"

MAX_SECONDS: Final = 30 * 24 * 3600.0
"""No duration in a policy is longer than 30 days (and none is infinite or NaN)."""
MIN_INTERVAL_SECONDS: Final = 0.1
"""Every evaluation reads the source and the API: a shorter interval floods both (the demo
compresses its 2 s interval 20-fold: 0.1 s). The controller may set a higher floor."""

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
PositiveSeconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
NonNegativeSeconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
IntervalSeconds = Annotated[
    float, Field(ge=MIN_INTERVAL_SECONDS, le=MAX_SECONDS, allow_inf_nan=False)
]
TimeoutSeconds = Annotated[float, Field(ge=0.1, le=300.0, allow_inf_nan=False)]


class StrictModel(BaseModel):
    """Strict, camelCase, frozen: unknown fields are errors, not silently dropped. The base of
    every policy model, and of the controller's own configuration (`sources.endpoints`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=AliasGenerator(alias=to_camel),
        validate_default=True,
    )

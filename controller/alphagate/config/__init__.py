"""The SpeculativeCanary policy schema (moved into a package; `spec` holds it for now)."""

from alphagate.config.spec import *  # noqa: F403
from alphagate.config.spec import _field_path  # noqa: F401

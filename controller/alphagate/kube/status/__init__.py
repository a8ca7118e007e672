"""The SpeculativeCanary status (moved into a package; `resource` holds it for now)."""

from alphagate.kube.status.resource import *  # noqa: F403

"""The layout of an engine's arrays: one column per request, one row per field, so a tick is a
few vectorised passes over every request in flight. The engine, its admission and its
accounting all index the same rows, so they are named once, here.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Rows of the in-flight request array: decode tokens left, output length, own acceptance,
#: arrival time, first-token time (engine time), decode steps so far, the set alpha it was
#: drawn around (slice alpha + pod offset at admission, without the wander; a rare bad
#: request's own mean), and its slowness (1; ``tail_factor`` for a request the tail-only
#: latency regression slows: it decodes once every that many engine steps); last, the alpha
#: its own acceptance was really drawn around (the set alpha plus the pod's wander at
#: admission; a bad request's own mean).
REM, LEN, ACC, ARR, FIRST, STEPS, SET, SLOW, DRAWN = range(9)
ROWS = 9
#: Rows of a waiting request: output length and prompt tokens (NaN: drawn from the model).
Q_LEN, Q_PROMPT = range(2)
#: Rows of a tick's segment array: local start, steps used, local end, finished (0/1).
S_START, S_USED, S_END, S_DONE = range(4)


def no_requests() -> FloatArray:
    """An in-flight array with no request."""
    return np.zeros((ROWS, 0))

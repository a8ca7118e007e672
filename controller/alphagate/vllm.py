"""vLLM V1 metric names, labels, HELP texts and bucket bounds, exactly as a pod exposes them.

One place for the strings the simulator writes and the sources parse, so the two cannot drift.
Checked against a real vLLM capture (0.3x era): counters carry ``_total`` on their samples,
histograms expose ``_bucket``/``_count``/``_sum``, and each counter and histogram is followed by a
``<base>_created`` gauge in the classic text format. Names are the sample/family names a
Prometheus query uses (``vllm:...``). Scrapers that negotiate OpenMetrics without
``escaping=allow-utf-8`` receive ``vllm_...`` sample names instead; :func:`escaped` gives that
spelling and :func:`unescaped` maps it back.
"""

from typing import Final

PREFIX: Final = "vllm:"
ESCAPED_PREFIX: Final = "vllm_"

# --- speculative decoding counters (present only while --speculative-config is set) ---------
SPEC_DRAFTS: Final = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS: Final = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED: Final = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_PER_POS: Final = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
SPEC_PREFIX: Final = "vllm:spec_decode_"

# --- latency histograms (family base names; add BUCKET/COUNT/SUM suffixes) -------------------
ITL: Final = "vllm:inter_token_latency_seconds"
TPOT: Final = "vllm:request_time_per_output_token_seconds"
TTFT: Final = "vllm:time_to_first_token_seconds"
E2E: Final = "vllm:e2e_request_latency_seconds"
DECODE_TIME: Final = "vllm:request_decode_time_seconds"
QUEUE_TIME: Final = "vllm:request_queue_time_seconds"
# output length of each finished request (tokens, not seconds)
REQUEST_GENERATION_TOKENS: Final = "vllm:request_generation_tokens"

# --- request/token counters and gauges -------------------------------------------------------
GENERATION_TOKENS: Final = "vllm:generation_tokens_total"
PROMPT_TOKENS: Final = "vllm:prompt_tokens_total"
REQUEST_SUCCESS: Final = "vllm:request_success_total"
RUNNING: Final = "vllm:num_requests_running"
WAITING: Final = "vllm:num_requests_waiting"

# --- sample-name suffixes --------------------------------------------------------------------
TOTAL: Final = "_total"
CREATED: Final = "_created"
BUCKET: Final = "_bucket"
COUNT: Final = "_count"
SUM: Final = "_sum"

# --- label names -----------------------------------------------------------------------------
MODEL_NAME: Final = "model_name"
ENGINE: Final = "engine"
POSITION: Final = "position"
LE: Final = "le"
FINISHED_REASON: Final = "finished_reason"

FINISH_REASONS: Final = ("stop", "length", "abort", "error", "repetition")

# --- HELP texts (verbatim from vLLM) ---------------------------------------------------------
HELP: Final[dict[str, str]] = {
    SPEC_DRAFTS: "Number of spec decoding drafts.",
    SPEC_DRAFT_TOKENS: "Number of draft tokens.",
    SPEC_ACCEPTED: "Number of accepted tokens.",
    SPEC_PER_POS: "Accepted tokens per draft position.",
    ITL: "Histogram of inter-token latency in seconds.",
    TPOT: "Histogram of time_per_output_token_seconds per request.",
    TTFT: "Histogram of time to first token in seconds.",
    E2E: "Histogram of e2e request latency in seconds.",
    DECODE_TIME: "Histogram of time spent in DECODE phase for request.",
    QUEUE_TIME: "Histogram of time spent in WAITING phase for request.",
    REQUEST_GENERATION_TOKENS: "Number of generation tokens processed.",
    GENERATION_TOKENS: "Number of generation tokens processed.",
    PROMPT_TOKENS: "Number of prefill tokens processed.",
    REQUEST_SUCCESS: "Count of successfully processed requests.",
    RUNNING: "Number of requests in model execution batches.",
    WAITING: "Number of requests waiting to be processed.",
}

# --- default bucket upper bounds (finite; +Inf is implied) -----------------------------------
ITL_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
TPOT_BUCKETS: Final[tuple[float, ...]] = ITL_BUCKETS
TTFT_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
E2E_BUCKETS: Final[tuple[float, ...]] = REQUEST_LATENCY_BUCKETS
DECODE_TIME_BUCKETS: Final[tuple[float, ...]] = REQUEST_LATENCY_BUCKETS
QUEUE_TIME_BUCKETS: Final[tuple[float, ...]] = REQUEST_LATENCY_BUCKETS


def one_two_five_buckets(limit: float) -> tuple[float, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``limit`` (the model's
    max_model_len for the token-count histograms; 512 gives the capture's 1 ... 500)."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = float(m * 10**exponent)
            if value > limit:
                return tuple(out)
            out.append(value)
        exponent += 1


GENERATION_LENGTH_BUCKETS: Final[tuple[float, ...]] = one_two_five_buckets(8192)

HISTOGRAM_BUCKETS: Final[dict[str, tuple[float, ...]]] = {
    ITL: ITL_BUCKETS,
    TPOT: TPOT_BUCKETS,
    TTFT: TTFT_BUCKETS,
    E2E: E2E_BUCKETS,
    DECODE_TIME: DECODE_TIME_BUCKETS,
    QUEUE_TIME: QUEUE_TIME_BUCKETS,
    REQUEST_GENERATION_TOKENS: GENERATION_LENGTH_BUCKETS,
}


def base(name: str) -> str:
    """Family name as the text parser reports it: counters lose ``_total``."""
    return name[: -len(TOTAL)] if name.endswith(TOTAL) else name


def escaped(name: str) -> str:
    """The ``vllm_`` spelling a Prometheus 2 scrape stores under OpenMetrics underscore escaping."""
    return name.replace(":", "_")


def unescaped(name: str) -> str:
    """Map an escaped ``vllm_...`` name back to ``vllm:...``; other names pass unchanged."""
    if name.startswith(ESCAPED_PREFIX):
        return PREFIX + name[len(ESCAPED_PREFIX) :]
    return name

"""alphagate: gate vLLM speculative decoding on measured acceptance and tail latency."""

__version__ = "0.1.0"

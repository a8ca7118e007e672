"""Local sandbox parts: real processes (vLLM CPU servers, load) that stand in for a cluster."""

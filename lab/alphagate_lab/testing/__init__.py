"""Helpers that start real parts (Prometheus, ...) for tests, dashboard checks and the demo.

Nothing here imports pytest, so the demo can use the same helpers.
"""

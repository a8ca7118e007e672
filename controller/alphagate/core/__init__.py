"""The pure decision core: data and `now` in, decisions with evidence out.

Rules (enforced by an import-linter contract in pyproject.toml): no I/O, no clock, no
randomness, no logging, no network or Kubernetes libraries. Bad data is not an exception here:
it becomes an Inconclusive or Error verdict with a reason.
"""

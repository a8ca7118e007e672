"""The pure decision core: data and `now` in, decisions with evidence out.

Rules (enforced in pyproject.toml: an import-linter contract bans I/O, network and Kubernetes
libraries; ruff's banned-api bans `time`, `random`, `logging`, `os` and `datetime.now`): no
I/O, no clock, no randomness, no logging. Bad data is not an exception here:
it becomes an Inconclusive or Error verdict with a reason.
"""

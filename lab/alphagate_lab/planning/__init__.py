"""Planning tools behind `alphagate whatif` and `alphagate plan` (shell side).

What-if arithmetic is `speedup.py`, on the pure core's `alphagate.core.speedup`; this package
adds the seeded decode-loop simulation, the rollout-plan writer and the parsing of slice mixes
typed on the command line. It may use randomness (always seeded) but touches no cluster.
"""

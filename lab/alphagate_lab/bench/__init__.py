"""Benchmarks that print numbers and ratios measured side by side; they assert nothing.

``python -m alphagate_lab.bench`` runs every module here and ends with a table of what ran;
``python -m alphagate_lab.bench.<module>`` runs one (``--help`` for its options).
"""

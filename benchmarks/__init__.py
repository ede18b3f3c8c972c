"""Benchmarks for resolvent against a hand-written baseline and other DI libraries.

Run with ``python -m benchmarks`` (``--quick`` for a short run).
"""

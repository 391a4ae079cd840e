"""Benchmarks: retrieval quality on LoCoMo (``python -m bench.locomo``) and speed (``python -m bench.speed``)."""

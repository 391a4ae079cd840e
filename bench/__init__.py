"""Benchmarks, one script per question (``bench/README.md`` has the table): ``python -m bench.<question>``.
Labs and one-off measurements are in ``bench/lab/``, shared helpers in ``bench/support/``, datasets in
``bench/data/``."""

"""Labs, tuning replays and one-off measurements: ``python -m bench.lab.<name>`` (``bench/README.md`` lists them)."""

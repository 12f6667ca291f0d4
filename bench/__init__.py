"""Benchmarks, each run as `python bench/NAME.py` from the repository root; they import one another as `bench.NAME`."""

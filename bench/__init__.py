"""Benchmarks: the same workloads on this engine and on the transformers baseline, in one run.

Figures are printed, never asserted: timings on a shared CPU are too noisy to pass or fail on.
Entry point: `bench.cli.main` (`python -m bench`, `lfm-chat bench`).
"""

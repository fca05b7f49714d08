"""The side-by-side benchmark (bench/run.py); see docs/benchmarks.md."""

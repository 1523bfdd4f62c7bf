"""Benchmarks and the real-GPU check; each module runs as a script (see docs/benchmarks.md)."""

"""Built-in PyTorch workloads on synthetic data (demos, profiling, benchmarks).

``python -m worker.workloads NAME`` trains one under the runtime helper; see
:mod:`worker.workloads.registry` for the list and :mod:`worker.workloads.profile` for the
profiler behind ``hadar-worker profile``.
"""

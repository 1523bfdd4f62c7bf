"""Trace-driven simulator: trace readers, simulated cluster and clock, metrics, reports."""

"""Pure scheduling domain: views, plans, the throughput model, policies and plan diffs.

Imports no grpc, sqlalchemy or torch, so the daemon and the simulator run the same code.
"""

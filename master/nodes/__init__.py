"""Nodes: the worker registry (registration, heartbeats, lost nodes, drains) and the
pushes of assignments to workers.
"""

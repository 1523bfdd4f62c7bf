"""One module per scheduling policy.

A module registers a policy by defining ``NAME`` (its public name) and
``make(**params) -> Policy``; see :mod:`master.scheduling.policy`. Modules whose names
start with an underscore hold shared helpers and register nothing.
"""

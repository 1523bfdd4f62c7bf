"""Scheduling rounds in the daemon: the store read into a round's input, the policy's
decision (master.scheduling) persisted, its pushes handed over.
"""

"""The master process itself: leadership, units of work, change signals, metrics, logs
and systemd.
"""

"""``hctl``, the command line: entry point ``clients.cli.main:main``."""

"""Jobs: submission, life cycle, limits, holds, time limits, privacy, usage,
notifications and the relay of their output.
"""

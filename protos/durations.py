"""Durations as people write time limits: Slurm's --time forms and unit suffixes.

Both sides of the API read them: hctl and job files turn them into JobSpec.time_limit_s,
the master reads its `max_time_limit` and `default_time_limit` settings with them.
"""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# 30s, 90m, 2h, 1d, and sums of them: 1h30m, 2d12h.
_SUFFIXED = re.compile(r"(?:\d+[smhd])+")
_PART = re.compile(r"(\d+)([smhd])")
# Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_CLOCK = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")

# Longer than any duration written by hand; keeps int() off huge strings of digits.
_MAX_LENGTH = 64

FORMS = "30s, 90m, 2h, 1d, 1h30m, MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


def parse_duration(text: str) -> int:
    """Seconds in `text`. A bare number is minutes, as in Slurm. Raises ValueError saying
    which forms are accepted."""
    value = text.strip().lower()
    if len(value) > _MAX_LENGTH:
        raise ValueError(f"{text.strip()[:24]!r}...: too long for a duration; write it as {FORMS}")
    if _SUFFIXED.fullmatch(value):
        seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(value))
    else:
        match = _CLOCK.fullmatch(value)
        if match is None:
            raise ValueError(f"{text!r} is not a duration; write it as {FORMS}")
        days, first, second, third = match.groups()
        if days is not None:
            # D-H, D-H:M, D-H:M:S
            hours, minutes, secs = int(first), int(second or 0), int(third or 0)
            if hours > 23:
                raise ValueError(f"{text!r}: hours must be 0-23 after the days")
            seconds = int(days) * 86400 + hours * 3600 + minutes * 60 + secs
            _check_sexagesimal(text, minutes, secs)
        elif third is not None:
            hours, minutes, secs = int(first), int(second), int(third)
            _check_sexagesimal(text, minutes, secs)
            seconds = hours * 3600 + minutes * 60 + secs
        elif second is not None:
            minutes, secs = int(first), int(second)
            _check_sexagesimal(text, 0, secs)
            seconds = minutes * 60 + secs
        else:
            seconds = int(first) * 60
    if seconds <= 0:
        raise ValueError(f"{text!r}: a time limit must be longer than 0 seconds")
    return seconds


def _check_sexagesimal(text: str, minutes: int, seconds: int) -> None:
    if minutes > 59 or seconds > 59:
        raise ValueError(f"{text!r}: minutes and seconds must be 0-59")


def format_duration(seconds: float) -> str:
    """Slurm's way of showing a time: [D-]HH:MM:SS."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock

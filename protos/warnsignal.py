"""sbatch --signal's `SIG[@SECONDS]`: the signal a job is warned with before it is stopped.

Both hctl (parsing the flag and the job file's `signal` key) and the master (checking the
numbers it is sent) hold a warning to these rules.
"""

from __future__ import annotations

import signal

# sbatch's default when no time is given.
DEFAULT_BEFORE_S = 60
# The longest warning: the stop waits that long before SIGTERM, and the grace follows.
MAX_BEFORE_S = 600
# Neither can be caught, so neither can warn.
UNCATCHABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})


def check_signal(number: int) -> str | None:
    """Why `number` cannot warn a job, or None when it can."""
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"{number} is not a signal number"
    if sig in UNCATCHABLE:
        return f"{sig.name} cannot be caught, so it cannot warn a program"
    return None


def check_before(seconds: int) -> str | None:
    if not 1 <= seconds <= MAX_BEFORE_S:
        return f"the warning time must be 1 to {MAX_BEFORE_S} seconds, got {seconds}"
    return None


def parse_signal(text: str) -> tuple[int, int]:
    """(signal number, seconds before the stop) from `USR1@90`, `SIGUSR1`, `10@30`;
    ValueError says what is wrong."""
    raw = text.strip()
    if raw[:2].upper() in ("B:", "R:"):
        raise ValueError(
            f"{raw!r}: the B: and R: prefixes are not supported; every process of the job "
            "gets the signal (write SIG@SECONDS)"
        )
    name, at, seconds_text = raw.partition("@")
    name = name.strip()
    if not name:
        raise ValueError(f"{raw!r} names no signal (write SIG@SECONDS, e.g. USR1@60)")
    if name.isdigit():
        number = int(name)
    else:
        upper = name.upper()
        upper = upper if upper.startswith("SIG") else "SIG" + upper
        try:
            number = int(signal.Signals[upper])
        except KeyError:
            raise ValueError(f"{name!r} is not a signal name (e.g. USR1, SIGUSR2, TERM)") from None
    problem = check_signal(number)
    if problem:
        raise ValueError(problem)
    before = DEFAULT_BEFORE_S
    if at:
        if not seconds_text.strip().isdigit():
            raise ValueError(f"{seconds_text!r} after @ is not a number of seconds")
        before = int(seconds_text)
    problem = check_before(before)
    if problem:
        raise ValueError(problem)
    return number, before


def format_signal(number: int, before_s: int) -> str:
    """`USR1@60`, as --signal takes it."""
    try:
        name = signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        name = str(number)
    return f"{name}@{before_s}"

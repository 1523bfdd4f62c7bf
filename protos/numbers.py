"""Numbers as people write them, and the ranges the contract holds them in.

Both sides of the API use these ranges: the master refuses a JobSpec outside them, and hctl
refuses the same values before sending, as a usage error that names the flag or job file
key and the range. A flag's argparse ``type=`` comes from :func:`int_type`,
:func:`float_type` or :func:`seconds_type`; a value from elsewhere (a job file) is checked
with :func:`check_int`.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# What the store's INTEGER and BIGINT columns and protobuf's uint32 hold.
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1
# A job that failed this often will not pass on the next try; each retry holds GPUs others
# wait for.
MAX_RETRIES = 10
# Beyond any cluster's maximum time limit; keeps the value well inside the store's integer
# column. hctl's other durations in seconds (timeouts, intervals) share it.
SECONDS_MAX = 366 * 86400
TIME_LIMIT_MAX_S = SECONDS_MAX

_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
# int() of a long string of digits takes time quadratic in its length (and refuses more than
# 4300 digits); a number this long is outside every range here anyway.
_MAX_DIGITS = 40


@dataclass(frozen=True, slots=True)
class NumberRange:
    """Inclusive bounds (None: unbounded on that side); `above` makes the low bound
    exclusive (a timeout must be more than 0, however little)."""

    low: float | None
    high: float | None
    above: bool = False

    def __contains__(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high

    def __str__(self) -> str:
        low = None if self.low is None else _number(self.low)
        high = None if self.high is None else _number(self.high)
        if self.above:
            return f"more than {low}" + (f", up to {high}" if high is not None else "")
        if low is not None and high is not None:
            return f"{low}..{high}"
        return f"at least {low}" if low is not None else f"at most {high}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_int(text: str, bounds: NumberRange) -> int:
    """A whole number within `bounds`; ValueError says what is wrong and gives the range."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"{text!r} is not a whole number ({bounds})")
    digits = text.strip().lstrip("+-")
    if len(digits.lstrip("0")) > _MAX_DIGITS:
        raise ValueError(f"{text.strip()[:24]}... is out of range: {bounds}")
    return check_int(int(text), bounds)


def check_int(value: int, bounds: NumberRange) -> int:
    if value not in bounds:
        raise ValueError(f"{value} is out of range: {bounds}")
    return value


def parse_float(text: str, bounds: NumberRange) -> float:
    """A finite number within `bounds`; ValueError says what is wrong and gives the range."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number ({bounds})") from None
    if not math.isfinite(value):
        raise ValueError(f"{text.strip()} is not a finite number ({bounds})")
    if value not in bounds:
        raise ValueError(f"{text.strip()} is out of range: {bounds}")
    return value


def int_type(low: int | None, high: int | None) -> Callable[[str], int]:
    """An argparse ``type=`` for a whole number in low..high; argparse puts the flag's name
    in front of the message and exits 2."""
    bounds = NumberRange(low, high)
    return _argument(lambda text: parse_int(text, bounds), f"int_{low}_{high}")


def float_type(
    low: float | None, high: float | None, *, above: bool = False
) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite number in low..high (more than `low` when
    `above`)."""
    bounds = NumberRange(low, high, above)
    return _argument(lambda text: parse_float(text, bounds), f"float_{low}_{high}")


def seconds_type(high: float = SECONDS_MAX) -> Callable[[str], float]:
    """An argparse ``type=`` for seconds to wait: more than 0, at most `high`."""
    return float_type(0, high, above=True)


def _argument(parse: Callable[[str], T], name: str) -> Callable[[str], T]:
    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    # argparse names the type in some messages; the default would be "convert".
    convert.__name__ = name
    return convert

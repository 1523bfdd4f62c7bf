"""Time limits as people write them: Slurm's --time forms, unit suffixes, and refusals."""

from __future__ import annotations

import pytest

from protos.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("90m", 5400),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("2d12h", 216000),
        (" 2H ", 7200),
        ("45", 2700),  # a bare number is minutes, as in Slurm
        ("05:30", 330),  # MM:SS
        ("01:02:03", 3723),  # HH:MM:SS
        ("100:00:00", 360000),  # hours are not capped without days
        ("1-00:00:00", 86400),  # D-HH:MM:SS
        ("2-12", 216000),  # D-HH
        ("1-02:30", 95400),  # D-HH:MM
    ],
)
def test_accepted_forms(text: str, seconds: int) -> None:
    """Every form sbatch --time takes, and unit suffixes, give the same seconds Slurm means."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2x", "is not a duration"),
        ("", "is not a duration"),
        ("1:2:3:4", "is not a duration"),
        ("-5m", "is not a duration"),
        ("1.5h", "is not a duration"),
        ("01:60", "minutes and seconds must be 0-59"),
        ("01:61:00", "minutes and seconds must be 0-59"),
        ("1-24:00:00", "hours must be 0-23"),
        ("0s", "longer than 0 seconds"),
        ("00:00", "longer than 0 seconds"),
    ],
)
def test_malformed_or_empty_limits_are_refused_with_the_accepted_forms(
    text: str, message: str
) -> None:
    """A malformed limit raises ValueError saying what is wrong (and, for an unknown shape,
    which forms are accepted); zero is no limit to ask for."""
    with pytest.raises(ValueError, match=message) as raised:
        parse_duration(text)
    if "is not a duration" in message:
        assert "HH:MM:SS" in str(raised.value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "00:00:00"),
        (30, "00:00:30"),
        (3723, "01:02:03"),
        (90061, "1-01:01:01"),
        (29.6, "00:00:30"),
    ],
)
def test_format_is_slurms(seconds: float, text: str) -> None:
    """Durations print as Slurm prints time limits: [D-]HH:MM:SS."""
    assert format_duration(seconds) == text


def test_format_and_parse_round_trip() -> None:
    """What format_duration writes, parse_duration reads back to the same seconds."""
    for seconds in (1, 59, 61, 3599, 3600, 86399, 86400, 100000, 10 * 86400 + 5):
        assert parse_duration(format_duration(seconds)) == seconds

"""Every numeric flag of every hctl command takes only the values the master (or the command
itself) can use: anything else is a usage error, one line, exit 2, naming the flag and its
range, before any master is contacted."""

from __future__ import annotations

import argparse
import contextlib

import pytest

from clients.cli.command import ExitCode
from clients.cli.main import build_parser, main
from tests.unit.clients.test_parser import all_parsers

# No master listens there: a command that got past its flags would fail otherwise.
NOWHERE = ["--master", "127.0.0.1:1"]
SUBMIT = [*NOWHERE, "submit", "--workload", "resnet", "--iterations", "5"]
HUGE = "1" + "0" * 30


@pytest.mark.parametrize(
    ("argv", "flag", "bounds"),
    [
        ([*SUBMIT, "--gpus", "4294967297"], "--gpus", "1..4096"),
        ([*SUBMIT, "--gpus", "0"], "--gpus", "1..4096"),
        ([*SUBMIT, "--iterations", "18446744073709551616"], "--iterations", "1..1000000000000"),
        ([*SUBMIT, "--batch-size", "4294967296"], "--batch-size", "0..1048576"),
        ([*SUBMIT, "--priority", "5e-324"], "--priority", "0.001..1000"),
        ([*SUBMIT, "--retries", "99999999999"], "--retries", "0..10"),
        ([*SUBMIT, "--time", "99999999999999999999"], "--time", "1 second to 366 days"),
        ([*SUBMIT, "--gpu-memory", f"{HUGE}GiB"], "--gpu-memory", f"0..{2**50} bytes"),
        ([*SUBMIT, "--array", "0-3%99999999999"], "--array", "1..4000001"),
        ([*SUBMIT, "--after-ok", HUGE], "--after-ok", "1..9223372036854775807"),
        ([*SUBMIT, "--after-any", "1,0"], "--after-any", "1..9223372036854775807"),
        ([*SUBMIT, "-d", f"afterok:{HUGE}"], "--dependency", "1..9223372036854775807"),
        ([*SUBMIT, "--timeout", "inf"], "--timeout", "more than 0, up to 31622400"),
        ([*NOWHERE, "queue", "--watch", "--interval", "1e400"], "--interval", "more than 0"),
        ([*NOWHERE, "show", HUGE], "JOB", "1..9223372036854775807"),
        ([*NOWHERE, "cancel", "12_99999999"], "JOB", "0..4000000"),
        ([*NOWHERE, "logs", "1", "--tail", "4294967296"], "--tail", "0..4294967295"),
        ([*NOWHERE, "logs", "1", "--rank", "-1"], "--rank", "0..4294967295"),
        ([*NOWHERE, "logs", "1", "--attempt", "0"], "--attempt", "1..4294967295"),
        ([*NOWHERE, "wait", "1", "--timeout", "nan"], "--timeout", "more than 0"),
        ([*NOWHERE, "history", "-n", "0"], "--limit", "1..9223372036854775807"),
        ([*NOWHERE, "usage", "--since", HUGE], "--since", "year 1 at most"),
        (["local", "up", "--port", "65536"], "--port", "0..65535"),
        (["local", "up", "--round-seconds", "-1"], "--round-seconds", "more than 0"),
        (["local", "demo", "--scale", "0"], "--scale", "more than 0, up to 1000"),
        (["local", "demo", "--timeout", HUGE], "--timeout", "up to 31622400"),
        (["simulate", "--trace", "x", "--cluster", "v100:1", "--seed", HUGE], "--seed", "0..4294"),
    ],
)
def test_an_out_of_range_number_is_a_usage_error_naming_the_flag_and_its_range(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, bounds: str
) -> None:
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("error: argument "), err
    assert flag in err and bounds in err, err


def test_a_job_file_number_out_of_range_is_a_usage_error_naming_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    """The job file's keys have the flags' ranges."""
    for line, key, bounds in (
        ("gpus = 4294967297", "gpus", "1..4096"),
        ("batch_size = -1", "batch_size", "0..1048576"),
        ("retries = 11", "retries", "0..10"),
        ("gpu_memory = 9223372036854775808", "gpu_memory", f"0..{2**50} bytes"),
        ('time = "367d"', "time", "366 days"),
        ("after_ok = [9223372036854775808]", "after_ok", "1..9223372036854775807"),
    ):
        path = tmp_path / "job.toml"
        path.write_text(f'workload = "resnet"\niterations = 1\n{line}\n')
        assert main([*NOWHERE, "submit", "-f", str(path)]) == ExitCode.USAGE, line
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith(f"error: {key}: ") and bounds in err, err


def test_every_numeric_option_has_a_bounded_type() -> None:
    """No option of any command parses a bare int or float (which would take any size); and
    every option with a type, given a huge, a negative or a non-finite number, either
    accepts it or refuses it as a usage error."""
    parser = build_parser()
    for sub in all_parsers(parser):
        for action in sub._actions:
            flag = "/".join(action.option_strings) or action.dest
            assert action.type not in (int, float), f"{sub.prog} {flag}"
            if action.type is None or not callable(action.type):
                continue
            for text in (HUGE, f"-{HUGE}", "nan", "inf", "-1", "1e400"):
                with contextlib.suppress(argparse.ArgumentTypeError):
                    action.type(text)

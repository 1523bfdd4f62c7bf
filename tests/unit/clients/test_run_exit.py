"""The status `hctl run` exits with, as a shell would give the job's own."""

from __future__ import annotations

from clients.cli.run import exit_status


def test_the_jobs_exit_code_is_hctls_and_a_signal_reads_as_a_shell_reports_it() -> None:
    """0 and 3 pass through; killed by SIGKILL (-9) is 137; out of range is capped at 255;
    without a code of its own (cancelled before it ran) the fallback is used."""
    assert exit_status(0, 100) == 0
    assert exit_status(3, 100) == 3
    assert exit_status(-9, 100) == 137
    assert exit_status(1000, 100) == 255
    assert exit_status(None, 103) == 103

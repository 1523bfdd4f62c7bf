"""A worker agent started with SIGHUP, SIGINT and SIGQUIT ignored (under nohup, or as a
shell's background job) keeps ignoring them, but the programs it starts get them back at
their defaults: a job's shell hangs up with its terminal and a command can be interrupted."""

from __future__ import annotations

import subprocess
import sys

_PROBE = (
    "import signal, subprocess, sys\n"
    "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
    "if sys.argv[1] == 'handled':\n"
    "    from worker.agent.signals import handle_ignored\n"
    "    handle_ignored()\n"
    "    signal.raise_signal(signal.SIGHUP)  # still survived here\n"
    # The kernel's own record of what a new program ignores.
    "print(subprocess.run(['grep', 'SigIgn', '/proc/self/status'], capture_output=True,"
    " text=True, check=True).stdout.split()[1])\n"
)

# SIGHUP, SIGINT and SIGQUIT are signals 1, 2 and 3: the low three bits of the mask.
_THREE = 0b111


def _ignored_by_child(mode: str) -> int:
    """Which of the three a program started by the probe ignores (a bit each)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip(), 16) & _THREE


def test_a_job_gets_default_dispositions_where_the_agent_was_started_ignoring_them() -> None:
    """Without the agent's handling the child inherits all three ignored; with it the agent
    survives a SIGHUP and the child starts with all three at their defaults."""
    assert _ignored_by_child("inherited") == _THREE
    assert _ignored_by_child("handled") == 0

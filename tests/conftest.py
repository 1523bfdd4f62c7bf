"""Whatever way the suite was started, the programs the tests start get SIGHUP, SIGINT and
SIGQUIT at their defaults.

Started in a shell's background the suite ignores SIGINT and SIGQUIT, and under nohup
SIGHUP; an ignored signal stays ignored across exec, so the tests that interrupt a command
(Ctrl-C) or hang up a terminal would find it ignored in every program they start. The test
processes handle them the way the worker agent does (by doing nothing), which programs
started from them do not inherit.
"""

from __future__ import annotations

from worker.agent.signals import handle_ignored

handle_ignored()

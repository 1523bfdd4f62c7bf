"""An interactive task's pseudo-terminal on the worker, with real processes: window size,
typed bytes (Ctrl-C included), output, exit status and hang-ups."""

from __future__ import annotations

import os
import queue
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protos.hadar.v1 import common_pb2, worker_pb2
from tests.unit.worker.test_supervisor import APPLIED, Rig
from worker.agent.processes import SubprocessLauncher
from worker.agent.terminals import PtyProcess, TerminalBusyError, relay, start_session

DEADLINE_S = 10.0


def _session(tmp_path: Path, *argv: str, attach_wait_s: float = 60.0) -> PtyProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm", "MARK": "m1"}
    return start_session(sys.executable, list(argv), env, tmp_path, None, attach_wait_s)


def _inputs(
    feed: queue.Queue[common_pb2.TerminalInput | None],
) -> Iterator[common_pb2.TerminalInput]:
    while True:
        item = feed.get()
        if item is None:
            return
        yield item


def _run(
    process: PtyProcess,
    first: common_pb2.TerminalInput,
    feed: queue.Queue[common_pb2.TerminalInput | None],
) -> tuple[bytes, int | None]:
    shown = b""
    status: int | None = None
    deadline = time.monotonic() + DEADLINE_S
    for message in relay(
        process.terminal, first, _inputs(feed), lambda: time.monotonic() < deadline
    ):
        shown += message.data
        if message.exited:
            status = message.exit_code
    return shown, status


def test_the_window_size_reaches_the_command_and_its_exit_status_comes_last(
    tmp_path: Path,
) -> None:
    """The first message's window size is the terminal's (stty reads it), typed bytes are
    the command's input, its output comes back and the last message carries its exit
    status; it runs in the given directory with the given environment."""
    process = _session(tmp_path, "sh", "-c", "read line; stty size; pwd; echo $MARK-$line; exit 3")
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    feed.put(common_pb2.TerminalInput(data=b"typed\n"))
    first = common_pb2.TerminalInput(
        job_id=1, lease=1, size=common_pb2.WindowSize(rows=33, cols=101)
    )
    shown, status = _run(process, first, feed)
    assert b"33 101" in shown
    assert str(tmp_path).encode() in shown
    assert b"m1-typed" in shown
    assert status == 3


def test_the_command_waits_for_its_terminal_so_nothing_it_shows_is_lost(
    tmp_path: Path,
) -> None:
    """A command that would be over at once starts only when its terminal is attached: a
    reader that comes late still sees all it printed, and the window size it starts with
    is the attached terminal's."""
    process = _session(tmp_path, "sh", "-c", "stty size; echo quick")
    time.sleep(0.5)
    assert process.poll() is None
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    first = common_pb2.TerminalInput(
        job_id=1, lease=1, size=common_pb2.WindowSize(rows=21, cols=77)
    )
    shown, status = _run(process, first, feed)
    assert b"21 77" in shown and b"quick" in shown
    assert status == 0


def test_ctrl_c_typed_interrupts_the_foreground_command(tmp_path: Path) -> None:
    """A raw 0x03 typed into the terminal is turned into SIGINT by the terminal driver."""
    process = _session(tmp_path, "sh", "-c", "echo ready; exec cat")
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    deadline = time.monotonic() + DEADLINE_S
    status: int | None = None
    shown = b""
    first = common_pb2.TerminalInput(job_id=1, lease=1)
    for message in relay(
        process.terminal, first, _inputs(feed), lambda: time.monotonic() < deadline
    ):
        shown += message.data
        if b"ready" in shown and feed.empty():
            # Typed once the command runs on the terminal, as a person would.
            feed.put(common_pb2.TerminalInput(data=b"\x03"))
            shown = b""
        if message.exited:
            status = message.exit_code
    assert status == -signal.SIGINT


def test_a_resize_later_in_the_session_is_applied(tmp_path: Path) -> None:
    """A window size sent after the start is set on the terminal (TIOCSWINSZ)."""
    process = _session(tmp_path, "sh", "-c", "read line; stty size")
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    feed.put(common_pb2.TerminalInput(size=common_pb2.WindowSize(rows=12, cols=34)))
    feed.put(common_pb2.TerminalInput(data=b"\n"))
    first = common_pb2.TerminalInput(
        job_id=1, lease=1, size=common_pb2.WindowSize(rows=50, cols=60)
    )
    shown, status = _run(process, first, feed)
    assert b"12 34" in shown and status == 0


def test_the_end_of_the_input_hangs_up_the_session(tmp_path: Path) -> None:
    """A caller gone before the command exited (its input stream ends) hangs the terminal
    up: the command's session gets SIGHUP and the relay reports that end."""
    process = _session(tmp_path, "sh", "-c", "sleep 30")
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    feed.put(None)
    _, status = _run(process, common_pb2.TerminalInput(job_id=1, lease=1), feed)
    assert status == -signal.SIGHUP
    assert process.terminal.hung_up
    with pytest.raises(TerminalBusyError):
        process.terminal.attach()


def test_a_session_nobody_attaches_to_is_hung_up(tmp_path: Path) -> None:
    """A session whose owner never attaches does not hold its GPUs: it is hung up after
    the attach wait."""
    process = _session(tmp_path, "sh", "-c", "sleep 30", attach_wait_s=0.2)
    deadline = time.monotonic() + DEADLINE_S
    while process.poll() is None:
        assert time.monotonic() < deadline, "the unattended session was not hung up"
        time.sleep(0.05)
    assert process.poll() == -signal.SIGHUP


def test_one_reader_at_a_time(tmp_path: Path) -> None:
    """A second attach to a terminal that has a reader is refused."""
    process = _session(tmp_path, "sh", "-c", "sleep 30")
    process.terminal.attach()
    with pytest.raises(TerminalBusyError, match="attached already"):
        process.terminal.attach()
    process.terminal.hang_up()
    deadline = time.monotonic() + DEADLINE_S
    while process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.terminal.close()


def _interactive(job: int, argv: list[str], workdir: Path) -> worker_pb2.TaskAssignment:
    spec = common_pb2.JobSpec(name="session", num_gpus=2, interactive=True, workdir=str(workdir))
    spec.command.argv.extend(argv)
    return worker_pb2.TaskAssignment(
        job_id=job,
        lease=1,
        action=worker_pb2.ASSIGNMENT_ACTION_START,
        spec=spec,
        gpu_indices=[0, 1],
        gpu_type="v100",
    )


def _real_rig(tmp_path: Path) -> Rig:
    rig = Rig(tmp_path)
    rig.launcher = SubprocessLauncher(sys.executable)  # type: ignore[assignment]
    rig.supervisor = rig.make()
    return rig


def test_an_interactive_task_runs_one_command_on_a_terminal_with_all_its_gpus(
    tmp_path: Path,
) -> None:
    """The job's first task starts its command once, on a terminal, seeing every GPU of the
    task as any job does; its exit status is the task's."""
    rig = _real_rig(tmp_path)
    argv = ["sh", "-c", "read x; echo gpus=$CUDA_VISIBLE_DEVICES rank=$RANK; exit 4"]
    assert rig.supervisor.apply(_interactive(7, argv, tmp_path)).outcome == APPLIED
    terminal = rig.supervisor.terminal(7, 1)
    assert terminal is not None
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    feed.put(common_pb2.TerminalInput(data=b"\n"))
    shown = b""
    deadline = time.monotonic() + DEADLINE_S
    first = common_pb2.TerminalInput(job_id=7, lease=1)
    for message in relay(terminal, first, _inputs(feed), lambda: time.monotonic() < deadline):
        shown += message.data
        if message.exited:
            assert message.exit_code == 4
    assert b"gpus=0,1 rank=0" in shown
    deadline = time.monotonic() + DEADLINE_S
    while rig.supervisor.running_keys():
        assert time.monotonic() < deadline
        rig.supervisor.poll()
        time.sleep(0.05)
    (report,) = rig.state.pending_exits()
    assert (report.kind, report.exit_code) == (common_pb2.EXIT_KIND_FAILED, 4)


def test_a_stop_tells_the_terminal_why_and_hangs_the_session_up(tmp_path: Path) -> None:
    """Stopped (its time limit), the session's terminal shows the reason as a `hadar:` line
    and the shell gets the hang-up it obeys (not SIGTERM, which an interactive shell
    ignores); the task is reported stopped, not failed."""
    rig = _real_rig(tmp_path)
    rig.supervisor.apply(_interactive(8, ["sh", "-c", "echo ready; sleep 30"], tmp_path))
    terminal = rig.supervisor.terminal(8, 1)
    assert terminal is not None
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    shown = b""
    status: int | None = None
    deadline = time.monotonic() + DEADLINE_S
    first = common_pb2.TerminalInput(job_id=8, lease=1)
    for message in relay(terminal, first, _inputs(feed), lambda: time.monotonic() < deadline):
        shown += message.data
        if b"ready" in shown and not rig.supervisor.stop(8, reason="time limit 1m reached"):
            raise AssertionError("nothing to stop")
        if message.exited:
            status = message.exit_code
    assert b"hadar: the session is ending: time limit 1m reached" in shown
    assert status == -signal.SIGHUP
    deadline = time.monotonic() + DEADLINE_S
    while rig.supervisor.running_keys():
        assert time.monotonic() < deadline
        rig.supervisor.poll()
        time.sleep(0.05)
    (report,) = rig.state.pending_exits()
    assert report.kind == common_pb2.EXIT_KIND_KILLED
    assert report.signal == signal.SIGHUP


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_a_root_agent_runs_the_session_as_the_user_on_a_terminal_they_own(
    tmp_path: Path,
) -> None:
    """Started by a root agent, the command runs as the job's user, and the terminal it
    has is that user's (as a login's is), not root's."""
    nobody = 65534
    env = {"PATH": "/usr/bin:/bin"}
    process = start_session(
        sys.executable,
        ["sh", "-c", 'echo uid=$(id -u) owner=$(stat -c %u "$(tty)")'],
        env,
        Path("/"),
        (nobody, nobody, (nobody,)),
    )
    feed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
    shown, status = _run(process, common_pb2.TerminalInput(job_id=1, lease=1), feed)
    assert f"uid={nobody} owner={nobody}".encode() in shown, shown
    assert status == 0

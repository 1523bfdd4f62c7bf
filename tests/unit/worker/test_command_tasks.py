"""The supervisor and plain commands: the warning signal before a stop, preemptible
commands, the environment and directory a command gets, and a runtime's ContractError
reported as a failure no retry can pass."""

from __future__ import annotations

import signal
from pathlib import Path

from protos.hadar.v1 import common_pb2, worker_pb2
from tests.unit.worker.test_supervisor import APPLIED, FAILED, STOP, Rig
from worker.agent.supervisor import contract_error_file
from worker.runtime import contract


def command(
    job: int,
    lease: int,
    action: int = worker_pb2.ASSIGNMENT_ACTION_START,
    **spec_fields: object,
) -> worker_pb2.TaskAssignment:
    spec = common_pb2.JobSpec(name="cmd", num_gpus=1, **spec_fields)  # type: ignore[arg-type]
    spec.command.argv.extend(["python", "train.py"])
    return worker_pb2.TaskAssignment(
        job_id=job,
        lease=lease,
        action=action,  # type: ignore[arg-type]
        spec=spec,
        gpu_indices=[0],
        gpu_type="v100",
    )


def test_a_preemption_warns_then_terminates_then_kills(tmp_path: Path) -> None:
    """With a warning signal, a STOP sends it at once, SIGTERM its time later and SIGKILL
    after the grace; the warning alone does not end the stop early."""
    rig = Rig(tmp_path)
    rig.launcher.on_sigterm = None
    spec = {"preemptible": True, "warn_signal": int(signal.SIGUSR1), "warn_before_s": 20}
    assert rig.supervisor.apply(command(1, 1, **spec)).outcome == APPLIED
    (process,) = rig.launcher.processes
    stop = command(1, 1, action=STOP, **spec)
    stop.grace_s = 10.0
    assert rig.supervisor.apply(stop).outcome == APPLIED
    assert process.signals == [signal.SIGUSR1]
    rig.clock.advance(19.9)
    rig.supervisor.poll()
    assert process.signals == [signal.SIGUSR1]
    rig.clock.advance(0.2)
    rig.supervisor.poll()
    assert process.signals == [signal.SIGUSR1, signal.SIGTERM]
    rig.clock.advance(10.0)
    rig.supervisor.poll()
    assert process.signals == [signal.SIGUSR1, signal.SIGTERM, signal.SIGKILL]
    rig.supervisor.poll()
    assert rig.exits() == {(1, 1): common_pb2.EXIT_KIND_KILLED}


def test_a_program_ended_by_its_warning_is_stopped_not_failed(tmp_path: Path) -> None:
    """A program that does not catch its warning signal dies of it: that is the stop it was
    asked to take, not a failure."""
    rig = Rig(tmp_path)
    spec = {"preemptible": True, "warn_signal": int(signal.SIGUSR1), "warn_before_s": 20}
    rig.supervisor.apply(command(1, 1, **spec))
    (process,) = rig.launcher.processes
    rig.supervisor.apply(command(1, 1, action=STOP, **spec))
    process.exit(-signal.SIGUSR1)
    rig.supervisor.poll()
    (report,) = rig.state.pending_exits()
    assert report.kind != common_pb2.EXIT_KIND_FAILED


def test_a_cancel_kills_without_a_warning(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    spec = {"warn_signal": int(signal.SIGUSR1), "warn_before_s": 20}
    rig.supervisor.apply(command(1, 1, **spec))
    (process,) = rig.launcher.processes
    rig.supervisor.stop(1, graceful=False)
    assert process.signals == [signal.SIGKILL]


def test_only_a_preemptible_command_takes_a_stop_assignment(tmp_path: Path) -> None:
    """A command that did not ask to be preemptible refuses STOP as before; one that did
    stops."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(command(1, 1, preemptible=False))
    assert rig.supervisor.apply(command(1, 1, action=STOP, preemptible=False)).outcome == FAILED
    rig.supervisor.apply(command(2, 1, preemptible=True))
    assert rig.supervisor.apply(command(2, 1, action=STOP, preemptible=True)).outcome == APPLIED
    assert rig.launcher.processes[1].signals == [signal.SIGTERM]


def test_a_command_gets_its_directory_and_no_unknown_iterations(tmp_path: Path) -> None:
    """PWD names the workdir, as a shell there would; a command of unknown length is told no
    iteration count; the user's variables reach the process."""
    rig = Rig(tmp_path)
    workdir = tmp_path / "proj"
    workdir.mkdir()
    rig.supervisor.apply(command(1, 1, workdir=str(workdir), env={"LR": "0.1"}))
    (process,) = rig.launcher.processes
    assert process.spec.env["PWD"] == str(workdir)
    assert process.spec.env["LR"] == "0.1"
    assert contract.TOTAL_ITERATIONS not in process.spec.env
    assert process.spec.env[contract.ERROR_FILE].endswith("contract-error-rank0.txt")


def test_a_contract_error_is_reported_as_such(tmp_path: Path) -> None:
    """A rank that failed after its runtime wrote a ContractError to its error file is
    reported with contract_error; an ordinary failure is not."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(command(1, 1))
    rig.supervisor.apply(command(2, 1))
    first, second = rig.launcher.processes
    error_file = Path(first.spec.env[contract.ERROR_FILE])
    assert error_file == contract_error_file(error_file.parent, 0)
    error_file.write_text("HADAR_GLOBAL_BATCH_SIZE is not set\n")
    first.exit(1)
    second.exit(1)
    rig.supervisor.poll()
    reports = {r.job_id: r for r in rig.state.pending_exits()}
    assert reports[1].kind == common_pb2.EXIT_KIND_FAILED and reports[1].contract_error
    assert reports[2].kind == common_pb2.EXIT_KIND_FAILED and not reports[2].contract_error


def test_a_root_agent_names_the_jobs_user_whatever_the_exported_shell_said(
    tmp_path: Path,
) -> None:
    """HOME, USER and LOGNAME are those of the account the job runs as, even when the
    submitted environment (an exported shell's) carries others; its other variables stay."""
    rig = Rig(tmp_path, root=True)
    exported = {"HOME": "/root", "USER": "root", "LOGNAME": "root", "LR": "0.1"}
    assignment = command(1, 1, env=exported)
    assignment.user = "alice"
    assert rig.supervisor.apply(assignment).outcome == APPLIED
    (process,) = rig.launcher.processes
    env = process.spec.env
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == ("/home/alice", "alice", "alice")
    assert env["LR"] == "0.1"

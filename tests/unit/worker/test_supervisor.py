"""The supervisor with fake processes, a fake clock and fake users: fencing, grace and
escalation, failures, ordering of leases, running as the submitting user, durable exits."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from protos.hadar.v1 import common_pb2, worker_pb2
from worker.agent.clock import FakeClock
from worker.agent.processes import FakeLauncher, RunAs, is_process_of
from worker.agent.state import RunningTaskRecord, StateStore
from worker.agent.supervisor import Supervisor, SupervisorConfig
from worker.agent.users import FakeUsers, shut_out
from worker.gpus import FakeGpuProvider
from worker.runtime.contract import ProgressRecord

APPLIED = worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
STALE = worker_pb2.ASSIGNMENT_OUTCOME_STALE
FAILED = worker_pb2.ASSIGNMENT_OUTCOME_FAILED
START = worker_pb2.ASSIGNMENT_ACTION_START
EXTEND = worker_pb2.ASSIGNMENT_ACTION_EXTEND
STOP = worker_pb2.ASSIGNMENT_ACTION_STOP


class Rig:
    def __init__(self, tmp_path: Path, root: bool = False) -> None:
        self.tmp_path = tmp_path
        self.clock = FakeClock()
        self.launcher = FakeLauncher()
        self.users = FakeUsers(
            root,
            {
                "alice": RunAs("alice", 1001, 1001, (1001, 27), "/home/alice"),
                "root": RunAs("root", 0, 0, (0,), "/root"),
            },
        )
        self.state = StateStore(tmp_path / "state")
        self.exits_signalled = 0
        self.supervisor = self.make()

    def make(
        self, allow_root_jobs: bool = False, master_state: Callable[[], str] = lambda: ""
    ) -> Supervisor:
        def on_exit() -> None:
            self.exits_signalled += 1

        return Supervisor(
            SupervisorConfig(
                node="n1",
                state_dir=self.tmp_path / "state",
                jobs_dir=self.tmp_path / "jobs",
                checkpoint_root=self.tmp_path / "ckpt",
                python="/usr/bin/python3",
                grace_s=30.0,
                workloads=frozenset({"resnet"}),
                allow_root_jobs=allow_root_jobs,
            ),
            FakeGpuProvider.from_spec("v100:2,k80:2", reference_speed=1.0).discover(),
            self.launcher,
            self.clock,
            self.state,
            self.users,
            on_exit=on_exit,
            master_state=master_state,
        )

    def exits(self) -> dict[tuple[int, int], common_pb2.ExitKind]:
        return {(e.job_id, e.lease): e.kind for e in self.state.pending_exits()}


def start(
    job: int, lease: int, gpus: tuple[int, ...] = (0,), action: int = START, **fields: object
) -> worker_pb2.TaskAssignment:
    spec = common_pb2.JobSpec(name="j", num_gpus=len(gpus), iterations=100)
    spec.workload.name = "resnet"
    return worker_pb2.TaskAssignment(
        job_id=job,
        lease=lease,
        action=action,  # type: ignore[arg-type]
        spec=spec,
        gpu_indices=list(gpus),
        gpu_type="v100",
        **fields,  # type: ignore[arg-type]
    )


def test_stop_sends_sigterm_then_sigkill_after_the_grace(tmp_path: Path) -> None:
    """A process that ignores SIGTERM gets SIGKILL only once the grace period has passed."""
    rig = Rig(tmp_path)
    rig.launcher.on_sigterm = None
    assert rig.supervisor.apply(start(1, 1)).outcome == APPLIED
    (process,) = rig.launcher.processes
    assert rig.supervisor.stop(1, grace_s=10.0)
    assert process.signals == [signal.SIGTERM]
    rig.clock.advance(9.9)
    rig.supervisor.poll()
    assert process.signals == [signal.SIGTERM]
    rig.clock.advance(0.2)
    rig.supervisor.poll()
    assert process.signals == [signal.SIGTERM, signal.SIGKILL]
    rig.supervisor.poll()
    assert rig.exits() == {(1, 1): common_pb2.EXIT_KIND_KILLED}
    assert rig.exits_signalled == 1
    assert rig.supervisor.running_keys() == []


def test_exit_zero_after_sigterm_without_record_is_stopped(tmp_path: Path) -> None:
    """A managed process that exits 0 after SIGTERM without an exit record: STOPPED."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 1))
    rig.supervisor.stop(1)
    rig.supervisor.poll()
    assert rig.exits() == {(1, 1): common_pb2.EXIT_KIND_STOPPED}


def test_fencing_survives_a_restart(tmp_path: Path) -> None:
    """Leases applied are durable: a new supervisor on the same state refuses older ones."""
    rig = Rig(tmp_path)
    assert rig.supervisor.apply(start(1, 5)).outcome == APPLIED
    assert rig.supervisor.apply(start(1, 5)).outcome == APPLIED
    assert len(rig.launcher.processes) == 1
    assert rig.supervisor.apply(start(1, 4)).outcome == STALE
    rig.state = StateStore(tmp_path / "state")
    again = rig.make()
    result = again.apply(start(1, 3))
    assert result.outcome == STALE
    assert "older than lease 5" in result.message


def test_newer_lease_waits_for_the_older_one_to_stop(tmp_path: Path) -> None:
    """A START with a newer lease stops the older task first, then starts."""
    rig = Rig(tmp_path)
    rig.launcher.on_sigterm = None
    rig.supervisor.apply(start(1, 1, gpus=(0,)))
    result = rig.supervisor.apply(start(1, 2, gpus=(1,), grace_s=5.0))
    assert result.outcome == APPLIED
    assert "starts when lease 1" in result.message
    old = rig.launcher.processes[0]
    assert old.signals == [signal.SIGTERM]
    assert len(rig.launcher.processes) == 1
    states = {(t.lease, t.state) for t in rig.supervisor.snapshot()}
    assert states == {(1, common_pb2.TASK_STATE_STOPPING), (2, common_pb2.TASK_STATE_STARTING)}
    rig.clock.advance(6)
    rig.supervisor.poll()  # kills the old one
    rig.supervisor.poll()  # reaps it and starts the new one
    assert len(rig.launcher.processes) == 2
    assert rig.launcher.processes[1].spec.env["HADAR_LEASE"] == "2"
    assert rig.exits() == {(1, 1): common_pb2.EXIT_KIND_KILLED}


def test_failed_rank_stops_the_others_and_fails_the_task(tmp_path: Path) -> None:
    """One rank exiting non-zero SIGTERMs its siblings; the task is FAILED with that code."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 1, gpus=(0, 1)))
    first, second = rig.launcher.processes
    second.exit(7)
    rig.supervisor.poll()
    assert first.signals == [signal.SIGTERM]
    rig.supervisor.poll()
    (report,) = rig.state.pending_exits()
    assert report.kind == common_pb2.EXIT_KIND_FAILED
    assert report.exit_code == 7
    assert report.message.startswith("rank 1: exit code 7")


def test_signal_death_not_asked_for_is_a_failure(tmp_path: Path) -> None:
    """A process killed by a signal nobody sent it (OOM killer) is FAILED with the signal."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 1))
    rig.launcher.processes[0].exit(-signal.SIGKILL)
    rig.supervisor.poll()
    (report,) = rig.state.pending_exits()
    assert report.kind == common_pb2.EXIT_KIND_FAILED
    assert report.signal == signal.SIGKILL
    assert not report.HasField("exit_code")


def test_extend_moves_the_task_to_the_new_lease(tmp_path: Path) -> None:
    """EXTEND with a newer lease re-tags the running task; without a task it fails."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 1))
    assert rig.supervisor.apply(start(1, 2, action=EXTEND)).outcome == APPLIED
    assert rig.supervisor.running_keys() == [(1, 2)]
    assert rig.supervisor.apply(start(1, 1)).outcome == STALE
    missing = rig.supervisor.apply(start(9, 1, action=EXTEND))
    assert missing.outcome == FAILED
    assert "no running task of job 9" in missing.message


def test_stop_assignment_is_idempotent(tmp_path: Path) -> None:
    """STOP stops the task; repeating it, or stopping nothing, is APPLIED."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 1))
    assert rig.supervisor.apply(start(1, 1, action=STOP)).outcome == APPLIED
    rig.supervisor.poll()
    assert rig.supervisor.apply(start(1, 1, action=STOP)).outcome == APPLIED
    assert rig.supervisor.apply(start(2, 1, action=STOP)).outcome == APPLIED
    assert rig.exits() == {(1, 1): common_pb2.EXIT_KIND_STOPPED}


def test_spawn_failure_is_reported_and_a_resend_retries(tmp_path: Path) -> None:
    """A START whose process cannot start fails with the reason; the resend tries again."""
    rig = Rig(tmp_path)
    rig.launcher.fail_with = FileNotFoundError(2, "No such file", "python9")
    failed = rig.supervisor.apply(start(1, 1))
    assert failed.outcome == FAILED
    assert "cannot start" in failed.message
    rig.launcher.fail_with = None
    assert rig.supervisor.apply(start(1, 1)).outcome == APPLIED
    assert rig.supervisor.running_keys() == [(1, 1)]


def test_workload_argv_and_environment(tmp_path: Path) -> None:
    """Workloads run as `python -m worker.workloads NAME` with paced fake GPUs on the CPU."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(3, 1, gpus=(2, 3), accumulation_steps=2))
    first, second = rig.launcher.processes
    assert list(first.spec.argv) == ["/usr/bin/python3", "-m", "worker.workloads", "resnet"]
    assert first.spec.env["HADAR_FAKE_GPU_SPEED"] == "0.25"
    assert first.spec.env["HADAR_DEVICE"] == "cpu"
    assert first.spec.env["HADAR_ACCUMULATION_STEPS"] == "2"
    assert first.spec.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert [p.spec.env["LOCAL_RANK"] for p in (first, second)] == ["0", "1"]
    assert first.spec.env["WORLD_SIZE"] == "2"
    assert first.spec.env["HADAR_CHECKPOINT_DIR"] == str(tmp_path / "ckpt" / "job-3")
    assert first.spec.cwd == tmp_path / "jobs" / "job-3"
    assert first.spec.run_as is None


def test_root_runs_as_the_submitting_user_or_refuses(tmp_path: Path) -> None:
    """As root: the job's user identity and HOME; an unknown or missing user is refused."""
    rig = Rig(tmp_path, root=True)
    assert rig.supervisor.apply(start(1, 1, user="alice")).outcome == APPLIED
    (process,) = rig.launcher.processes
    assert process.spec.run_as is not None
    assert process.spec.run_as.uid == 1001
    assert process.spec.env["HOME"] == "/home/alice"
    assert process.spec.env["USER"] == "alice"
    unknown = rig.supervisor.apply(start(2, 1, user="mallory"))
    assert unknown.outcome == FAILED
    assert "no Unix user 'mallory'" in unknown.message
    assert unknown.unknown_user == "mallory"
    nobody = rig.supervisor.apply(start(3, 1))
    assert nobody.outcome == FAILED
    assert "names no user" in nobody.message
    assert nobody.unknown_user == ""


def test_submitted_checkpoint_dir_is_made_as_the_job_s_user(tmp_path: Path) -> None:
    """A checkpoint_dir the submitter named is made through the launcher as the job's user,
    and a refusal fails the start naming checkpoint_dir; the agent's default one is not."""
    rig = Rig(tmp_path, root=True)
    mine = tmp_path / "alice" / "ckpt"
    a = start(1, 1, user="alice", checkpoint_dir=str(mine))
    a.spec.checkpoint_dir = str(mine)
    assert rig.supervisor.apply(a).outcome == APPLIED
    assert [(path, who.name if who else None) for path, who in rig.launcher.directories] == [
        (mine, "alice")
    ]
    assert rig.supervisor.apply(start(2, 1, user="alice")).outcome == APPLIED
    assert len(rig.launcher.directories) == 1
    assert (tmp_path / "ckpt" / "job-2").is_dir()

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    linked = start(3, 1, user="alice", checkpoint_dir=str(tmp_path / "link" / "ckpt"))
    linked.spec.checkpoint_dir = linked.checkpoint_dir
    refused = rig.supervisor.apply(linked)
    assert refused.outcome == FAILED
    assert refused.message.startswith("checkpoint_dir: ")
    assert "is a symbolic link" in refused.message
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_root_agent_refuses_jobs_of_root_unless_allowed(tmp_path: Path) -> None:
    """A job submitted as root is refused with a message naming the setting; with
    allow_root_jobs it runs as root."""
    rig = Rig(tmp_path, root=True)
    refused = rig.supervisor.apply(start(1, 1, user="root"))
    assert refused.outcome == FAILED
    assert "allow_root_jobs" in refused.message
    assert rig.launcher.processes == []
    assert rig.supervisor.apply(start(2, 1, user="alice")).outcome == APPLIED

    allowed = Rig(tmp_path / "allowed", root=True)
    allowed.supervisor = allowed.make(allow_root_jobs=True)
    assert allowed.supervisor.apply(start(1, 1, user="root")).outcome == APPLIED
    (process,) = allowed.launcher.processes
    assert process.spec.run_as is not None
    assert process.spec.run_as.uid == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.ClearField("gpu_indices"), "no GPU indices"),
        (lambda a: a.gpu_indices.extend([0]), "GPU indices repeat"),
        (lambda a: a.local_batch_sizes.extend([8, 8]), "2 local batch sizes for 1 GPUs"),
        (lambda a: setattr(a.spec, "workdir", "/no/such/dir"), "workdir /no/such/dir"),
        (lambda a: a.spec.script.argv.extend([]) or a.spec.ClearField("workload"), "program"),
    ],
)
def test_bad_starts_are_refused(tmp_path: Path, change: object, message: str) -> None:
    """Each malformed START is FAILED with a message naming the problem."""
    rig = Rig(tmp_path)
    a = start(1, 1)
    assert callable(change)
    change(a)
    result = rig.supervisor.apply(a)
    assert result.outcome == FAILED
    assert message in result.message
    assert rig.launcher.processes == []


def test_unhealthy_gpu_is_refused(tmp_path: Path) -> None:
    """Nothing starts on a GPU that NVML reports unhealthy."""
    rig = Rig(tmp_path)
    provider = FakeGpuProvider.from_spec("v100:1")
    provider.mark_unhealthy(0, "XID 79")
    rig.supervisor.update_gpus(provider.discover())
    result = rig.supervisor.apply(start(1, 1))
    assert result.outcome == FAILED
    assert "unhealthy: XID 79" in result.message


def test_exits_are_durable_until_acknowledged(tmp_path: Path) -> None:
    """An exit report is on disk before the task is forgotten, and gone once acknowledged."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 1))
    rig.launcher.processes[0].exit(0)
    rig.supervisor.poll()
    reloaded = StateStore(tmp_path / "state")
    (report,) = reloaded.pending_exits()
    assert (report.job_id, report.lease, report.node) == (1, 1, "n1")
    assert reloaded.running() == []
    reloaded.ack_exit((1, 0, 1))
    assert StateStore(tmp_path / "state").pending_exits() == []


def test_old_task_logs_are_pruned_but_running_ones_kept(tmp_path: Path) -> None:
    """Exited tasks' directories older than the retention go; a running task's stays."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 1))
    rig.supervisor.apply(start(2, 1))
    rig.launcher.processes[1].exit(0)
    rig.supervisor.poll()
    dirs = sorted((tmp_path / "state" / "tasks").iterdir())
    assert len(dirs) == 2
    assert rig.supervisor.prune_task_dirs(3600, time.time()) == []
    removed = rig.supervisor.prune_task_dirs(3600, time.time() + 7200)
    assert [p.name for p in removed] == ["job-2.task-0.lease-1"]
    assert [p.name for p in (tmp_path / "state" / "tasks").iterdir()] == ["job-1.task-0.lease-1"]


def test_a_jobs_earlier_attempts_logs_are_kept_as_long_as_its_latest(tmp_path: Path) -> None:
    """An attempt's logs older than the retention stay while the job runs here or a later
    attempt's logs are within it; a job's directories all go together."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(3, 1))
    rig.launcher.processes[0].exit(0)
    rig.supervisor.poll()
    rig.supervisor.apply(start(3, 2))
    tasks = tmp_path / "state" / "tasks"
    first = tasks / "job-3.task-0.lease-1"
    now = time.time()
    for path in (first, *first.iterdir()):
        os.utime(path, (now - 7200, now - 7200))
    assert rig.supervisor.prune_task_dirs(3600, now) == [], "the job still runs here"
    rig.launcher.processes[1].exit(0)
    rig.supervisor.poll()
    assert rig.supervisor.prune_task_dirs(3600, now) == [], "attempt 2 is recent"
    removed = rig.supervisor.prune_task_dirs(3600, now + 7200)
    assert sorted(p.name for p in removed) == ["job-3.task-0.lease-1", "job-3.task-0.lease-2"]


def test_stop_assignment_respects_preemptibility(tmp_path: Path) -> None:
    """Opaque commands refuse STOP unless their spec says preemptible; managed jobs that say
    preemptible=false refuse it too. StopTask (cancel) stops either."""
    rig = Rig(tmp_path)
    command = start(1, 1)
    command.spec.command.argv.append("/bin/true")
    preemptible_command = start(2, 1, gpus=(1,))
    preemptible_command.spec.command.argv.append("/bin/true")
    preemptible_command.spec.preemptible = True
    pinned = start(3, 1, gpus=(2,))
    pinned.spec.preemptible = False
    for a in (command, preemptible_command, pinned):
        assert rig.supervisor.apply(a).outcome == APPLIED
    outcomes = [rig.supervisor.apply(start(j, 1, action=STOP)).outcome for j in (1, 2, 3)]
    assert outcomes == [FAILED, APPLIED, FAILED]
    assert rig.supervisor.stop(1) and rig.supervisor.stop(3)
    rig.supervisor.poll()
    assert set(rig.exits()) == {(1, 1), (2, 1), (3, 1)}


def test_resent_start_of_an_exited_lease_is_a_no_op_after_a_restart(tmp_path: Path) -> None:
    """The ledger remembers that a lease ran and exited: a START resent to a restarted
    agent does not run the job a second time."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 3))
    rig.launcher.processes[0].exit(0)
    rig.supervisor.poll()
    rig.state = StateStore(tmp_path / "state")
    again = rig.make()
    result = again.apply(start(1, 3))
    assert result.outcome == APPLIED
    assert "already ran and exited (EXIT_KIND_COMPLETED)" in result.message
    assert len(rig.launcher.processes) == 1
    assert again.apply(start(1, 4)).outcome == APPLIED
    assert len(rig.launcher.processes) == 2


def test_adopted_task_that_ends_without_an_exit_record_is_reported_killed_unknown(
    tmp_path: Path,
) -> None:
    """A running record with its assignment is adopted; a process that is not (or no longer)
    the task's, and left no exit record, is reported KILLED with a message saying the status
    is unknown. A record without an assignment is not adopted."""
    rig = Rig(tmp_path)
    a = start(5, 2, gpus=(1,))
    task_dir = tmp_path / "state" / "tasks" / "job-5.task-0.lease-2"
    record = RunningTaskRecord(
        job_id=5,
        task_index=0,
        lease=2,
        # This test's own process: alive, but its environment names no job.
        pids=(os.getpid(),),
        task_dir=str(task_dir),
        progress_file=str(task_dir / "progress-rank0.jsonl"),
        assignment=a.SerializeToString(),
    )
    # The lease ledger on disk is the previous agent's.
    rig.state.record_lease(5, 2)
    assert not rig.supervisor.adopt(dataclasses.replace(record, assignment=b""))
    assert rig.supervisor.adopt(record)
    assert rig.supervisor.is_running(5, 2)
    rig.supervisor.poll()
    (report,) = rig.state.pending_exits()
    assert report.kind == common_pb2.EXIT_KIND_KILLED
    assert "exit status unknown" in report.message
    assert rig.state.lease_exit(5, 2) == common_pb2.EXIT_KIND_KILLED


def _expiring(
    job: int,
    lease: int,
    ends: float,
    gpus: tuple[int, ...] = (0,),
    action: int = START,
    **fields: object,
) -> worker_pb2.TaskAssignment:
    """An assignment whose lease ends at Unix time `ends`."""
    a = start(job, lease, gpus, action, **fields)
    a.lease_expires_at.FromNanoseconds(int(ends * 1e9))
    return a


def test_a_renewed_lease_survives_an_agent_restart(tmp_path: Path) -> None:
    """A renewal is written to the running record, so the next agent adopts the task with
    the renewed lease end and keeps it running past the end of its first lease."""
    rig = Rig(tmp_path)
    now = rig.clock.time()
    rig.supervisor.apply(_expiring(3, 5, now + 10))
    assert rig.supervisor.apply(_expiring(3, 6, now + 60, action=EXTEND)).outcome == APPLIED
    (record,) = rig.state.running()
    assert record.lease == 6
    stored = worker_pb2.TaskAssignment.FromString(record.assignment)
    assert stored.lease_expires_at.ToNanoseconds() == int((now + 60) * 1e9)

    # The next agent: a fresh supervisor and state store over the same directory.
    rig.state = StateStore(tmp_path / "state")
    rig.supervisor = rig.make()
    (record,) = rig.state.running()
    # A live process that names the job and the lease it was started with, as a job does.
    env = {**os.environ, "HADAR_JOB_ID": "3", "HADAR_LEASE": "5"}
    stand_in = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        markers = (b"HADAR_JOB_ID=3", b"HADAR_LEASE=5")
        deadline = time.monotonic() + 10
        while not is_process_of(stand_in.pid, *markers):
            assert time.monotonic() < deadline, "the stand-in process never showed its env"
            time.sleep(0.01)
        assert rig.supervisor.adopt(dataclasses.replace(record, pids=(stand_in.pid,)))
        rig.clock.advance(30)
        rig.supervisor.poll()
        assert rig.supervisor.running_keys() == [(3, 6)]
        assert rig.state.pending_exits() == []
        assert stand_in.poll() is None, "the adopted task was stopped"
    finally:
        stand_in.kill()
        stand_in.wait()


def test_task_whose_lease_ends_without_renewal_is_stopped_with_the_reason(
    tmp_path: Path,
) -> None:
    """A lease that ends without renewal stops the task like a STOP (SIGTERM, SIGKILL after
    the grace); its exit report says the lease expired. A renewed task keeps running."""
    rig = Rig(tmp_path)
    rig.launcher.on_sigterm = None
    now = rig.clock.time()
    rig.supervisor.apply(_expiring(1, 4, now + 10, gpus=(0,), grace_s=5.0))
    rig.supervisor.apply(_expiring(2, 7, now + 10, gpus=(1,)))
    lapsing, renewed = rig.launcher.processes
    rig.clock.advance(9)
    rig.supervisor.poll()
    assert lapsing.signals == [] and renewed.signals == []
    extension = _expiring(2, 7, now + 20, gpus=(1,), action=EXTEND)
    assert rig.supervisor.apply(extension).outcome == APPLIED
    rig.clock.advance(1)
    rig.supervisor.poll()
    assert lapsing.signals == [signal.SIGTERM]
    assert renewed.signals == []
    assert rig.supervisor.running_keys() == [(1, 4), (2, 7)]
    # Renewal comes too late once the task is stopping: the master learns it has gone.
    late = rig.supervisor.apply(_expiring(1, 4, now + 30, gpus=(0,), action=EXTEND))
    assert late.outcome == STALE
    assert "lease 4 expired" in late.message
    rig.clock.advance(5.1)
    rig.supervisor.poll()
    rig.supervisor.poll()
    assert lapsing.signals == [signal.SIGTERM, signal.SIGKILL]
    (report,) = rig.state.pending_exits()
    assert (report.job_id, report.lease, report.kind) == (1, 4, common_pb2.EXIT_KIND_KILLED)
    assert report.message.endswith(
        "lease 4 expired at 22:13:30 UTC without renewal: the master did not renew it)"
    ), report.message
    assert rig.supervisor.running_keys() == [(2, 7)]
    assert renewed.signals == []


def test_the_lease_end_is_written_for_the_job_and_rewritten_on_renewal(tmp_path: Path) -> None:
    """A managed task's processes get HADAR_LEASE_FILE, holding the lease end (Unix time);
    an extension rewrites it. Opaque commands and tasks without a lease end get none."""
    rig = Rig(tmp_path)
    now = rig.clock.time()
    rig.supervisor.apply(_expiring(1, 2, now + 10, gpus=(0,)))
    command = _expiring(2, 1, now + 10, gpus=(1,))
    command.spec.command.argv.append("/bin/true")
    rig.supervisor.apply(command)
    rig.supervisor.apply(start(3, 1, gpus=(2,)))
    managed, opaque, unleased = rig.launcher.processes
    lease_file = Path(managed.spec.env["HADAR_LEASE_FILE"])
    assert float(lease_file.read_text()) == pytest.approx(now + 10, abs=1e-3)
    assert "HADAR_LEASE_FILE" not in opaque.spec.env
    assert "HADAR_LEASE_FILE" not in unleased.spec.env
    extension = _expiring(1, 2, now + 70, gpus=(0,), action=EXTEND)
    assert rig.supervisor.apply(extension).outcome == APPLIED
    assert float(lease_file.read_text()) == pytest.approx(now + 70, abs=1e-3)


def test_expired_lease_of_a_checkpointing_task_is_reported_stopped(tmp_path: Path) -> None:
    """A task that checkpoints and exits on SIGTERM after its lease ended: STOPPED, with the
    lease's end as the message."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(_expiring(1, 2, rig.clock.time() + 1))
    rig.clock.advance(1)
    rig.supervisor.poll()
    rig.supervisor.poll()
    (report,) = rig.state.pending_exits()
    assert report.kind == common_pb2.EXIT_KIND_STOPPED
    assert report.message.startswith("stopped: lease 2 expired at ")
    assert report.message.endswith("without renewal: the master did not renew it")


def test_opaque_command_runs_on_past_its_lease(tmp_path: Path) -> None:
    """Opaque commands are never preempted: an expired lease does not stop them."""
    rig = Rig(tmp_path)
    command = _expiring(1, 1, rig.clock.time() + 1)
    command.spec.command.argv.append("/bin/true")
    rig.supervisor.apply(command)
    rig.supervisor.apply(start(2, 1, gpus=(1,)))  # no lease end: runs until told
    rig.clock.advance(3600)
    rig.supervisor.poll()
    assert [p.signals for p in rig.launcher.processes] == [[], []]
    assert rig.supervisor.running_keys() == [(1, 1), (2, 1)]


def test_an_expired_lease_says_why_in_the_report_and_the_log(tmp_path: Path) -> None:
    """The words name the lease, when it ended and what kept the renewal away: the master
    out of reach (as the agent knows it), or the agent itself not running."""
    rig = Rig(tmp_path)
    unreachable = "the master was unreachable (UNAVAILABLE: connection refused)"
    rig.supervisor = rig.make(master_state=lambda: unreachable)
    now = rig.clock.time()
    rig.supervisor.apply(_expiring(1, 3, now + 10, gpus=(0,)))
    rig.supervisor.apply(_expiring(2, 4, now + 30, gpus=(1,)))
    rig.clock.advance(9)
    rig.supervisor.poll()
    rig.clock.advance(1)
    with structlog.testing.capture_logs() as logs:
        rig.supervisor.poll()
        rig.supervisor.poll()
    (report,) = rig.state.pending_exits()
    expected = f"lease 3 expired at 22:13:30 UTC without renewal: {unreachable}"
    assert report.message == f"stopped: {expected}"
    assert {"event": "lease_expired", "job": 1, "lease": 3, "reason": expected} in [
        {k: v for k, v in entry.items() if k in ("event", "job", "lease", "reason")}
        for entry in logs
    ]
    assert any(e["event"] == "task_ended" and e["why"] == report.message for e in logs), logs

    # The agent stopped for 40 s (SIGSTOP) while lease 4 ended: that is why.
    rig.clock.advance(40)
    assert rig.state.pending_exits() == [report]
    rig.supervisor.poll()
    rig.supervisor.poll()
    late = next(r for r in rig.state.pending_exits() if r.job_id == 2)
    assert late.message == (
        "stopped: lease 4 expired at 22:13:50 UTC without renewal: this worker agent did "
        "not run for 40 s (stopped or suspended), so it could not take a renewal"
    )


def _checkpointed(rig: Rig, job: int, lease: int, iterations: int) -> None:
    """The task's rank 0 wrote that it saved a checkpoint at `iterations` and exited."""
    task_dir = rig.tmp_path / "state" / "tasks" / f"job-{job}.task-0.lease-{lease}"
    record = ProgressRecord("exit", iterations, 1.0, 32.0, 0.5, iterations, rig.clock.time())
    (task_dir / "progress-rank0.jsonl").write_text(record.to_json() + "\n")


def _stderr_of(rig: Rig, job: int, lease: int, rank: int = 0) -> str:
    task_dir = rig.tmp_path / "state" / "tasks" / f"job-{job}.task-0.lease-{lease}"
    return (task_dir / f"rank-{rank}.err").read_text()


def test_a_preempting_stop_writes_one_hadar_line_with_the_checkpoint_it_resumes_from(
    tmp_path: Path,
) -> None:
    """A STOP that carries the scheduler's reason: once the task has stopped, its first
    rank's standard error ends with one `hadar:` line saying why and from which checkpoint
    the job resumes; the other ranks get none, and no line appears before the stop is over."""
    rig = Rig(tmp_path)
    rig.launcher.on_sigterm = None
    rig.supervisor.apply(start(1, 2, gpus=(0, 1)))
    _checkpointed(rig, 1, 2, 1200)
    stop = start(1, 2, gpus=(0, 1), action=STOP)
    stop.reason, stop.resumes = "preempted in round 42 for job 17", True
    assert rig.supervisor.apply(stop).outcome == APPLIED
    rig.supervisor.poll()
    task_dir = rig.tmp_path / "state" / "tasks" / "job-1.task-0.lease-2"
    assert not (task_dir / "rank-0.err").exists()
    for process in rig.launcher.processes:
        process.exit(0)
    rig.supervisor.poll()
    assert _stderr_of(rig, 1, 2).splitlines()[-1] == (
        "hadar: preempted in round 42 for job 17; resumes from checkpoint at iteration 1200"
    )
    assert not (task_dir / "rank-1.err").exists()


@pytest.mark.parametrize(
    ("reason", "graceful", "expected"),
    [
        (
            "time limit 1h reached after 1h of run time",
            True,
            "hadar: time limit 1h reached after 1h of run time; last checkpoint at iteration 300",
        ),
        ("cancelled by alice: wrong data", False, "hadar: cancelled by alice: wrong data"),
    ],
)
def test_a_stop_task_for_a_time_limit_or_a_cancel_writes_its_reason_into_the_log(
    tmp_path: Path, reason: str, graceful: bool, expected: str
) -> None:
    """StopTask's reason is the master's decision: the task's log ends with it as a
    `hadar:` line; a time limit (checkpoint first) names the last checkpoint, a cancel
    (killed at once) only says who cancelled and why."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 2))
    if graceful:
        _checkpointed(rig, 1, 2, 300)
    assert rig.supervisor.stop(1, graceful=graceful, reason=reason, note=reason)
    rig.supervisor.poll()
    assert _stderr_of(rig, 1, 2).splitlines()[-1] == expected


def test_a_requeued_start_opens_its_log_with_why_and_the_checkpoint(tmp_path: Path) -> None:
    """A START with a reason (the job runs again after a failed attempt) writes it as the
    first line of the new attempt's log, with the checkpoint it resumes from."""
    rig = Rig(tmp_path)
    requeued = start(1, 5, iterations_done=800)
    requeued.reason = "requeued after rank 0: exit code 1; retry 1 of 3"
    assert rig.supervisor.apply(requeued).outcome == APPLIED
    assert _stderr_of(rig, 1, 5) == (
        "hadar: requeued after rank 0: exit code 1; retry 1 of 3; "
        "resumes from checkpoint at iteration 800\n"
    )


def test_a_requeued_command_opens_its_log_saying_it_runs_again_from_the_start(
    tmp_path: Path,
) -> None:
    """A plain command requeued after it ended cannot resume: the new attempt's first line
    says who requeued it, what it ended as, and that it runs again from the start."""
    rig = Rig(tmp_path)
    requeued = start(1, 6)
    requeued.spec.command.argv.append("/bin/true")
    requeued.reason = "requeued by alice after it ended TIMEOUT: more time"
    assert rig.supervisor.apply(requeued).outcome == APPLIED
    assert _stderr_of(rig, 1, 6) == (
        "hadar: requeued by alice after it ended TIMEOUT: more time; runs again from the start\n"
    )


def test_a_requeue_stop_says_the_job_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """A running job stopped by a requeue (StopTask with `resumes`) ends its log saying it
    was requeued and from which checkpoint it resumes, not only where it got to."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 2))
    _checkpointed(rig, 1, 2, 40)
    note = "requeued by alice: new data"
    assert rig.supervisor.stop(1, graceful=True, reason=note, note=note, resumes=True)
    rig.supervisor.poll()
    assert _stderr_of(rig, 1, 2).splitlines()[-1] == (
        "hadar: requeued by alice: new data; resumes from checkpoint at iteration 40"
    )


def test_a_stop_of_the_workers_own_writes_nothing_into_the_log(tmp_path: Path) -> None:
    """Only the scheduler's decisions are written: a stop without a note (a failed rank's
    siblings, the agent shutting down) leaves the job's output as it wrote it."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(start(1, 2))
    rig.supervisor.stop(1, reason="worker shutting down")
    rig.supervisor.poll()
    assert rig.exits() == {(1, 2): common_pb2.EXIT_KIND_STOPPED}
    task_dir = rig.tmp_path / "state" / "tasks" / "job-1.task-0.lease-2"
    assert not (task_dir / "rank-0.err").exists()


def test_a_lease_that_ran_out_is_written_into_the_log_with_where_the_job_resumes(
    tmp_path: Path,
) -> None:
    """The worker's own stop at the end of an unrenewed lease is the scheduler's doing as
    the job sees it: its `hadar:` line says why, and the master places the job again from
    the checkpoint it saved."""
    rig = Rig(tmp_path)
    rig.supervisor.apply(_expiring(1, 2, rig.clock.time() + 1))
    _checkpointed(rig, 1, 2, 40)
    rig.clock.advance(1)
    rig.supervisor.poll()
    rig.supervisor.poll()
    line = _stderr_of(rig, 1, 2).splitlines()[-1]
    assert line.startswith("hadar: lease 2 expired at "), line
    assert line.endswith(
        "without renewal: the master did not renew it; resumes from checkpoint at iteration 40"
    ), line


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every user may enter (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="hadar-open-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_workdir_its_user_cannot_enter_fails_the_start_naming_what_shuts_them_out(
    tmp_path: Path, open_tmp: Path
) -> None:
    """A root agent refuses to start a job in a directory its user cannot reach (as when
    it was submitted from a folder of root's), naming the folder and its mode, instead of
    letting the job fail with an exit code; a folder open to the user starts."""
    rig = Rig(tmp_path, root=True)
    private = open_tmp / "ci.x1"
    (private / "repo").mkdir(parents=True)
    private.chmod(0o700)
    shared = open_tmp / "lab"
    shared.mkdir(mode=0o755)
    shut = start(1, 1, user="alice")
    shut.spec.workdir = str(private / "repo")
    refused = rig.supervisor.apply(shut)
    assert refused.outcome == FAILED
    assert refused.message == (
        f"workdir {private / 'repo'} cannot be entered by alice: {private} is mode 0700 "
        f"(uid {os.getuid()}, gid {os.getgid()}); submit from a directory they can reach, "
        "or name one with --workdir"
    )
    assert rig.launcher.processes == []
    open_to_her = start(2, 1, user="alice")
    open_to_her.spec.workdir = str(shared)
    assert rig.supervisor.apply(open_to_her).outcome == APPLIED


def test_shut_out_goes_by_the_group_and_other_bits_and_never_shuts_out_root(
    open_tmp: Path,
) -> None:
    """The group's bits count for its members, the others' for the rest; root is never
    shut out."""
    folder = open_tmp / "d"
    folder.mkdir()
    info = folder.stat()
    member = RunAs("m", 54321, 54321, (info.st_gid,), "/")
    other = RunAs("x", 54322, 54322, (), "/")
    folder.chmod(0o710)
    assert shut_out(folder, member) == ""
    assert shut_out(folder, other) == (
        f"{folder} is mode 0710 (uid {info.st_uid}, gid {info.st_gid})"
    )
    folder.chmod(0o701)
    assert shut_out(folder, other) == ""
    assert shut_out(folder, member) != ""
    assert shut_out(folder, RunAs("root", 0, 0, (0,), "/root")) == ""

"""Runs and supervises a node's tasks: applies assignments with lease fencing, starts one
process per GPU, stops them gracefully (SIGTERM, then SIGKILL after the grace period), reads
their progress files and turns their exits into exit reports.

All methods are thread-safe; :meth:`Supervisor.poll` is called periodically (the agent's
supervision thread) and does the time-driven work: reaping exits, escalating to SIGKILL,
starting tasks that waited for an older lease of their job to stop, and stopping tasks
whose lease ran out without renewal.

Leases: every START and EXTEND carries the time its lease ends (``lease_expires_at``, Unix
time on the master's clock). A preemptible task whose lease ends without a renewal (the
master is down, or cannot reach this node) is stopped like a STOP would stop it: asked to
checkpoint, killed after the grace period; its exit report says why. The master relies on
this: it places a lost node's jobs elsewhere only after their leases (and grace) are over.
Opaque commands are not preempted unless their spec says they may be, so an expired lease
stops only those that may. A task whose spec asks for a warning signal (sbatch --signal
SIG@SECONDS) gets it that many seconds before SIGTERM on every stop but a kill (cancel) or a
failed rank's.
"""

from __future__ import annotations

import enum
import math
import os
import shutil
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import structlog
from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp

from protos.hadar.v1 import common_pb2, coordinator_pb2, worker_pb2
from worker.agent.clock import Clock
from worker.agent.processes import (
    AdoptedProcess,
    ProcessHandle,
    ProcessLauncher,
    ProcessSpec,
    RunAs,
)
from worker.agent.progressfile import ProgressTail, tail_lines
from worker.agent.state import RunningTaskRecord, StateStore, write_atomically
from worker.agent.tasklogs import (
    append_scheduler_line,
    job_of,
    output_file,
    stderr_log,
    stdout_log,
)
from worker.agent.terminals import PtyProcess, Terminal
from worker.agent.userdirs import UserDirectoryError
from worker.agent.users import UnknownUserError, UserDirectory, shut_out
from worker.gpus import GpuInfo
from worker.runtime import contract
from worker.runtime.contract import ProgressRecord

log = structlog.get_logger("hadar.worker")

APPLIED = worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
STALE = worker_pb2.ASSIGNMENT_OUTCOME_STALE
FAILED = worker_pb2.ASSIGNMENT_OUTCOME_FAILED

# In the task directory: when the lease ends (Unix time), read by the job's runtime.
LEASE_FILE_NAME = "lease-end"
# Polls come every 0.1 s; a gap this long means the agent itself was not running.
STALL_S = 5.0

# Torchrun's variables: the job cannot override them through its env.
TORCHRUN_VARS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)

_EXIT_KINDS: dict[str, common_pb2.ExitKind] = {
    "completed": common_pb2.EXIT_KIND_COMPLETED,
    "lease_done": common_pb2.EXIT_KIND_LEASE_DONE,
    "stopped": common_pb2.EXIT_KIND_STOPPED,
}


class Phase(enum.Enum):
    # Waits for an older lease of the same job on this node to stop.
    WAITING = "waiting"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"


_TASK_STATES = {
    Phase.WAITING: common_pb2.TASK_STATE_STARTING,
    Phase.RUNNING: common_pb2.TASK_STATE_RUNNING,
    Phase.STOPPING: common_pb2.TASK_STATE_STOPPING,
    Phase.EXITED: common_pb2.TASK_STATE_EXITED,
}


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    node: str
    state_dir: Path
    jobs_dir: Path
    checkpoint_root: Path
    # Python for built-in workloads.
    python: str
    grace_s: float = 30.0
    checkpoint_interval_s: float = 0.0
    failure_tail_lines: int = 20
    # Names of the built-in workloads; None when unknown (then any name is tried).
    workloads: frozenset[str] | None = None
    # Environment every job process starts from (the agent's, minus its own settings).
    base_env: Mapping[str, str] = field(default_factory=dict)
    # A root agent runs jobs submitted as root only when this is set.
    allow_root_jobs: bool = False


@dataclass
class RankProcess:
    rank: int
    local_rank: int
    gpu_index: int
    handle: ProcessHandle
    stdout_path: Path
    stderr_path: Path
    returncode: int | None = None


@dataclass
class Task:
    job_id: int
    task_index: int
    lease: int
    assignment: worker_pb2.TaskAssignment
    managed: bool
    task_dir: Path
    progress: ProgressTail
    phase: Phase = Phase.RUNNING
    processes: list[RankProcess] = field(default_factory=list)
    stop_requested: bool = False
    stop_reason: str = ""
    # Warned before a stop (sbatch --signal): when SIGTERM follows the warning.
    term_at: float | None = None
    kill_at: float | None = None
    killed: bool = False
    # (rank, status) of the first process that failed on its own.
    failure: tuple[int, int] | None = None
    # Progress already sent to the master (at of the last record relayed).
    reported_at: float = -math.inf
    iterations_done: int = 0
    # Started by a previous agent and adopted: its processes are not our children, so
    # their exit statuses are unknown and the progress file's exit record says how it ended.
    adopted: bool = False
    # Stopped by this worker because its lease ended without renewal.
    lease_expired: bool = False
    # What the scheduler decided about it, written to its log as a `hadar:` line once it
    # has stopped (empty: a stop of the worker's own, written nowhere), and whether the job
    # then runs again from its checkpoint.
    note: str = ""
    resumes: bool = False
    # An interactive session's terminal (the job's first task only); None for the others.
    terminal: Terminal | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.lease)

    @property
    def warning(self) -> tuple[int, float]:
        """The signal its processes get before a stop, and how many seconds before SIGTERM
        (0, 0: none)."""
        spec = self.assignment.spec
        if spec.warn_signal and spec.warn_before_s:
            return spec.warn_signal, float(spec.warn_before_s)
        return 0, 0.0

    @property
    def stop_signal(self) -> int:
        """What a graceful stop sends: SIGTERM, or for a session on a terminal the hang-up
        an interactive shell obeys (it ignores SIGTERM)."""
        return signal.SIGHUP if self.terminal is not None else signal.SIGTERM

    @property
    def preemptible(self) -> bool:
        """Whether a STOP assignment may stop it: the spec says, else managed jobs are and
        opaque commands are not."""
        spec = self.assignment.spec
        return spec.preemptible if spec.HasField("preemptible") else self.managed

    def alive(self) -> list[RankProcess]:
        return [p for p in self.processes if p.returncode is None]

    def lease_ends_at(self) -> float | None:
        """Unix time the lease ends unless renewed; None when the assignment set none."""
        expires = self.assignment.lease_expires_at
        if not self.assignment.HasField("lease_expires_at") or expires.ToNanoseconds() <= 0:
            return None
        return expires.ToNanoseconds() / 1e9


class AssignmentRefusedError(Exception):
    """An assignment cannot be applied on this node; the message says why."""


class UnknownUserRefusedError(AssignmentRefusedError):
    """A START whose user has no Unix account here, for a worker running as root: the
    answer names the user, so the master fails the job instead of retrying it."""

    def __init__(self, user: str, message: str) -> None:
        super().__init__(message)
        self.user = user


def _kind_name(kind: int) -> str:
    return common_pb2.ExitKind.Name(kind)


class Supervisor:
    def __init__(
        self,
        config: SupervisorConfig,
        gpus: Sequence[GpuInfo],
        launcher: ProcessLauncher,
        clock: Clock,
        state: StateStore,
        users: UserDirectory,
        on_exit: Callable[[], None] = lambda: None,
        master_state: Callable[[], str] = lambda: "",
    ) -> None:
        self._config = config
        self._gpus = {gpu.index: gpu for gpu in gpus}
        self._launcher = launcher
        self._clock = clock
        self._state = state
        self._users = users
        self._on_exit = on_exit
        self._lock = threading.RLock()
        self._tasks: dict[tuple[int, int], Task] = {}
        # Why the master may not have renewed a lease ("" when it was reachable), for the
        # words an expired lease is reported in.
        self._master_state = master_state
        # When poll() last ran (monotonic): a long gap means this agent itself was not
        # running (stopped, suspended) while a lease ran out.
        self._polled_at = clock.monotonic()

    # -- GPUs

    def update_gpus(self, gpus: Sequence[GpuInfo]) -> None:
        with self._lock:
            self._gpus = {gpu.index: gpu for gpu in gpus}

    # -- assignments

    def apply(self, assignment: worker_pb2.TaskAssignment) -> worker_pb2.AssignmentResult:
        result = worker_pb2.AssignmentResult(
            job_id=assignment.job_id, task_index=assignment.task_index, lease=assignment.lease
        )
        with self._lock:
            try:
                outcome, message = self._apply(assignment)
            except UnknownUserRefusedError as exc:
                outcome, message = FAILED, str(exc)
                result.unknown_user = exc.user
        result.outcome = outcome
        result.message = message
        return result

    def _apply(self, a: worker_pb2.TaskAssignment) -> tuple[worker_pb2.AssignmentOutcome, str]:
        applied = self._state.lease(a.job_id)
        if applied is not None and a.lease < applied:
            return STALE, f"lease {a.lease} is older than lease {applied} already applied"
        if a.action == worker_pb2.ASSIGNMENT_ACTION_START:
            return self._apply_start(a)
        if a.action == worker_pb2.ASSIGNMENT_ACTION_EXTEND:
            return self._apply_extend(a)
        if a.action == worker_pb2.ASSIGNMENT_ACTION_STOP:
            return self._apply_stop(a)
        return FAILED, f"unknown action {a.action}"

    def _apply_start(
        self, a: worker_pb2.TaskAssignment
    ) -> tuple[worker_pb2.AssignmentOutcome, str]:
        key = (a.job_id, a.lease)
        if key in self._tasks:
            return APPLIED, "already running"
        exited = self._state.lease_exit(a.job_id, a.lease)
        if exited is not None:
            return APPLIED, f"already ran and exited ({_kind_name(exited)})"
        try:
            run_as = self._check_start(a)
        except UnknownUserRefusedError:
            raise  # answered by apply(), which names the user
        except AssignmentRefusedError as exc:
            return FAILED, str(exc)
        self._state.record_lease(a.job_id, a.lease)
        task = self._new_task(a)
        older = [t for t in self._tasks.values() if t.job_id == a.job_id and t.lease < a.lease]
        for old in older:
            self._request_stop(old, graceful=True, grace_s=a.grace_s, reason="superseded")
        if older:
            task.phase = Phase.WAITING
            self._tasks[key] = task
            return APPLIED, f"starts when lease {older[0].lease} of this job has stopped"
        try:
            self._spawn(task, run_as)
        except AssignmentRefusedError as exc:
            return FAILED, str(exc)
        self._tasks[key] = task
        return APPLIED, "started"

    def _apply_extend(
        self, a: worker_pb2.TaskAssignment
    ) -> tuple[worker_pb2.AssignmentOutcome, str]:
        exited = self._state.lease_exit(a.job_id, a.lease)
        if exited is not None:
            return APPLIED, f"already exited ({_kind_name(exited)})"
        current = self._current(a.job_id)
        if current is not None and current.lease_expired:
            # Too late: it is checkpointing. The master places the job again.
            return STALE, f"{current.stop_reason}; the task is stopping"
        if current is None or current.phase in (Phase.STOPPING, Phase.EXITED):
            return FAILED, f"no running task of job {a.job_id} to extend"
        self._state.record_lease(a.job_id, a.lease)
        if current.lease != a.lease:
            # The extension carries a newer fencing token: reports use it from now on.
            del self._tasks[current.key]
            self._state.remove_running(current.job_id, current.lease)
            current.lease = a.lease
            self._tasks[current.key] = current
        current.assignment.lease_expires_at.CopyFrom(a.lease_expires_at)
        # The running record carries the renewed lease end: an agent that restarts adopts the
        # task under it, instead of stopping it at the end of the lease it first started with.
        self._record_running(current)
        self._write_lease_file(current)
        return APPLIED, "extended"

    def _apply_stop(self, a: worker_pb2.TaskAssignment) -> tuple[worker_pb2.AssignmentOutcome, str]:
        self._state.record_lease(a.job_id, a.lease)
        running = [t for t in self._tasks.values() if t.job_id == a.job_id and t.lease <= a.lease]
        if not running:
            return APPLIED, "not running"
        for task in running:
            if not task.preemptible:
                return FAILED, (
                    f"job {a.job_id} is not preemptible (an opaque command); "
                    "only cancelling the job (StopTask) stops it"
                )
        for task in running:
            if a.reason:
                task.note, task.resumes = a.reason, a.resumes
            self._request_stop(
                task,
                graceful=True,
                grace_s=a.grace_s,
                reason=a.reason or "stop assignment",
                warn=True,
            )
        return APPLIED, "stopping"

    def _current(self, job_id: int) -> Task | None:
        tasks = [t for t in self._tasks.values() if t.job_id == job_id]
        return max(tasks, key=lambda t: t.lease) if tasks else None

    def _check_start(self, a: worker_pb2.TaskAssignment) -> RunAs | None:
        spec = a.spec
        if not a.HasField("spec") or spec.WhichOneof("program") is None:
            raise AssignmentRefusedError("START carries no job spec with a program")
        if not a.gpu_indices:
            raise AssignmentRefusedError("no GPU indices")
        if len(set(a.gpu_indices)) != len(a.gpu_indices):
            raise AssignmentRefusedError(f"GPU indices repeat: {list(a.gpu_indices)}")
        for index in a.gpu_indices:
            gpu = self._gpus.get(index)
            if gpu is None:
                raise AssignmentRefusedError(
                    f"GPU {index} does not exist on node {self._config.node} "
                    f"(it has {sorted(self._gpus)})"
                )
            if not gpu.healthy:
                raise AssignmentRefusedError(f"GPU {index} is unhealthy: {gpu.problem}")
        if a.local_batch_sizes and len(a.local_batch_sizes) != len(a.gpu_indices):
            raise AssignmentRefusedError(
                f"{len(a.local_batch_sizes)} local batch sizes for {len(a.gpu_indices)} GPUs"
            )
        program = spec.WhichOneof("program")
        if program == "workload":
            name = spec.workload.name
            known = self._config.workloads
            if not name or (known is not None and name not in known):
                raise AssignmentRefusedError(
                    f"workload {name!r} is not available here (known: {sorted(known or [])})"
                )
        elif program == "script" and not spec.script.argv:
            raise AssignmentRefusedError("script program has an empty argv")
        elif program == "command" and not spec.command.argv:
            raise AssignmentRefusedError("command program has an empty argv")
        if spec.workdir and not Path(spec.workdir).is_dir():
            raise AssignmentRefusedError(f"workdir {spec.workdir} does not exist on this node")
        if not self._users.agent_is_root():
            return None
        if not a.user:
            raise AssignmentRefusedError("the worker runs as root and the assignment names no user")
        try:
            run_as = self._users.lookup(a.user)
        except UnknownUserError as exc:
            raise UnknownUserRefusedError(
                a.user, f"cannot run as the submitting user: {exc}"
            ) from exc
        if run_as.uid == 0 and not self._config.allow_root_jobs:
            raise AssignmentRefusedError(
                f"user {a.user!r} is root (uid 0): this worker runs no job as root "
                "unless its allow_root_jobs setting is true"
            )
        if spec.workdir:
            blocked = shut_out(Path(spec.workdir), run_as)
            if blocked:
                raise AssignmentRefusedError(
                    f"workdir {spec.workdir} cannot be entered by {a.user}: {blocked}; "
                    "submit from a directory they can reach, or name one with --workdir"
                )
        return run_as

    def _new_task(self, a: worker_pb2.TaskAssignment) -> Task:
        task_dir = (
            self._config.state_dir / "tasks" / f"job-{a.job_id}.task-{a.task_index}.lease-{a.lease}"
        )
        assignment = worker_pb2.TaskAssignment()
        assignment.CopyFrom(a)
        return Task(
            job_id=a.job_id,
            task_index=a.task_index,
            lease=a.lease,
            assignment=assignment,
            managed=a.spec.WhichOneof("program") != "command",
            task_dir=task_dir,
            progress=ProgressTail(task_dir / "progress-rank0.jsonl"),
            iterations_done=a.iterations_done,
        )

    # -- starting

    def _argv(self, task: Task, workdir: Path, env: Mapping[str, str]) -> list[str]:
        spec = task.assignment.spec
        program = spec.WhichOneof("program")
        if program == "workload":
            return [self._config.python, "-m", "worker.workloads", spec.workload.name]
        argv = list(spec.script.argv if program == "script" else spec.command.argv)
        head = argv[0]
        if "/" not in head and shutil.which(head, path=env.get("PATH")) is None:
            local = workdir / head
            if local.exists():
                argv[0] = str(local)
        return argv

    def _output_copies(self, task: Task, workdir: Path) -> tuple[Path | None, Path | None]:
        """The files the job asked its standard output and error to be appended to; without
        an ``error`` file, standard error goes to the ``output`` file, as under sbatch."""
        a = task.assignment
        spec = a.spec

        def expand(pattern: str) -> Path | None:
            if not pattern:
                return None
            return output_file(
                pattern, job_id=a.job_id, user=a.user, name=spec.name, workdir=workdir
            )

        stdout_copy = expand(spec.output)
        return stdout_copy, expand(spec.error) or stdout_copy

    def _spawn(self, task: Task, run_as: RunAs | None) -> None:
        a = task.assignment
        spec = a.spec
        workdir = Path(spec.workdir) if spec.workdir else self._config.jobs_dir / f"job-{a.job_id}"
        checkpoint_dir = Path(
            a.checkpoint_dir
            or spec.checkpoint_dir
            or self._config.checkpoint_root / f"job-{a.job_id}"
        )
        try:
            # The agent's own directories (and the master's default for checkpoints): made
            # here, and handed to the job's user only where made here and not a link.
            own = [task.task_dir, checkpoint_dir] if not spec.checkpoint_dir else [task.task_dir]
            if not spec.workdir:
                own.append(workdir)
            created = [p for p in own if not p.exists()]
            for path in own:
                path.mkdir(parents=True, exist_ok=True)
                if path.is_symlink():
                    raise AssignmentRefusedError(f"{path} is a symbolic link")
            for path in created:
                # A job's logs, checkpoints and files are its owner's alone (0700 whatever
                # the agent's umask), and then its owner's to share.
                path.chmod(0o700)
                if run_as is not None:
                    os.chown(path, run_as.uid, run_as.gid, follow_symlinks=False)
        except OSError as exc:
            raise AssignmentRefusedError(f"cannot prepare directories: {exc}") from exc
        if spec.checkpoint_dir:
            # The submitter's own choice: made with the submitter's rights, never the agent's.
            try:
                self._launcher.make_directory(checkpoint_dir, run_as)
            except UserDirectoryError as exc:
                raise AssignmentRefusedError(f"checkpoint_dir: {exc}") from exc

        world_size = a.rendezvous.world_size or len(a.gpu_indices)
        # Without a submitted batch size the job's own default holds: the master's shares are
        # then nominal, and the runtime splits the default batch evenly by itself.
        global_batch = spec.batch_size
        common = dict(self._config.base_env)
        # Python buffers output to a file in blocks, and a process that is killed (a cancel
        # sends SIGKILL) loses what its buffer held: whatever a job printed must reach its
        # log. A job that sets the variable itself keeps its own value.
        common["PYTHONUNBUFFERED"] = "1"
        common.update(spec.env)
        if run_as is not None:
            # Who the job runs as is this agent's to say: an exported shell environment
            # (hctl's --export ALL) brings its own HOME and USER, of whoever ran hctl.
            common.update(HOME=run_as.home, USER=run_as.name, LOGNAME=run_as.name)
        common.update(
            {
                # As a shell that changed into it would say.
                "PWD": str(workdir),
                "MASTER_ADDR": a.rendezvous.master_addr or "127.0.0.1",
                "MASTER_PORT": str(a.rendezvous.master_port or free_port()),
                "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(len(a.gpu_indices)),
                # CUDA numbers devices like NVML (and nvidia-smi) only in PCI bus order.
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                # Every rank sees the task's GPUs; rank i uses device LOCAL_RANK, as under torchrun.
                "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in a.gpu_indices),
                contract.JOB_ID: str(a.job_id),
                contract.TASK_INDEX: str(a.task_index),
                contract.LEASE: str(a.lease),
                contract.ITERATIONS_DONE: str(a.iterations_done),
                contract.ITERATION_BUDGET: str(a.iteration_budget),
                contract.ACCUMULATION_STEPS: str(max(1, a.accumulation_steps)),
                contract.CHECKPOINT_DIR: str(checkpoint_dir),
                contract.CHECKPOINT_INTERVAL_S: str(self._config.checkpoint_interval_s),
                contract.GPU_TYPE: a.gpu_type or self._gpus[a.gpu_indices[0]].type,
                contract.NUM_COPIES: str(max(1, a.num_copies)),
                contract.COPY_INDEX: str(a.copy_index),
                contract.SEED: spec.env.get(contract.SEED, str(a.job_id)),
            }
        )
        if global_batch:
            common[contract.GLOBAL_BATCH_SIZE] = str(global_batch)
        if spec.iterations:
            # 0: a command that did not say how much work it does.
            common[contract.TOTAL_ITERATIONS] = str(spec.iterations)
        lease_file = self._write_lease_file(task)
        if lease_file is not None:
            common[contract.LEASE_FILE] = str(lease_file)
        argv = self._argv(task, workdir, common)
        stdout_copy, stderr_copy = self._output_copies(task, workdir)
        if a.reason:
            # Why the job runs again (a retry, a lost placement), before anything it prints.
            self._write_note(task, a.reason + _resume_clause(task, a.iterations_done, True))
        # An interactive session is one command on one terminal, seeing all the task's GPUs
        # (a job spread over servers has it on its first; its other tasks run as commands).
        session = spec.interactive and a.task_index == 0
        gpus = list(a.gpu_indices[:1] if session else a.gpu_indices)
        try:
            for local_rank, gpu_index in enumerate(gpus):
                rank = a.rendezvous.rank_offset + local_rank
                env = dict(common)
                env["RANK"] = str(rank)
                env["LOCAL_RANK"] = str(local_rank)
                env[contract.PROGRESS_FILE] = str(
                    task.task_dir / f"progress-rank{local_rank}.jsonl"
                )
                env[contract.ERROR_FILE] = str(contract_error_file(task.task_dir, local_rank))
                if a.local_batch_sizes and global_batch:
                    env[contract.LOCAL_BATCH_SIZE] = str(a.local_batch_sizes[local_rank])
                pace = self._gpus[gpu_index].fake_pace
                if pace > 0:
                    env[contract.FAKE_GPU_SPEED] = repr(pace)
                    # A fake GPU computes on the CPU; the runtime paces it to the GPU's speed.
                    env[contract.DEVICE] = "cpu"
                out, err = stdout_log(task.task_dir, rank), stderr_log(task.task_dir, rank)
                handle = self._launcher.launch(
                    ProcessSpec(
                        argv,
                        env,
                        workdir,
                        out,
                        err,
                        run_as=run_as,
                        stdout_copy=stdout_copy,
                        stderr_copy=stderr_copy,
                        terminal=session,
                    )
                )
                if isinstance(handle, PtyProcess):
                    task.terminal = handle.terminal
                task.processes.append(RankProcess(rank, local_rank, gpu_index, handle, out, err))
        except OSError as exc:
            for started in task.processes:
                started.handle.signal_group(signal.SIGKILL)
            task.processes.clear()
            raise AssignmentRefusedError(f"cannot start {argv[0]!r}: {exc}") from exc
        task.phase = Phase.RUNNING
        self._record_running(task)

    def _record_running(self, task: Task) -> None:
        self._state.add_running(
            RunningTaskRecord(
                job_id=task.job_id,
                task_index=task.task_index,
                lease=task.lease,
                pids=tuple(p.handle.pid for p in task.processes),
                task_dir=str(task.task_dir),
                progress_file=str(task.progress.path),
                assignment=task.assignment.SerializeToString(),
            )
        )

    # -- adopting what a previous agent left running

    def adopt(self, record: RunningTaskRecord) -> bool:
        """Supervises a task a previous agent started (from its running record): its
        processes keep running, are watched by pid, and can be stopped as usual; once they
        are gone the task is reported like any other. False (and nothing adopted) when the
        record lacks the assignment or does not match it."""
        if not record.assignment:
            return False
        assignment = worker_pb2.TaskAssignment()
        try:
            assignment.ParseFromString(record.assignment)
        except DecodeError:
            return False
        if (
            assignment.job_id != record.job_id
            or len(record.pids) != len(assignment.gpu_indices)
            or not record.pids
        ):
            return False
        task = Task(
            job_id=record.job_id,
            task_index=record.task_index,
            lease=record.lease,
            assignment=assignment,
            managed=assignment.spec.WhichOneof("program") != "command",
            task_dir=Path(record.task_dir),
            progress=ProgressTail(Path(record.progress_file)),
            iterations_done=assignment.iterations_done,
            adopted=True,
        )
        for local_rank, (pid, gpu_index) in enumerate(
            zip(record.pids, assignment.gpu_indices, strict=True)
        ):
            rank = assignment.rendezvous.rank_offset + local_rank
            # The process's environment names the lease it was started with, which an
            # extension may since have replaced in the record.
            handle = AdoptedProcess(pid, record.job_id, assignment.lease)
            task.processes.append(
                RankProcess(
                    rank,
                    local_rank,
                    gpu_index,
                    handle,
                    stdout_log(task.task_dir, rank),
                    stderr_log(task.task_dir, rank),
                )
            )
        with self._lock:
            self._tasks[task.key] = task
        return True

    # -- stopping

    def stop(
        self,
        job_id: int,
        lease: int = 0,
        graceful: bool = True,
        grace_s: float = 0.0,
        reason: str = "",
        note: str = "",
        resumes: bool = False,
    ) -> bool:
        """Stops the job's task (only `lease` when non-zero); False when none runs. A
        `note` (the scheduler's decision) is written to the task's log once it stopped; the
        latest one wins, as it tells the job's fate (a cancel after a preemption)."""
        with self._lock:
            tasks = [
                t for t in self._tasks.values() if t.job_id == job_id and lease in (0, t.lease)
            ]
            for task in tasks:
                if note:
                    task.note, task.resumes = note, resumes
                self._request_stop(
                    task, graceful=graceful, grace_s=grace_s, reason=reason, warn=True
                )
            return bool(tasks)

    def _request_stop(
        self, task: Task, graceful: bool, grace_s: float, reason: str, *, warn: bool = False
    ) -> None:
        """Stops the task's processes: SIGTERM, then SIGKILL after the grace (at once when
        not `graceful`). With `warn` (a preemption, its time limit, its lease's end) a task
        that asked for a warning signal gets it first and SIGTERM only its time later."""
        if task.phase == Phase.WAITING:
            # Never started: it exits at once, as stopped.
            task.stop_requested = True
            task.stop_reason = reason
            self._finish(task)
            return
        now = self._clock.monotonic()
        grace = grace_s if grace_s > 0 else self._config.grace_s
        if not task.stop_requested:
            if task.terminal is not None and reason:
                # The person at the terminal learns why the session ends there.
                task.terminal.notice(f"the session is ending: {reason}")
            task.stop_requested = True
            task.stop_reason = reason
            task.phase = Phase.STOPPING
            warning, before_s = task.warning if warn and graceful else (0, 0.0)
            if warning:
                log.info("task_warned", job=task.job_id, lease=task.lease, signal=warning)
                for process in task.alive():
                    process.handle.signal_group(warning)
                task.term_at = now + before_s
                task.kill_at = task.term_at + grace
                return
            for process in task.alive():
                process.handle.signal_group(task.stop_signal if graceful else signal.SIGKILL)
            if not graceful:
                task.killed = True
            task.kill_at = now + grace
        elif not graceful and not task.killed:
            self._kill(task)
        elif task.kill_at is not None:
            # A second, shorter stop request shortens the grace; never lengthens it.
            task.kill_at = min(task.kill_at, now + grace)

    def _kill(self, task: Task) -> None:
        for process in task.alive():
            process.handle.signal_group(signal.SIGKILL)
        task.killed = True

    # -- the periodic work

    def poll(self) -> None:
        with self._lock:
            self._expire_leases()
            now = self._clock.monotonic()
            self._polled_at = now
            for task in list(self._tasks.values()):
                if task.phase == Phase.WAITING:
                    continue
                self._reap(task)
                alive = task.alive()
                if not alive:
                    self._finish(task)
                elif task.term_at is not None and now >= task.term_at and not task.killed:
                    # The warning's time is up: stopped now as without one.
                    task.term_at = None
                    for process in alive:
                        process.handle.signal_group(task.stop_signal)
                elif task.kill_at is not None and now >= task.kill_at and not task.killed:
                    self._kill(task)
            for task in list(self._tasks.values()):
                if task.phase == Phase.WAITING and not any(
                    t.job_id == task.job_id and t.lease < task.lease for t in self._tasks.values()
                ):
                    self._start_waiting(task)

    @staticmethod
    def _write_lease_file(task: Task) -> Path | None:
        """Write when the task's lease ends to its task directory, for the job's runtime.

        The runtime stops the job (checkpoint, exit) once that time has passed, so a job
        whose agent is frozen or gone, and so cannot stop it, still ends with its lease.
        Only preemptible tasks with a lease end get one.
        """
        ends = task.lease_ends_at()
        if ends is None or not task.preemptible:
            return None
        path = task.task_dir / LEASE_FILE_NAME
        try:
            # Rewritten every round and not needed after a crash: no fsync. Readable by the
            # job's user whatever the agent's umask.
            write_atomically(path, f"{ends:.3f}\n", durable=False, mode=0o644)
        except OSError as exc:
            # The agent still stops the task at lease end itself.
            log.warning("could not write the lease file", path=str(path), error=str(exc))
            return None
        return path

    def _expire_leases(self) -> None:
        """Stops preemptible tasks whose lease has ended without renewal."""
        wall = self._clock.time()
        for task in list(self._tasks.values()):
            if task.stop_requested or not task.preemptible:
                continue
            ends = task.lease_ends_at()
            if ends is None or wall < ends:
                continue
            task.lease_expired = True
            reason = self._expiry_reason(task, ends, wall)
            # The master places the job again once the lease (and grace) are over.
            task.note, task.resumes = reason, True
            log.warning("lease_expired", job=task.job_id, lease=task.lease, reason=reason)
            self._request_stop(
                task, graceful=True, grace_s=task.assignment.grace_s, reason=reason, warn=True
            )

    def _expiry_reason(self, task: Task, ends: float, wall: float) -> str:
        """Why a lease ran out, in words: when it ended, and what kept its renewal away."""
        at = datetime.fromtimestamp(ends, UTC).strftime("%H:%M:%S UTC")
        stalled = self._clock.monotonic() - self._polled_at
        if stalled > STALL_S and ends > wall - stalled:
            why = (
                f"this worker agent did not run for {stalled:.0f} s (stopped or suspended), "
                "so it could not take a renewal"
            )
        else:
            why = self._master_state() or "the master did not renew it"
        return f"lease {task.lease} expired at {at} without renewal: {why}"

    def _start_waiting(self, task: Task) -> None:
        try:
            run_as = self._check_start(task.assignment)
            self._spawn(task, run_as)
        except AssignmentRefusedError as exc:
            del self._tasks[task.key]
            self._emit_exit(
                task,
                coordinator_pb2.TaskExitedRequest(
                    kind=common_pb2.EXIT_KIND_FAILED, message=f"could not start: {exc}"
                ),
            )

    def _reap(self, task: Task) -> None:
        for process in task.processes:
            if process.returncode is not None:
                continue
            code = process.handle.poll()
            if code is None:
                continue
            process.returncode = code
            if task.adopted:
                # No status to judge by: the progress file tells how it ended.
                continue
            # A program ended by its warning signal ended as it was asked to.
            asked = (-task.stop_signal, -signal.SIGKILL, -task.warning[0])
            expected = task.stop_requested and code in asked
            if code != 0 and not expected and task.failure is None:
                task.failure = (process.rank, code)
                # The other ranks would wait forever on the collective the failed one left.
                self._request_stop(
                    task, graceful=True, grace_s=0.0, reason=f"rank {process.rank} failed"
                )

    def _finish(self, task: Task) -> None:
        report = coordinator_pb2.TaskExitedRequest()
        record = task.progress.read_last() if task.processes else None
        checkpointed = task.assignment.iterations_done
        if record is not None:
            checkpointed = max(checkpointed, record.checkpoint_iterations)
            task.iterations_done = max(task.iterations_done, record.iterations_done)
        report.iterations_done = checkpointed
        codes = [p.returncode for p in task.processes]
        if task.adopted:
            self._finish_adopted(task, report, record, checkpointed)
        elif not task.processes:
            report.kind = common_pb2.EXIT_KIND_STOPPED
            report.message = f"stopped before it started ({task.stop_reason})"
        elif task.failure is not None:
            rank, code = task.failure
            report.kind = common_pb2.EXIT_KIND_FAILED
            if code < 0:
                report.signal = -code
                what = f"killed by signal {signal.Signals(-code).name}"
            else:
                report.exit_code = code
                what = f"exit code {code}"
            failed = next(p for p in task.processes if p.rank == rank)
            # A traceback or error message is on standard error; some programs print theirs
            # on standard output.
            tail = tail_lines(failed.stderr_path, self._config.failure_tail_lines) or tail_lines(
                failed.stdout_path, self._config.failure_tail_lines
            )
            report.message = f"rank {rank}: {what}" + (f"\n{tail}" if tail else "")
            # The runtime found the job's setup wrong: a retry would fail the same way.
            report.contract_error = contract_error_file(task.task_dir, failed.local_rank).exists()
        elif task.killed:
            report.kind = common_pb2.EXIT_KIND_KILLED
            report.signal = signal.SIGKILL
            report.message = f"killed after the grace period ({task.stop_reason})"
        elif all(code == 0 for code in codes):
            if record is not None and record.event == "exit" and record.exit_reason:
                report.kind = _EXIT_KINDS[record.exit_reason]
                if record.exit_reason == "completed":
                    report.iterations_done = max(checkpointed, record.iterations_done)
            elif task.stop_requested:
                report.kind = common_pb2.EXIT_KIND_STOPPED
            else:
                report.kind = common_pb2.EXIT_KIND_COMPLETED
                if not task.managed:
                    report.iterations_done = task.assignment.spec.iterations
            report.exit_code = 0
        else:
            # Every non-zero status was the SIGTERM it was asked to take: stopped without
            # a checkpoint.
            report.kind = common_pb2.EXIT_KIND_KILLED
            report.signal = task.stop_signal
            report.message = f"terminated on request without a checkpoint ({task.stop_reason})"
        if task.lease_expired and not report.message:
            report.message = f"stopped: {task.stop_reason}"
        if task.note and task.processes and report.kind != common_pb2.EXIT_KIND_COMPLETED:
            # Before the task is forgotten: a log follower reads until then.
            self._write_note(task, task.note + _resume_clause(task, report.iterations_done))
        if task.terminal is not None:
            # An attached reader closes it once it has shown the end.
            task.terminal.release()
        self._tasks.pop(task.key, None)
        self._emit_exit(task, report)

    def _finish_adopted(
        self,
        task: Task,
        report: coordinator_pb2.TaskExitedRequest,
        record: ProgressRecord | None,
        checkpointed: int,
    ) -> None:
        if record is not None and record.event == "exit" and record.exit_reason:
            report.kind = _EXIT_KINDS[record.exit_reason]
            if record.exit_reason == "completed":
                report.iterations_done = max(checkpointed, record.iterations_done)
        elif task.killed:
            report.kind = common_pb2.EXIT_KIND_KILLED
            report.signal = signal.SIGKILL
            report.message = f"killed after the grace period ({task.stop_reason})"
        else:
            report.kind = common_pb2.EXIT_KIND_KILLED
            report.message = (
                "exit status unknown: the task's processes, adopted after a restart of the "
                "worker agent, ended without an exit record in their progress file"
                + (f" ({task.stop_reason})" if task.stop_requested else "")
            )

    def _write_note(self, task: Task, text: str) -> None:
        """The scheduler's `hadar:` line, in the standard error log of the task's first
        rank (one line per task, not one per rank)."""
        try:
            append_scheduler_line(task.task_dir, task.assignment.rendezvous.rank_offset, text)
        except OSError as exc:
            log.warning("could not write to the task's log", job=task.job_id, error=str(exc))

    def _emit_exit(self, task: Task, report: coordinator_pb2.TaskExitedRequest) -> None:
        report.node = self._config.node
        report.job_id = task.job_id
        report.task_index = task.task_index
        report.lease = task.lease
        task.phase = Phase.EXITED
        lines = report.message.strip().splitlines()
        log.info(
            "task_ended",
            job=task.job_id,
            lease=task.lease,
            kind=_kind_name(report.kind),
            iterations=report.iterations_done,
            # The first line: a failure's output tail stays in the task's logs.
            why=lines[0] if lines else (task.stop_reason or _kind_name(report.kind).lower()),
        )
        # Durable before the task is forgotten: a crash now still reports the exit.
        self._state.add_exit(report)
        self._state.remove_running(task.job_id, task.lease)
        self._state.record_lease_exit(task.job_id, task.lease, report.kind)
        self._on_exit()

    # -- progress and status

    def collect_progress(self) -> list[coordinator_pb2.ProgressReport]:
        """The newest progress record of every task not yet relayed. Call
        :meth:`mark_reported` once the master has them."""
        reports: list[coordinator_pb2.ProgressReport] = []
        with self._lock:
            for task in self._tasks.values():
                if task.phase == Phase.WAITING or not task.managed:
                    continue
                task.progress.read_new()
                record = task.progress.last
                if record is None or record.at <= task.reported_at:
                    continue
                task.iterations_done = max(task.iterations_done, record.iterations_done)
                at = Timestamp()
                at.FromNanoseconds(int(record.at * 1e9))
                reports.append(
                    coordinator_pb2.ProgressReport(
                        job_id=task.job_id,
                        task_index=task.task_index,
                        lease=task.lease,
                        iterations_done=record.iterations_done,
                        iterations_per_s=record.iterations_per_s,
                        samples_per_s=record.samples_per_s,
                        loss=record.loss,
                        at=at,
                        checkpoint_iterations=record.checkpoint_iterations,
                        gpu_type=task.assignment.gpu_type,
                    )
                )
        return reports

    def mark_reported(self, reports: Sequence[coordinator_pb2.ProgressReport]) -> None:
        with self._lock:
            for report in reports:
                task = self._tasks.get((report.job_id, report.lease))
                if task is not None:
                    task.reported_at = max(task.reported_at, report.at.ToNanoseconds() / 1e9)

    def snapshot(self) -> list[common_pb2.WorkerTask]:
        with self._lock:
            return [
                common_pb2.WorkerTask(
                    job_id=t.job_id,
                    task_index=t.task_index,
                    lease=t.lease,
                    state=_TASK_STATES[t.phase],
                    gpu_indices=list(t.assignment.gpu_indices),
                    iterations_done=t.iterations_done,
                    pids=[p.handle.pid for p in t.processes if p.returncode is None],
                )
                for t in self._tasks.values()
            ]

    def task_dirs(self, job_id: int) -> list[Path]:
        """Task directories of the job on disk, newest lease first (exited tasks too)."""
        root = self._config.state_dir / "tasks"
        found: list[tuple[int, Path]] = []
        if root.is_dir():
            for path in root.glob(f"job-{job_id}.task-*.lease-*"):
                try:
                    found.append((int(path.name.rsplit("-", 1)[1]), path))
                except ValueError:
                    continue
        return [p for _, p in sorted(found, reverse=True)]

    def prune_task_dirs(self, max_age_s: float, now: float) -> list[Path]:
        """Deletes the logs and progress files of jobs that have left this node: a job's
        task directories (one per attempt that ran here) all go together, once none of its
        tasks runs here and none of its files has changed for `max_age_s` (by Unix time
        `now`). An earlier attempt's output thus lasts as long as the job's latest one.
        Returns what was deleted."""
        root = self._config.state_dir / "tasks"
        if not root.is_dir():
            return []
        with self._lock:
            live_jobs = {t.job_id for t in self._tasks.values()}
        by_job: dict[int | None, list[Path]] = {}
        for path in root.iterdir():
            if path.is_dir():
                by_job.setdefault(job_of(path), []).append(path)
        removed: list[Path] = []
        for job_id, paths in by_job.items():
            if job_id in live_jobs:
                continue
            # A directory not named like a task's is judged alone.
            groups = [paths] if job_id is not None else [[p] for p in paths]
            for group in groups:
                try:
                    newest = max(
                        max([p.stat().st_mtime, *(f.stat().st_mtime for f in p.iterdir())])
                        for p in group
                    )
                except OSError:
                    continue
                if now - newest > max_age_s:
                    for path in group:
                        shutil.rmtree(path, ignore_errors=True)
                        removed.append(path)
        return removed

    def live_task_dir(self, job_id: int, lease: int) -> Path | None:
        """The directory of the job's task that runs under `lease` now (an extension may
        have given it a newer lease than the one its directory is named after)."""
        with self._lock:
            task = self._tasks.get((job_id, lease))
            return task.task_dir if task is not None else None

    def runs_in(self, task_dir: Path) -> bool:
        """Whether a task whose processes write to `task_dir` is still supervised."""
        with self._lock:
            return any(t.task_dir == task_dir for t in self._tasks.values())

    def terminal(self, job_id: int, lease: int) -> Terminal | None:
        """The terminal of the job's interactive task of `lease` while it runs here."""
        with self._lock:
            task = self._tasks.get((job_id, lease))
            if task is None or task.terminal is None or task.phase is Phase.EXITED:
                return None
            return task.terminal

    def is_running(self, job_id: int, lease: int) -> bool:
        with self._lock:
            return (job_id, lease) in self._tasks

    def running_keys(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._tasks)

    def stop_all(self, graceful: bool, grace_s: float, reason: str) -> None:
        with self._lock:
            for task in list(self._tasks.values()):
                self._request_stop(task, graceful=graceful, grace_s=grace_s, reason=reason)


def contract_error_file(task_dir: Path, local_rank: int) -> Path:
    """Where a rank's runtime writes an uncaught ContractError (HADAR_ERROR_FILE)."""
    return task_dir / f"contract-error-rank{local_rank}.txt"


def _resume_clause(task: Task, checkpoint: int, resumes: bool | None = None) -> str:
    """Where the job goes on from, for its `hadar:` line: the checkpoint it resumes from,
    or, when it does not run again, the last checkpoint it saved."""
    if resumes if resumes is not None else task.resumes:
        if not task.managed:
            return "; runs again from the start"
        if checkpoint:
            return f"; resumes from checkpoint at iteration {checkpoint}"
        return "; restarts from the beginning (no checkpoint yet)"
    if task.managed and checkpoint:
        return f"; last checkpoint at iteration {checkpoint}"
    return ""


def free_port() -> int:
    """A port free on this host now, for a single-node task without a rendezvous from the
    master (as torchrun's standalone mode does; all the task's ranks get the same one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

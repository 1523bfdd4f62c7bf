"""What the agent keeps on disk so a restart loses nothing: the highest lease applied per job
(fencing), exit reports the master has not acknowledged, and the processes and assignments
of running tasks (so a restarted agent can adopt them).

Each file is rewritten whole and atomically (temporary file, fsync, rename) before the agent
acts on the change it records.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from protos.hadar.v1 import coordinator_pb2

ExitKey = tuple[int, int, int]  # job_id, task_index, lease


def exit_key(report: coordinator_pb2.TaskExitedRequest) -> ExitKey:
    return (report.job_id, report.task_index, report.lease)


def write_atomically(
    path: Path, data: str, *, durable: bool = True, mode: int | None = None
) -> None:
    """Replace ``path`` with ``data`` in one rename; ``durable`` also syncs it to disk,
    ``mode`` sets its permissions before it appears (owner-only by default: the agent's
    state holds jobs' assignments, environment values included)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        # A corrupt file must not stop the agent; keep it aside for a person to inspect.
        path.replace(path.with_name(path.name + ".corrupt"))
        raise StateCorruptError(
            f"{path} was unreadable ({exc}); moved to {path.name}.corrupt"
        ) from exc


class StateCorruptError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class RunningTaskRecord:
    job_id: int
    task_index: int
    lease: int
    pids: tuple[int, ...]
    task_dir: str
    # Rank-0 progress file, read for the exit of a task whose agent died.
    progress_file: str
    # The TaskAssignment that started the task (serialized), so a restarted agent can adopt
    # it; empty in records of agents that did not keep it.
    assignment: bytes = b""


class StateStore:
    """The agent's durable state under ``<state_dir>/agent``."""

    # Leases of this many jobs are remembered (the oldest are forgotten first).
    MAX_LEASES = 10_000

    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir / "agent"
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._dir.chmod(0o700)
        self._lock = threading.Lock()
        self.warnings: list[str] = []
        self._leases: dict[int, int] = {}
        # How the newest lease of a job ended, once it has (an ExitKind value).
        self._lease_exits: dict[int, int] = {}
        self._exits: dict[ExitKey, coordinator_pb2.TaskExitedRequest] = {}
        self._running: dict[tuple[int, int], RunningTaskRecord] = {}
        self._load()

    # -- loading

    def _load_file(self, name: str, default: Any) -> Any:
        try:
            return _read_json(self._dir / name, default)
        except StateCorruptError as exc:
            self.warnings.append(str(exc))
            return default

    def _load(self) -> None:
        leases = self._load_file("leases.json", {})
        for job, entry in leases.items():
            lease, kind = entry if isinstance(entry, list) else (entry, 0)
            self._leases[int(job)] = int(lease)
            if kind:
                self._lease_exits[int(job)] = int(kind)
        for raw in self._load_file("exits.json", []):
            report = json_format.ParseDict(raw, coordinator_pb2.TaskExitedRequest())
            self._exits[exit_key(report)] = report
        for raw in self._load_file("running.json", []):
            record = RunningTaskRecord(
                job_id=int(raw["job_id"]),
                task_index=int(raw["task_index"]),
                lease=int(raw["lease"]),
                pids=tuple(int(p) for p in raw["pids"]),
                task_dir=str(raw["task_dir"]),
                progress_file=str(raw["progress_file"]),
                assignment=base64.b64decode(raw.get("assignment", "")),
            )
            self._running[(record.job_id, record.lease)] = record

    # -- leases

    def lease(self, job_id: int) -> int | None:
        with self._lock:
            return self._leases.get(job_id)

    def lease_exit(self, job_id: int, lease: int) -> int | None:
        """How `lease` of the job ended on this node (an ExitKind value), if it has."""
        with self._lock:
            if self._leases.get(job_id) != lease:
                return None
            return self._lease_exits.get(job_id)

    def record_lease(self, job_id: int, lease: int) -> None:
        with self._lock:
            if self._leases.get(job_id, -1) >= lease:
                return
            self._leases.pop(job_id, None)
            self._leases[job_id] = lease
            self._lease_exits.pop(job_id, None)
            while len(self._leases) > self.MAX_LEASES:
                oldest = next(iter(self._leases))
                del self._leases[oldest]
                self._lease_exits.pop(oldest, None)
            self._write_leases()

    def record_lease_exit(self, job_id: int, lease: int, kind: int) -> None:
        with self._lock:
            if self._leases.get(job_id) != lease:
                return
            self._lease_exits[job_id] = kind
            self._write_leases()

    def _write_leases(self) -> None:
        write_atomically(
            self._dir / "leases.json",
            json.dumps(
                {
                    str(job): [lease, self._lease_exits.get(job, 0)]
                    for job, lease in self._leases.items()
                }
            ),
        )

    # -- exit outbox

    def add_exit(self, report: coordinator_pb2.TaskExitedRequest) -> None:
        with self._lock:
            self._exits[exit_key(report)] = report
            self._write_exits()

    def pending_exits(self) -> list[coordinator_pb2.TaskExitedRequest]:
        with self._lock:
            return list(self._exits.values())

    def ack_exit(self, key: ExitKey) -> None:
        with self._lock:
            if self._exits.pop(key, None) is not None:
                self._write_exits()

    def _write_exits(self) -> None:
        write_atomically(
            self._dir / "exits.json",
            json.dumps([json_format.MessageToDict(r) for r in self._exits.values()]),
        )

    # -- running tasks

    def running(self) -> list[RunningTaskRecord]:
        with self._lock:
            return list(self._running.values())

    def add_running(self, record: RunningTaskRecord) -> None:
        with self._lock:
            self._running[(record.job_id, record.lease)] = record
            self._write_running()

    def remove_running(self, job_id: int, lease: int) -> None:
        with self._lock:
            if self._running.pop((job_id, lease), None) is not None:
                self._write_running()

    def _write_running(self) -> None:
        write_atomically(
            self._dir / "running.json",
            json.dumps(
                [
                    {
                        "job_id": r.job_id,
                        "task_index": r.task_index,
                        "lease": r.lease,
                        "pids": list(r.pids),
                        "task_dir": r.task_dir,
                        "progress_file": r.progress_file,
                        "assignment": base64.b64encode(r.assignment).decode(),
                    }
                    for r in self._running.values()
                ]
            ),
        )

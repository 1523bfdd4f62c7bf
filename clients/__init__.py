"""Hadar's typed Python client (:class:`HadarClient`) and the ``hctl`` command line."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clients.client import HadarClient
    from clients.errors import (
        Conflict,
        DeadlineExceeded,
        HadarError,
        InvalidArgument,
        NotFound,
        PermissionDenied,
        ResourceExhausted,
        Unauthenticated,
        Unavailable,
    )
    from clients.types import (
        ACTIVE_JOB_STATES,
        TERMINAL_JOB_STATES,
        ClusterStatus,
        CreatedToken,
        Delivery,
        DeliveryStatus,
        Dependency,
        FairShareReport,
        FairShareRow,
        Gpu,
        GpuHealth,
        GpuTypeSummary,
        Identity,
        Job,
        JobDescription,
        JobEvent,
        JobRecord,
        JobSpec,
        JobState,
        JobUpdate,
        LogChunk,
        LogStream,
        Node,
        NodeState,
        NotifyDefault,
        Program,
        ProgramKind,
        RoundSummary,
        Task,
        TaskState,
        TerminalInput,
        TerminalOutput,
        Throughput,
        TokenInfo,
        UsageGrouping,
        UsageReport,
        UsageRow,
        Workload,
    )

__all__ = [
    "ACTIVE_JOB_STATES",
    "TERMINAL_JOB_STATES",
    "ClusterStatus",
    "Conflict",
    "CreatedToken",
    "DeadlineExceeded",
    "Delivery",
    "DeliveryStatus",
    "Dependency",
    "FairShareReport",
    "FairShareRow",
    "Gpu",
    "GpuHealth",
    "GpuTypeSummary",
    "HadarClient",
    "HadarError",
    "Identity",
    "InvalidArgument",
    "Job",
    "JobDescription",
    "JobEvent",
    "JobRecord",
    "JobSpec",
    "JobState",
    "JobUpdate",
    "LogChunk",
    "LogStream",
    "Node",
    "NodeState",
    "NotFound",
    "NotifyDefault",
    "PermissionDenied",
    "Program",
    "ProgramKind",
    "ResourceExhausted",
    "RoundSummary",
    "Task",
    "TaskState",
    "TerminalInput",
    "TerminalOutput",
    "Throughput",
    "TokenInfo",
    "Unauthenticated",
    "Unavailable",
    "UsageGrouping",
    "UsageReport",
    "UsageRow",
    "Workload",
]


def __getattr__(name: str) -> Any:
    # Every run of `hctl` imports this package (`hctl --version` included): a name loads its
    # module when first used, so that the client (gRPC, the generated messages) and the
    # model's many dataclasses cost nothing to a command that needs neither.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "HadarClient":
        home = "clients.client"
    elif name in _ERRORS:
        home = "clients.errors"
    else:
        home = "clients.types"
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


_ERRORS = frozenset(
    {
        "Conflict",
        "DeadlineExceeded",
        "HadarError",
        "InvalidArgument",
        "NotFound",
        "PermissionDenied",
        "ResourceExhausted",
        "Unauthenticated",
        "Unavailable",
    }
)

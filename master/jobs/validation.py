"""Validation of submitted job specs: every field, with an error that names it."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from pathlib import PurePath, PurePosixPath

from master import fields
from master.errors import InvalidArgumentError
from master.jobs.notifications import check_states
from master.jobs.workloads import workload_info
from master.scheduling.memory import fits, format_memory
from protos import bounds, jobenv, warnsignal
from protos.hadar.v1 import common_pb2
from protos.numbers import MAX_RETRIES, TIME_LIMIT_MAX_S
from store.domain import JobSpec
from store.states import JobState, ProgramKind

NAME_MAX = 128
# Field sizes, in bytes of UTF-8 where text: generous for real jobs, small enough that one
# spec cannot bloat the database, every round's snapshot and every assignment pushed.
WORKLOAD_MAX = 128
JOB_TYPE_MAX = 255
GPU_TYPE_MAX = 64
ALLOWED_GPU_TYPES_MAX = 64
ARGV_MAX_ITEMS = 4096
ARGV_MAX_BYTES = 64 * 1024
ENV_MAX_ITEMS = jobenv.MAX_ITEMS
ENV_MAX_BYTES = jobenv.MAX_BYTES
PATH_MAX_BYTES = 4096
ENV_NAME = jobenv.NAME
# The replacements a worker makes in an output file name (worker/agent/tasklogs.py).
OUTPUT_PATTERN = re.compile(r"%(.?)", re.DOTALL)
OUTPUT_REPLACEMENTS = frozenset("jux%")
ARRAY_REPLACEMENTS = frozenset("Aa")
# JobSpec's field for each dependency kind.
DEPENDENCY_FIELDS = {"afterok": "after_ok", "afterany": "after_any", "afterfail": "after_fail"}
# Dependencies one job may list.
DEPENDENCIES_MAX = 100


def _dependencies(spec: common_pb2.JobSpec) -> tuple[tuple[str, int], ...]:
    """(kind, job id) pairs, each once, in the order given."""
    pairs: list[tuple[str, int]] = []
    for kind, attr in DEPENDENCY_FIELDS.items():
        for job_id in getattr(spec, attr):
            if job_id < 1:
                raise InvalidArgumentError(f"spec.{attr}", "job ids are >= 1")
            fields.int64(job_id, f"spec.{attr}")
            if (kind, job_id) not in pairs:
                pairs.append((kind, job_id))
    if len(pairs) > DEPENDENCIES_MAX:
        raise InvalidArgumentError(
            "spec.after_ok", f"{len(pairs)} dependencies; at most {DEPENDENCIES_MAX} allowed"
        )
    return tuple(pairs)


IDEMPOTENCY_KEY_MAX = 255


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the cluster offers, as registered workers reported it."""

    gpus_by_type: Mapping[str, int] = field(default_factory=dict)
    workloads: Set[str] = frozenset()
    # type -> memory of its smallest GPU in bytes (0: unknown), as the scheduler counts it.
    gpu_memory_by_type: Mapping[str, int] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        """Whether any worker has registered; before that, placement cannot be judged."""
        return bool(self.gpus_by_type)


def validate_spec(spec: common_pb2.JobSpec, facts: ClusterFacts) -> JobSpec:
    """A validated, normalized store spec; InvalidArgumentError names the first bad field."""
    name = spec.name.strip()
    if not 1 <= len(name) <= NAME_MAX:
        raise InvalidArgumentError("spec.name", f"must be 1 to {NAME_MAX} characters")
    fields.printable(name, "spec.name")
    if not 1 <= spec.num_gpus <= bounds.NUM_GPUS_MAX:
        raise InvalidArgumentError("spec.num_gpus", f"must be 1 to {bounds.NUM_GPUS_MAX}")
    # An opaque command may leave its amount of work unknown (0): it runs until it exits.
    least = 0 if spec.WhichOneof("program") == "command" else 1
    if not least <= spec.iterations <= bounds.ITERATIONS_MAX:
        raise InvalidArgumentError(
            "spec.iterations",
            f"must be 1 to {bounds.ITERATIONS_MAX} (10^12)"
            + (" (0: unknown, for a command)" if least == 0 else ""),
        )
    if spec.batch_size > bounds.BATCH_SIZE_MAX:
        raise InvalidArgumentError(
            "spec.batch_size",
            f"must be at most {bounds.BATCH_SIZE_MAX} (0: the workload's default)",
        )
    if not 0 <= spec.gpu_memory_bytes <= bounds.GPU_MEMORY_MAX_BYTES:
        raise InvalidArgumentError(
            "spec.gpu_memory_bytes",
            f"must be 0 (any GPU) to {bounds.GPU_MEMORY_MAX_BYTES} bytes "
            f"({format_memory(bounds.GPU_MEMORY_MAX_BYTES)})",
        )
    # Unset (0) means the default weight; NaN fails the range check as well.
    priority = spec.priority or 1.0
    if not bounds.valid_priority(priority):
        raise InvalidArgumentError(
            "spec.priority",
            f"must be from {bounds.PRIORITY_RANGE} (0 means 1), got {spec.priority!r}",
        )

    program = spec.WhichOneof("program")
    workload = ""
    argv: tuple[str, ...] = ()
    if program is None:
        raise InvalidArgumentError("spec.program", "one of workload, script or command is required")
    if program == "workload":
        kind = ProgramKind.WORKLOAD
        workload = spec.workload.name.strip()
        if not workload:
            raise InvalidArgumentError("spec.workload.name", "must not be empty")
        fields.label(workload, "spec.workload.name", WORKLOAD_MAX)
        if facts.known and workload not in facts.workloads:
            known = ", ".join(sorted(facts.workloads)) or "(none)"
            raise InvalidArgumentError(
                "spec.workload.name", f"unknown workload {workload!r}; workers offer: {known}"
            )
    else:
        kind = ProgramKind.SCRIPT if program == "script" else ProgramKind.COMMAND
        argv = tuple(spec.script.argv if program == "script" else spec.command.argv)
        if not argv or not argv[0].strip():
            raise InvalidArgumentError(f"spec.{program}.argv", "needs at least a program to run")
        if any("\0" in arg for arg in argv):
            raise InvalidArgumentError(f"spec.{program}.argv", "must not contain NUL characters")
        _check_size(
            f"spec.{program}.argv",
            len(argv),
            sum(len(arg.encode()) + 1 for arg in argv),
            ARGV_MAX_ITEMS,
            ARGV_MAX_BYTES,
            "arguments",
        )

    managed = kind is not ProgramKind.COMMAND
    # A command asked to be preemptible is stopped and started again from scratch.
    preemptible = spec.preemptible if spec.HasField("preemptible") else managed
    _check_warning(spec)
    if spec.shareable and not managed:
        raise InvalidArgumentError("spec.shareable", "opaque commands cannot share GPUs")
    if spec.forkable and not managed:
        raise InvalidArgumentError(
            "spec.forkable",
            "opaque commands cannot run as averaged copies (copies need the runtime helper)",
        )
    if spec.forkable and not preemptible:
        raise InvalidArgumentError(
            "spec.forkable", "a job that may not be preempted cannot run as averaged copies"
        )
    if spec.interactive:
        _check_interactive(spec, kind)

    allowed: list[str] = []
    if len(spec.allowed_gpu_types) > ALLOWED_GPU_TYPES_MAX:
        raise InvalidArgumentError(
            "spec.allowed_gpu_types", f"at most {ALLOWED_GPU_TYPES_MAX} GPU types"
        )
    for i, raw_type in enumerate(spec.allowed_gpu_types):
        gpu_type = raw_type.strip()
        if not gpu_type:
            raise InvalidArgumentError(f"spec.allowed_gpu_types[{i}]", "must not be empty")
        if len(gpu_type) > GPU_TYPE_MAX:
            raise InvalidArgumentError(
                f"spec.allowed_gpu_types[{i}]", f"must be at most {GPU_TYPE_MAX} characters"
            )
        fields.printable(gpu_type, f"spec.allowed_gpu_types[{i}]")
        if facts.known and gpu_type not in facts.gpus_by_type:
            have = ", ".join(sorted(facts.gpus_by_type))
            raise InvalidArgumentError(
                f"spec.allowed_gpu_types[{i}]", f"no GPU of type {gpu_type!r}; cluster has: {have}"
            )
        if gpu_type not in allowed:
            allowed.append(gpu_type)
    if facts.known:
        usable = sum(
            count for t, count in facts.gpus_by_type.items() if not allowed or t in allowed
        )
        if spec.num_gpus > usable:
            where = f"of types {', '.join(allowed)}" if allowed else "in total"
            raise InvalidArgumentError(
                "spec.num_gpus",
                f"asks for {spec.num_gpus} GPUs but the cluster has {usable} {where}",
            )
        _check_memory(spec, allowed, facts)

    _check_size(
        "spec.env",
        len(spec.env),
        sum(len(k.encode()) + len(v.encode()) + 2 for k, v in spec.env.items()),
        ENV_MAX_ITEMS,
        ENV_MAX_BYTES,
        "variables",
    )
    for key in spec.env:
        if not ENV_NAME.match(key):
            raise InvalidArgumentError(
                f"spec.env[{key!r}]", "variable names match [A-Za-z_][A-Za-z0-9_]*"
            )
        if "\0" in spec.env[key]:
            raise InvalidArgumentError(f"spec.env[{key!r}]", "must not contain NUL characters")
        owned = jobenv.runtime_owned(key)
        if owned:
            raise InvalidArgumentError(f"spec.env[{key!r}]", f"{owned}; leave it out of the env")
    workdir = _directory("spec.workdir", spec.workdir)
    checkpoint_dir = _directory("spec.checkpoint_dir", spec.checkpoint_dir)

    max_retries: int | None = None
    if spec.HasField("max_retries"):
        max_retries = spec.max_retries
        if max_retries > MAX_RETRIES:
            raise InvalidArgumentError(
                "spec.max_retries", f"must be at most {MAX_RETRIES} (0 never retries)"
            )
    if spec.time_limit_s > TIME_LIMIT_MAX_S:
        raise InvalidArgumentError(
            "spec.time_limit_s", f"must be at most {TIME_LIMIT_MAX_S} seconds (366 days)"
        )
    for attr in ("output", "error"):
        value: str = getattr(spec, attr)
        fields.printable(value, f"spec.{attr}")
        if len(value.encode()) > PATH_MAX_BYTES:
            raise InvalidArgumentError(f"spec.{attr}", f"must be at most {PATH_MAX_BYTES} bytes")
        _check_output_pattern(value, f"spec.{attr}", array=bool(spec.array.strip()))
    dependencies = _dependencies(spec)

    notify_on = notify_states(spec.notify_on, "spec.notify_on")
    fields.printable(spec.notify_url, "spec.notify_url")
    if spec.no_notify and (spec.notify_url.strip() or notify_on):
        raise InvalidArgumentError(
            "spec.no_notify", "asks for no notification, but notify_url or notify_on asks for one"
        )

    batch_size = spec.batch_size
    job_type = spec.job_type.strip()
    fields.label(job_type, "spec.job_type", JOB_TYPE_MAX)
    if kind is ProgramKind.WORKLOAD:
        info = workload_info(workload)
        batch_size = batch_size or info.default_batch_size
        job_type = job_type or info.job_type(batch_size)
    elif not job_type:
        suffix = f" (batch size {batch_size})" if batch_size else ""
        job_type = PurePath(argv[0]).name[: JOB_TYPE_MAX - len(suffix)] + suffix
    if batch_size and batch_size < spec.num_gpus:
        raise InvalidArgumentError(
            "spec.batch_size", f"global batch {batch_size} is smaller than num_gpus {spec.num_gpus}"
        )

    return JobSpec(
        name=name,
        num_gpus=spec.num_gpus,
        iterations=spec.iterations,
        program_kind=kind,
        workload=workload,
        argv=argv,
        batch_size=batch_size,
        priority=priority,
        allowed_gpu_types=tuple(allowed),
        preemptible=preemptible,
        shareable=spec.shareable,
        forkable=spec.forkable,
        env=tuple(sorted(spec.env.items())),
        workdir=workdir,
        checkpoint_dir=checkpoint_dir,
        job_type=job_type,
        gpu_memory_bytes=spec.gpu_memory_bytes,
        max_retries=max_retries,
        output=spec.output,
        error=spec.error,
        time_limit_s=spec.time_limit_s,
        array=spec.array.strip(),
        dependencies=dependencies,
        # Checked against the cluster's webhook settings by the caller (check_url).
        notify_url=spec.notify_url.strip(),
        notify_on=notify_on,
        no_notify=spec.no_notify,
        warn_signal=spec.warn_signal,
        warn_before_s=spec.warn_before_s,
        interactive=spec.interactive,
    )


def _check_interactive(spec: common_pb2.JobSpec, kind: ProgramKind) -> None:
    """An interactive session is one command under one terminal, attached to by a person:
    nothing may stop it to run it again, copy it, or fan it out."""
    field = "spec.interactive"
    if kind is not ProgramKind.COMMAND:
        raise InvalidArgumentError(field, "an interactive session runs a command (spec.command)")
    if spec.HasField("preemptible") and spec.preemptible:
        raise InvalidArgumentError(
            field, "an interactive session is never preempted; leave spec.preemptible unset"
        )
    if spec.array.strip():
        raise InvalidArgumentError(field, "an interactive session cannot be an array")
    if spec.HasField("max_retries") and spec.max_retries:
        raise InvalidArgumentError(field, "an interactive session is never retried")
    if spec.output or spec.error:
        raise InvalidArgumentError(
            field, "an interactive session keeps no output files (its output is the terminal)"
        )


def _check_warning(spec: common_pb2.JobSpec) -> None:
    """sbatch --signal's warning: a catchable signal and a time, or neither."""
    if not spec.warn_signal:
        if spec.warn_before_s:
            raise InvalidArgumentError(
                "spec.warn_before_s", "a warning time needs a warn_signal to send"
            )
        return
    problem = warnsignal.check_signal(spec.warn_signal)
    if problem:
        raise InvalidArgumentError("spec.warn_signal", problem)
    problem = warnsignal.check_before(spec.warn_before_s)
    if problem:
        raise InvalidArgumentError("spec.warn_before_s", problem)


def notify_states(values: Iterable[int], field: str) -> tuple[JobState, ...]:
    """Job states from the wire that a webhook is told of: end states only."""
    states: list[JobState] = []
    for i, value in enumerate(values):
        name = common_pb2.JobState.Name(value) if value in common_pb2.JobState.values() else ""
        state = name.removeprefix("JOB_STATE_")
        if state not in JobState.__members__:
            raise InvalidArgumentError(f"{field}[{i}]", f"unknown job state {value}")
        states.append(JobState(state))
    return check_states(states, field)


def _check_memory(spec: common_pb2.JobSpec, allowed: list[str], facts: ClusterFacts) -> None:
    """Refuses a memory request that not enough of the cluster's GPUs can hold: the
    scheduler would never place the job."""
    need = spec.gpu_memory_bytes
    if need <= 0:
        return
    types = [t for t in sorted(facts.gpus_by_type) if not allowed or t in allowed]
    memory = {t: facts.gpu_memory_by_type.get(t, 0) for t in types}
    large = [t for t in types if fits(need, memory[t])]
    count = sum(facts.gpus_by_type[t] for t in large)
    if count >= spec.num_gpus:
        return
    where = f" of types {', '.join(allowed)}" if allowed else ""
    if not large:
        raise InvalidArgumentError(
            "spec.gpu_memory_bytes",
            f"asks for {format_memory(need)} per GPU but the largest GPU memory in the "
            f"cluster{where} is {format_memory(max(memory.values(), default=0))}",
        )
    raise InvalidArgumentError(
        "spec.gpu_memory_bytes",
        f"asks for {spec.num_gpus} GPUs with {format_memory(need)} each but the cluster has "
        f"{count} that large ({', '.join(large)})",
    )


def _directory(field_path: str, value: str) -> str:
    """A directory on the workers: empty (the default), or absolute without ``..``, returned
    normalized (no repeated or trailing slashes, no ``.``), so the path the workers use is
    the one checked here and the one `hctl show` prints."""
    if not value:
        return ""
    fields.printable(value, field_path)
    if len(value.encode()) > PATH_MAX_BYTES:
        raise InvalidArgumentError(field_path, f"must be at most {PATH_MAX_BYTES} bytes")
    path = PurePosixPath(value)
    if not path.is_absolute():
        raise InvalidArgumentError(field_path, f"must be an absolute path, got {value!r}")
    if ".." in path.parts:
        raise InvalidArgumentError(field_path, f"must not contain '..' components, got {value!r}")
    return "/" + "/".join(path.parts[1:])


def _check_output_pattern(pattern: str, field_path: str, *, array: bool = False) -> None:
    """An sbatch-style file name: only the replacements the worker makes (%j, %u, %x, %%),
    for an array's elements also %A and %a (the master makes those), and a name, not a
    directory."""
    allowed = OUTPUT_REPLACEMENTS | ARRAY_REPLACEMENTS if array else OUTPUT_REPLACEMENTS
    for match in OUTPUT_PATTERN.finditer(pattern):
        if match.group(1) in ARRAY_REPLACEMENTS and not array:
            raise InvalidArgumentError(
                field_path, f"%{match.group(1)} names an array's id or index; the job is no array"
            )
        if match.group(1) not in allowed:
            raise InvalidArgumentError(
                field_path,
                f"unknown replacement %{match.group(1)} (allowed: %j job id, %u user, "
                "%x job name, %A array id, %a array index, %% a percent sign)",
            )
    if pattern and (pattern.endswith("/") or PurePath(pattern).name in ("", ".", "..")):
        raise InvalidArgumentError(field_path, "must name a file, not a directory")


def _check_size(
    field_path: str, items: int, size: int, max_items: int, max_bytes: int, what: str
) -> None:
    if items > max_items:
        raise InvalidArgumentError(field_path, f"{items} {what}; at most {max_items} allowed")
    if size > max_bytes:
        raise InvalidArgumentError(
            field_path, f"{size} bytes in all; at most {max_bytes} bytes allowed"
        )


def validate_idempotency_key(key: str) -> str:
    return fields.label(key, "idempotency_key", IDEMPOTENCY_KEY_MAX)


def spec_digest(spec: JobSpec) -> str:
    """A digest of a validated spec that two submissions share exactly when they ask for
    the same job, kept with an idempotency key to tell a resend from a reuse of the key.

    Only fields that differ from their defaults are included, so a field added to JobSpec
    later leaves the digests of keys already stored unchanged. Give it the spec as asked
    for, before the cluster's defaults (the default time limit) are applied: a resend
    after the cluster's settings changed is still the same request.
    """
    canonical: dict[str, object] = {}
    for spec_field in dataclasses.fields(JobSpec):
        value = getattr(spec, spec_field.name)
        if value == spec_field.default:
            continue
        canonical[spec_field.name] = _plain(value)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value

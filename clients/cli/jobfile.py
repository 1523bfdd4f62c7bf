"""Job specs from a TOML file (``hctl submit -f job.toml``) and from submit's flags.

The file's keys (all optional except the amount of work and what to run)::

    name = "resnet-lr0.1"            # default: the workload or script name
    gpus = 2                         # GPUs (data-parallel workers), default 1
    iterations = 5000                # training iterations (global batches); required but
                                     # for a command (absent: it runs until it exits)
    batch_size = 128                 # global batch; 0 or absent: the workload's default
    priority = 1.0                   # weight in fairness policies, 0.001 to 1000
    gpu_types = ["v100", "a100-40gb"]  # allowed GPU types; absent: any
    preemptible = true               # absent: true for managed jobs, false for commands;
                                     # a preemptible command is requeued and run again
    signal = "USR1@60"               # sbatch --signal: warn with SIGUSR1 60 s before a
                                     # preemption or the time limit stops the job
    shareable = false                # may share GPUs by gradient accumulation
    elastic = false                  # may run as averaged copies on idle servers
    workdir = "/home/alice/proj"     # relative: to where hctl runs; absent: that directory
                                     # (for commands and scripts)
    export = "ALL"                   # the environment sent, as sbatch --export: ALL (the
                                     # default for commands and scripts), NONE (the default
                                     # for workloads), or NAME,NAME=VALUE,...
    checkpoint_dir = "/shared/ckpt/alice"
    job_type = "ResNet-18 (batch size 128)"   # key for the throughput model
    gpu_memory = "12GiB"             # memory each GPU must have; smaller GPUs are never used
    retries = 2                      # failed attempts retried, 0 to 10; absent: none for
                                     # commands, the cluster's max_retries otherwise
    output = "train-%j.out"          # also append standard output here (%j: the job id)
    error = "train-%j.err"           # and standard error here (absent: to `output`)
    time = "2h"                      # time limit, as sbatch --time: 30s, 90m, 2h, 1d,
                                     # MM:SS, HH:MM:SS, D-HH:MM:SS (a bare number: minutes)
    array = "0-31%4"                 # a job array, as sbatch --array: 0-31, 1,3,5, 0-15:4,
                                     # %N: at most N elements running at once
    after_ok = [12, 13]              # start once these jobs completed (an array's id: all
                                     # its elements); cancelled if one ends otherwise
    after_any = [14]                 # start once these jobs ended, however they ended
    after_fail = [15]                # start once these ended and not all completed
    dependency = "afterok:12:13"     # the same, as sbatch --dependency writes it
    notify = "https://ntfy.example.org/alice-jobs"  # webhook POSTed when the job ends
                                     # (absent: your default, `hctl notify set`)
    notify_on = "end"                # which ends: end (completed, failed, timeout; the
                                     # default), fail (failed, timeout), all (and
                                     # cancelled), a list of those states, or none
                                     # (not even your default webhook)
    hold = true                      # store it held: it starts once `hctl release ID`
                                     # lets it (sbatch --hold)

    # exactly one of:
    workload = "resnet"              # a built-in workload (see `hctl workloads`)
    script = ["python", "train.py"]  # a script using the runtime helper (managed)
    command = "bash run.sh"          # an opaque command (a string is split like a shell)

    [env]                            # set on top of what `export` sends
    LEARNING_RATE = "0.1"

Flags given on the command line override the file's values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from clients.cli.format import parse_size
from clients.environment import ExportError, check_size, checked_name, exported, lookup
from clients.types import Dependency, JobSpec, JobState, Program, ProgramKind
from protos.arrays import parse_array, parse_dependency, parse_job_ids
from protos.bounds import (
    BATCH_SIZE_MAX,
    GPU_MEMORY_MAX_BYTES,
    ITERATIONS_MAX,
    NUM_GPUS_MAX,
    PRIORITY_RANGE,
    valid_priority,
)
from protos.durations import format_duration, parse_duration
from protos.numbers import (
    MAX_RETRIES,
    TIME_LIMIT_MAX_S,
    NumberRange,
    check_int,
)
from protos.warnsignal import parse_signal

# Far more than any job needs: the master accepts at most 64 KiB of command line and 64 KiB
# of environment. A larger file is refused before it is parsed.
MAX_JOB_FILE_BYTES = 1024 * 1024
# Ranges of the integer keys, as the master accepts them (see master/jobs/validation.py).
GPUS = NumberRange(1, NUM_GPUS_MAX)
ITERATIONS = NumberRange(1, ITERATIONS_MAX)
BATCH_SIZE = NumberRange(0, BATCH_SIZE_MAX)
RETRIES = NumberRange(0, MAX_RETRIES)
GPU_MEMORY = NumberRange(0, GPU_MEMORY_MAX_BYTES)
_RANGES = {"gpus": GPUS, "iterations": ITERATIONS, "batch_size": BATCH_SIZE, "retries": RETRIES}
# One piece of a shell word at a time: a run of ordinary characters, a single- or
# double-quoted string, a backslash and the character it escapes, or the blanks between
# words (shlex's POSIX whitespace). Each alternative matches in time linear in its length.
_SHELL_PIECE = re.compile(
    r"(?P<plain>[^ \t\r\n'\"\\]+)"
    r"|'(?P<single>[^']*)'"
    r'|"(?P<double>[^"\\]*(?:\\.[^"\\]*)*)"'
    r"|\\(?P<escaped>.)"
    r"|(?P<blank>[ \t\r\n]+)",
    re.DOTALL,
)
_DOUBLE_QUOTED_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
PROGRAM_KEYS = ("workload", "script", "command")
DEPENDENCY_KEYS = {"after_ok": "afterok", "after_any": "afterany", "after_fail": "afterfail"}
# Words --notify-on takes, as the end states they stand for (like Slurm's --mail-type).
NOTIFY_ON_WORDS: dict[str, tuple[JobState, ...]] = {
    "end": (JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT),
    "fail": (JobState.FAILED, JobState.TIMEOUT),
    "all": (JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED),
    "completed": (JobState.COMPLETED,),
    "failed": (JobState.FAILED,),
    "timeout": (JobState.TIMEOUT,),
    "cancelled": (JobState.CANCELLED,),
}
_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "gpus": (int,),
    "iterations": (int,),
    "batch_size": (int,),
    "priority": (int, float),
    "gpu_types": (list, str),
    "preemptible": (bool,),
    "shareable": (bool,),
    "elastic": (bool,),
    "workdir": (str,),
    "checkpoint_dir": (str,),
    "job_type": (str,),
    "gpu_memory": (str, int),
    "retries": (int,),
    "output": (str,),
    "error": (str,),
    "time": (str,),
    "array": (str, int),
    "after_ok": (list, str, int),
    "after_any": (list, str, int),
    "after_fail": (list, str, int),
    "dependency": (str,),
    "notify": (str,),
    "notify_on": (str, list),
    "hold": (bool,),
    "env": (dict,),
    "export": (str, list),
    "signal": (str,),
    "workload": (str,),
    "script": (list, str),
    "command": (list, str),
}


class SpecError(ValueError):
    """A job spec that cannot be submitted; ``field`` names the offending key or flag."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def load_job_file(path: Path) -> dict[str, Any]:
    """The file's values, checked and normalized (see the module doc for the keys)."""
    try:
        with path.open("rb") as file:
            # One byte past the cap tells a file over it, without reading all of a huge one.
            raw = file.read(MAX_JOB_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(str(path), "no such file") from None
    except OSError as exc:
        raise SpecError(str(path), f"cannot read: {exc.strerror}") from None
    if len(raw) > MAX_JOB_FILE_BYTES:
        raise SpecError(
            str(path),
            f"larger than {MAX_JOB_FILE_BYTES // 1024} KiB, the most a job file may be (the "
            "master accepts at most 64 KiB of command line and 64 KiB of environment); "
            "put long inputs in a file the job reads",
        )
    # Loaded for `-f` only: most submissions have no job file.
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(str(path), f"not valid TOML: {exc}") from None
    return normalize(data, origin=str(path))


def normalize(data: Mapping[str, Any], origin: str = "job file") -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if key not in _TYPES:
            known = ", ".join(sorted(_TYPES))
            raise SpecError(f"{origin}: {key}", f"unknown key (known keys: {known})")
        allowed = _TYPES[key]
        if isinstance(raw, bool) and bool not in allowed:
            raise SpecError(key, f"expected {_type_names(allowed)}, got a boolean")
        if not isinstance(raw, allowed):
            raise SpecError(key, f"expected {_type_names(allowed)}, got {type(raw).__name__}")
        values[key] = _normalize_value(key, raw)
    return values


def _normalize_value(key: str, raw: Any) -> Any:
    if key in ("script", "command"):
        try:
            argv = split_command(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            raise SpecError(key, str(exc)) from None
        if not argv or not all(isinstance(a, str) for a in argv):
            raise SpecError(key, "must be a non-empty command line (a string or list of strings)")
        return list(argv)
    if key in _RANGES:
        return _in_range(key, raw, _RANGES[key])
    if key == "gpu_types":
        items = raw.split(",") if isinstance(raw, str) else raw
        if not all(isinstance(t, str) for t in items):
            raise SpecError(key, "must be a list of GPU type names")
        return [t.strip() for t in items if t.strip()]
    if key == "env":
        return parse_env_table(raw)
    if key == "export":
        items = raw if isinstance(raw, list) else [raw]
        if not items or not all(isinstance(item, str) for item in items):
            raise SpecError(key, "must be ALL, NONE or a list of NAME or NAME=VALUE strings")
        return ",".join(items)
    if key == "signal":
        try:
            return parse_signal(raw)
        except ValueError as exc:
            raise SpecError(key, str(exc)) from None
    if key == "gpu_memory":
        try:
            return parse_gpu_memory(raw)
        except ValueError as exc:
            raise SpecError(key, str(exc)) from None
    if key == "priority":
        return float(raw)
    if key == "notify_on":
        return parse_notify_on(raw, key)
    if key == "time":
        try:
            return parse_time_limit(raw)
        except ValueError as exc:
            raise SpecError(key, str(exc)) from None
    if key == "array":
        try:
            return str(parse_array(str(raw)))
        except ValueError as exc:
            raise SpecError(key, str(exc)) from None
    if key in DEPENDENCY_KEYS:
        if isinstance(raw, list):
            raw = ",".join(str(item) for item in raw)
        try:
            return parse_job_ids(str(raw), what=key)
        except ValueError as exc:
            raise SpecError(key, str(exc)) from None
    if key == "dependency":
        try:
            return parse_dependency(raw)
        except ValueError as exc:
            raise SpecError(key, str(exc)) from None
    return raw


def _in_range(key: str, value: int, bounds: NumberRange) -> int:
    try:
        return check_int(value, bounds)
    except ValueError as exc:
        raise SpecError(key, str(exc)) from None


def parse_gpu_memory(raw: str | int) -> int:
    """Bytes each GPU must have, from a size (`12GiB`) or a byte count, within what the
    master accepts."""
    size = raw if isinstance(raw, int) else parse_size(raw)
    if size not in GPU_MEMORY:
        shown = raw if isinstance(raw, int) else repr(raw)
        raise ValueError(f"{shown} is out of range: 0..{GPU_MEMORY_MAX_BYTES} bytes (1 PiB)")
    return size


def parse_time_limit(raw: str) -> int:
    """Seconds of a time limit written as sbatch's --time, at most the most any cluster
    allows."""
    seconds = parse_duration(raw)
    if seconds > TIME_LIMIT_MAX_S:
        raise ValueError(
            f"{raw!r} is out of range: 1 second to {TIME_LIMIT_MAX_S // 86400} days "
            f"({format_duration(TIME_LIMIT_MAX_S)})"
        )
    return seconds


def split_command(text: str) -> list[str]:
    """A command line split into words as a POSIX shell (and shlex.split) does: blanks
    separate words, '...' keeps everything literally, "..." keeps everything but \" and \\,
    and a backslash outside quotes keeps the next character. Unlike shlex, which appends to
    its token one character at a time, this takes time linear in the line's length."""
    words: list[str] = []
    pieces: list[str] = []
    in_word = False
    pos = 0
    while pos < len(text):
        match = _SHELL_PIECE.match(text, pos)
        if match is None:
            if text[pos] == "\\":
                raise ValueError("ends with a backslash that escapes nothing")
            raise ValueError(f"no closing {text[pos]} for the quote at character {pos + 1}")
        kind = match.lastgroup
        if kind == "blank":
            if in_word:
                words.append("".join(pieces))
                pieces.clear()
                in_word = False
        else:
            value = match.group(kind or "")
            if kind == "double":
                value = _DOUBLE_QUOTED_ESCAPE.sub(_unescape_double_quoted, value)
            pieces.append(value)
            in_word = True
        pos = match.end()
    if in_word:
        words.append("".join(pieces))
    return words


def _unescape_double_quoted(match: re.Match[str]) -> str:
    # Within double quotes a backslash escapes only " and itself, as in shlex's POSIX mode.
    char = match.group(1)
    return char if char in '"\\' else "\\" + char


def dependencies(values: Mapping[str, Any]) -> tuple[Dependency, ...]:
    """The dependencies of `after_ok`, `after_any`, `after_fail` and `dependency`, each
    once."""
    pairs: list[tuple[str, int]] = []
    for key, kind in DEPENDENCY_KEYS.items():
        pairs.extend((kind, job_id) for job_id in values.get(key, ()))
    pairs.extend(values.get("dependency", ()))
    return tuple(Dependency(kind, job_id) for kind, job_id in dict.fromkeys(pairs))


def parse_notify_on(raw: str | list[Any], field: str = "notify_on") -> list[JobState]:
    """`end`, `fail`, `all` or end states, comma-separated or as a list, in JobState order;
    `none` alone gives an empty list (no notification at all)."""
    words = raw.split(",") if isinstance(raw, str) else raw
    if [str(w).strip().lower() for w in words] == ["none"]:
        return []
    wanted: set[JobState] = set()
    for word in words:
        key = str(word).strip().lower()
        if key not in NOTIFY_ON_WORDS:
            known = ", ".join(NOTIFY_ON_WORDS)
            raise SpecError(field, f"{word!r} is not one of {known} (or none alone)")
        wanted.update(NOTIFY_ON_WORDS[key])
    if not wanted:
        raise SpecError(field, "name at least one of " + ", ".join(NOTIFY_ON_WORDS))
    return [s for s in JobState if s in wanted]


def parse_env_table(table: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, value in table.items():
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise SpecError("env", f"{name} must be a string")
        try:
            env[checked_name(name, "env")] = str(value)
        except ExportError as exc:
            raise SpecError(exc.origin, exc.message) from None
    return env


def parse_env_assignments(items: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``--env NAME=VALUE`` flags, and ``--env NAME`` for NAME's value in `environ` (the
    submitting shell's); a later value for the same name wins."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            env[checked_name(name, "--env")] = value if sep else lookup(name, environ, "--env")
        except ExportError as exc:
            raise SpecError(exc.origin, exc.message) from None
    return env


def resolve_locally(values: dict[str, Any], cwd: Path | None, environ: Mapping[str, str]) -> None:
    """What only the submitting side knows, filled in as sbatch does: a command or script
    runs in the directory it was submitted from (a relative workdir is relative to it) with
    the submitting environment (`export`, default ALL; NONE for a built-in workload) under
    the explicit `env`. `cwd` None: the current directory cannot be read. Each error names
    its flag or key."""
    program = next((key for key in PROGRAM_KEYS if values.get(key)), "command")
    local = program != "workload"
    workdir = values.get("workdir") or ""
    if (local and not workdir) or (workdir and not Path(workdir).is_absolute()):
        if cwd is None:
            raise SpecError(
                "--workdir",
                "the current directory cannot be read (was it deleted?); cd into the job's "
                "directory or give --workdir as an absolute path",
            )
        values["workdir"] = os.path.normpath(cwd / workdir) if workdir else str(cwd)
    export = values.pop("export", "ALL" if local else "NONE")
    try:
        env = exported(export, environ)
        env.update(values.get("env", {}))
        check_size(env, "--export")
    except ExportError as exc:
        raise SpecError(exc.origin, exc.message) from None
    values["env"] = env


def default_name(program: Program) -> str:
    """The workload's name, or the script's file name without its suffix."""
    if program.kind is ProgramKind.WORKLOAD:
        return program.workload
    for arg in program.argv:
        if arg.endswith((".py", ".sh")):
            return PurePath(arg).stem
    return PurePath(program.argv[0]).name if program.argv else "job"


def build_spec(values: Mapping[str, Any]) -> JobSpec:
    """A JobSpec from normalized values (file values updated with flags)."""
    programs = [key for key in PROGRAM_KEYS if values.get(key)]
    if not programs:
        raise SpecError(
            "program",
            "say what to run: --workload NAME, `-- COMMAND...`, or --script -- COMMAND...",
        )
    if len(programs) > 1:
        raise SpecError("program", f"give only one of {', '.join(programs)}")
    kind = programs[0]
    if kind == "workload":
        program = Program.builtin(values["workload"])
    elif kind == "script":
        program = Program.script(values["script"])
    else:
        program = Program.command(values["command"])
    iterations = values.get("iterations")
    if iterations is None:
        if kind != "command":
            raise SpecError(
                "iterations",
                "required for a workload or script: the amount of work in training iterations "
                "(--iterations N)",
            )
        # A command's work is unknown: it runs until it exits.
        iterations = 0
    elif iterations <= 0:
        raise SpecError("iterations", f"must be positive, got {iterations}")
    gpus = values.get("gpus", 1)
    if gpus < 1:
        raise SpecError("gpus", f"must be at least 1, got {gpus}")
    batch_size = values.get("batch_size", 0)
    if batch_size < 0:
        raise SpecError("batch_size", f"must not be negative, got {batch_size}")
    priority = values.get("priority", 1.0)
    if not valid_priority(priority):
        raise SpecError("priority", f"must be from {PRIORITY_RANGE}, got {priority!r}")
    retries = values.get("retries")
    if retries is not None and retries < 0:
        raise SpecError("retries", f"must not be negative, got {retries}")
    notify_url = values.get("notify", "")
    notify_on = tuple(values.get("notify_on", ()))
    # `notify_on = "none"` (parsed as no states) asks for no notification at all.
    no_notify = "notify_on" in values and not notify_on
    if no_notify and notify_url:
        raise SpecError("notify_on", "none asks for no notification, but notify names a webhook")
    name = values.get("name") or default_name(program)
    if not 1 <= len(name) <= 128:
        raise SpecError("name", "must be 1 to 128 characters")
    return JobSpec(
        name=name,
        program=program,
        iterations=iterations,
        num_gpus=gpus,
        batch_size=batch_size,
        priority=priority,
        allowed_gpu_types=tuple(values.get("gpu_types", ())),
        preemptible=values.get("preemptible"),
        shareable=values.get("shareable", False),
        forkable=values.get("elastic", False),
        env=dict(values.get("env", {})),
        workdir=values.get("workdir", ""),
        checkpoint_dir=values.get("checkpoint_dir", ""),
        job_type=values.get("job_type", ""),
        gpu_memory_bytes=values.get("gpu_memory", 0),
        max_retries=retries,
        output=values.get("output", ""),
        error=values.get("error", ""),
        time_limit_s=values.get("time", 0),
        array=values.get("array", ""),
        dependencies=dependencies(values),
        notify_url=notify_url,
        notify_on=notify_on,
        no_notify=no_notify,
        warn_signal=values["signal"][0] if "signal" in values else 0,
        warn_before_s=values["signal"][1] if "signal" in values else 0,
    )


def _type_names(types: tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        list: "a list",
        dict: "a table",
    }
    return " or ".join(names[t] for t in types)

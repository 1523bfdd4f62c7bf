"""The environment a submitted job gets, chosen as sbatch's --export chooses it.

``ALL`` (hctl's default for commands and scripts) sends the submitting process's whole
environment; ``NONE`` sends nothing, so the job has only the worker's; a comma-separated list
sends only the variables it names, each ``NAME`` with its value here and each
``NAME=VALUE`` with that value, and ``ALL,NAME=VALUE,...`` sends everything plus those. The
worker lays what is sent over its own environment.

The variables the runtime sets for each job (protos.jobenv) are left out of ``ALL`` without a
word: a shell inside a job, or one where hctl's own HADAR_CONFIG is set, has them, and they
are not the user's to pass on. Naming one explicitly is an error that says why.
"""

from __future__ import annotations

from collections.abc import Mapping

from protos import jobenv

# A shell's own bookkeeping, meaningless in another process on another machine.
SHELL_VARIABLES = frozenset({"OLDPWD", "SHLVL", "_"})
KEYWORDS = ("ALL", "NONE")


class ExportError(ValueError):
    """An environment that cannot be sent; ``origin`` names the flag or key at fault."""

    def __init__(self, origin: str, message: str) -> None:
        super().__init__(f"{origin}: {message}")
        self.origin = origin
        self.message = message


def exported(
    export: str, environ: Mapping[str, str], *, origin: str = "--export"
) -> dict[str, str]:
    """The variables `export` (``ALL``, ``NONE``, ``NAME,NAME=VALUE,...``, optionally led by
    ``ALL,``) takes from `environ`."""
    items = [item.strip() for item in export.split(",")]
    if not export.strip() or any(not item for item in items):
        raise ExportError(
            origin, f"{export!r} has an empty item; write ALL, NONE or NAME[=VALUE],..."
        )
    words = [item.upper() for item in items]
    if "NONE" in words:
        if len(items) > 1:
            raise ExportError(origin, "NONE sends nothing, so it stands alone")
        return {}
    env: dict[str, str] = {}
    if words[0] == "ALL":
        env = everything(environ)
        items = items[1:]
    elif "ALL" in words:
        raise ExportError(origin, "ALL comes first: ALL,NAME=VALUE,...")
    for item in items:
        name, has_value, value = item.partition("=")
        if not has_value:
            value = lookup(name, environ, origin)
        env[checked_name(name, origin)] = value
    return env


def everything(environ: Mapping[str, str]) -> dict[str, str]:
    """All of `environ` that a job may be sent (see the module doc)."""
    return {
        name: value
        for name, value in environ.items()
        if jobenv.NAME.match(name)
        # bash exports functions as BASH_FUNC_name%%, which the pattern above leaves out.
        and name not in SHELL_VARIABLES
        and jobenv.runtime_owned(name) is None
        and "\0" not in value
    }


def lookup(name: str, environ: Mapping[str, str], origin: str) -> str:
    """`name`'s value in `environ`, for a NAME given without a value."""
    checked_name(name, origin)
    if name not in environ:
        raise ExportError(
            origin, f"{name} is not set in your environment; set it, or write {name}=VALUE"
        )
    return environ[name]


def checked_name(name: str, origin: str) -> str:
    """`name`, when a job may be given it; else why not."""
    if not jobenv.NAME.match(name):
        raise ExportError(
            origin, f"{name!r} is not a variable name (letters, digits and _, not first a digit)"
        )
    owned = jobenv.runtime_owned(name)
    if owned:
        raise ExportError(origin, f"{name} is {owned}; leave it out")
    return name


def check_size(env: Mapping[str, str], origin: str) -> None:
    """Refuses an environment larger than the master accepts, before it is sent."""
    size = jobenv.env_bytes(env)
    if len(env) > jobenv.MAX_ITEMS or size > jobenv.MAX_BYTES:
        raise ExportError(
            origin,
            f"the job's environment has {len(env)} variables, {size} bytes; the master "
            f"accepts at most {jobenv.MAX_ITEMS} variables and {jobenv.MAX_BYTES // 1024} KiB. "
            "Send less: --export NONE, or --export NAME,NAME=VALUE,... with only what the "
            "job needs",
        )

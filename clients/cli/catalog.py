"""Every ``hctl`` subcommand by name, with the line `hctl --help` shows for it and the module
that defines it.

`hctl --help`, `hctl --version` and a mistyped command need only these lines; `hctl queue`
needs only the module of `queue`. Reading them here keeps every other command module (and
what each imports) out of a run. The modules' ``COMMANDS`` are the reference:
tests/unit/clients/test_catalog.py fails, printing what to write here, when a command is
added, renamed or given another help line without this listing following.
"""

from __future__ import annotations

from typing import NamedTuple


class Listing(NamedTuple):
    module: str
    name: str
    aliases: tuple[str, ...]
    help: str
    # Shown by `hctl --help` (an unlisted command still runs: an older spelling).
    listed: bool = True


# In the order `hctl --help` lists them, module by module as clients.cli.main.COMMAND_MODULES.
COMMANDS: tuple[Listing, ...] = (
    Listing("clients.cli.jobs", "submit", (), "Submit a job and print its id"),
    Listing("clients.cli.jobs", "queue", ("ls",), "List jobs, Slurm style"),
    Listing(
        "clients.cli.jobs",
        "show",
        (),
        "Show a job: spec, state, placement, progress, ETA and history",
    ),
    Listing("clients.cli.jobs", "cancel", (), "Cancel jobs"),
    Listing("clients.cli.jobs", "logs", (), "Print a job's output"),
    Listing(
        "clients.cli.jobs", "wait", (), "Wait for a job to end; the exit code tells how it ended"
    ),
    Listing(
        "clients.cli.run",
        "run",
        (),
        "Run a job in the foreground: its output here, its exit code yours (like srun)",
    ),
    Listing(
        "clients.cli.control",
        "hold",
        (),
        "Hold waiting jobs back from scheduling (like scontrol hold)",
    ),
    Listing(
        "clients.cli.control",
        "release",
        (),
        "Let held jobs be scheduled again (like scontrol release)",
    ),
    Listing(
        "clients.cli.control",
        "requeue",
        (),
        "Run jobs again: a running job is stopped and requeued (like scontrol requeue)",
    ),
    Listing(
        "clients.cli.control",
        "update",
        (),
        "Change a job's time limit, priority, name, GPUs (like scontrol update)",
    ),
    Listing("clients.cli.cluster", "nodes", (), "List GPU servers and their GPUs"),
    Listing(
        "clients.cli.cluster",
        "status",
        (),
        "Cluster summary: GPUs by type and state, jobs, the last round",
    ),
    Listing("clients.cli.cluster", "drain", (), "Admin: stop placing new tasks on a node"),
    Listing("clients.cli.cluster", "resume", (), "Admin: make a drained node schedulable again"),
    Listing("clients.cli.cluster", "workloads", (), "List the built-in workloads workers can run"),
    Listing(
        "clients.cli.accounting",
        "usage",
        (),
        "GPU-hours used, per user, GPU type or day (like sreport)",
    ),
    Listing(
        "clients.cli.accounting",
        "fairshare",
        (),
        "Each user's share, decayed usage and fair-share factor (like sshare)",
    ),
    Listing(
        "clients.cli.accounting",
        "history",
        (),
        "Jobs that ended, with exit codes and GPU-hours (like sacct)",
    ),
    Listing(
        "clients.cli.notify",
        "notify",
        (),
        "Your default webhook, POSTed when any of your jobs ends (like --mail-user)",
    ),
    Listing("clients.cli.access", "whoami", (), "Show who the master takes you for"),
    Listing(
        "clients.cli.access",
        "admin",
        (),
        "Admin: API tokens (create, list, revoke; your own, or everyone's for admins)",
    ),
    Listing(
        "clients.cli.access",
        "token",
        (),
        "API tokens: create, list and revoke your own; admins manage everyone's",
        listed=False,
    ),
    Listing(
        "clients.cli.simulate",
        "simulate",
        (),
        "Replay a job trace on a simulated cluster under a policy",
    ),
    Listing(
        "clients.cli.local",
        "local",
        (),
        "run a real cluster on this machine (up, down, status, demo)",
    ),
    Listing(
        "clients.cli.completion",
        "completion",
        (),
        "Print a shell completion script (bash, zsh or fish)",
    ),
    Listing(
        "clients.cli.completion",
        "__complete",
        (),
        "Print words for shell completion: your job ids, nodes, GPU types or workloads",
        listed=False,
    ),
)

"""hctl's command line: parsing, usage errors, help with examples on every command."""

from __future__ import annotations

import argparse

import pytest

from clients.cli.command import ExitCode
from clients.cli.jobfile import build_spec
from clients.cli.jobs import parse_states, spec_values_from_flags
from clients.cli.main import build_parser, main, selected_command
from clients.types import JobState, ProgramKind
from protos.arrays import JobRef


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(selected_command(argv)).parse_args(argv)


def all_parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in {id(p): p for p in action.choices.values()}.values():
                yield from all_parsers(sub)


def test_submit_with_a_script_after_double_dash_keeps_its_arguments():
    """Everything after `--` is the job's command line, options included."""
    args = parse(
        "submit",
        "--script",
        "--gpus",
        "4",
        "--iterations",
        "100",
        "--gpu-type",
        "v100,k80",
        "--gpu-type",
        "rtx3090",
        "--env",
        "A=1",
        "--no-preempt",
        "--shareable",
        "--",
        "python",
        "train.py",
        "--lr",
        "0.1",
        "--master",
        "x",
    )
    spec = build_spec(spec_values_from_flags(args))
    assert spec.program.kind is ProgramKind.SCRIPT
    assert spec.program.argv == ("python", "train.py", "--lr", "0.1", "--master", "x")
    assert spec.num_gpus == 4
    assert spec.allowed_gpu_types == ("v100", "k80", "rtx3090")
    assert dict(spec.env) == {"A": "1"}
    assert spec.preemptible is False
    assert spec.shareable is True
    assert args.master is None


def test_submit_without_script_flag_is_an_opaque_command():
    """A plain `-- cmd` runs as an opaque command; --workload as a built-in workload."""
    command = build_spec(spec_values_from_flags(parse("submit", "--iterations", "5", "--", "ls")))
    assert command.program.kind is ProgramKind.COMMAND
    workload = build_spec(
        spec_values_from_flags(parse("submit", "--workload", "lstm", "--iterations", "5"))
    )
    assert workload.program.kind is ProgramKind.WORKLOAD
    assert workload.name == "lstm"


def test_global_options_work_before_and_after_the_command():
    """--master may precede or follow the subcommand; wait's --timeout is its own."""
    before = parse("--master", "m:1", "--timeout", "3", "queue")
    assert (before.master, before.rpc_timeout) == ("m:1", 3.0)
    after = parse("queue", "--master", "m:2", "--token", "t")
    assert (after.master, after.token) == ("m:2", "t")
    nested = parse("admin", "token", "list", "--master", "m:3")
    assert nested.master == "m:3"
    short = parse("token", "list", "--master", "m:4")
    assert short.master == "m:4"
    wait = parse("--timeout", "4", "wait", "7", "--timeout", "60")
    assert (wait.rpc_timeout, wait.wait_timeout, wait.job) == (4.0, 60.0, JobRef(7))


def test_selected_command_skips_global_options_and_their_values():
    """The subcommand word is found past `--master VALUE` and friends."""
    assert selected_command(["--master", "queue", "show", "1"]) == "show"
    assert selected_command(["--token", "x", "--timeout", "2", "nodes"]) == "nodes"
    assert selected_command(["--help"]) is None


def test_queue_alias_and_state_lists():
    """`ls` is queue; -t takes repeats, comma lists and Slurm codes."""
    args = parse("ls", "-t", "pending,R", "-t", "CA", "-t", "pending")
    assert args._command.name == "queue"
    assert parse_states(args.state) == [JobState.PENDING, JobState.RUNNING, JobState.CANCELLED]


def test_unknown_states_are_usage_errors():
    """A typo in a state fails with the list of valid names."""
    from clients.cli.command import CliError

    with pytest.raises(CliError, match="unknown job state 'runing'") as caught:
        parse_states(["runing"])
    assert caught.value.code == ExitCode.USAGE


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["show", "abc"], "'abc' is not a job id"),
        (["show"], "the following arguments are required: JOB"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["queue", "--me", "-u", "bob"], "not allowed with argument"),
        (["completion", "tcsh"], "invalid choice: 'tcsh'"),
        (["wait", "1", "--timeout", "-5"], "--timeout: -5 is out of range: more than 0"),
        (
            ["submit", "--workload", "r", "--iterations", "1", "--priority", "5e-324"],
            "argument --priority: 5e-324 is out of range: 0.001..1000",
        ),
        (["submit", "--priority", "1e308"], "argument --priority: 1e308 is out of range"),
        (["submit", "--priority", "inf"], "argument --priority: inf is not a finite number"),
        (["submit", "--priority", "nan"], "argument --priority: nan is not a finite number"),
        (["submit", "--priority", "0"], "argument --priority: 0 is out of range: 0.001..1000"),
        (["submit", "--priority", "high"], "argument --priority: 'high' is not a number"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, fragment):
    """Bad command lines print `error: ... — see `hctl X --help`` and nothing else."""
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert fragment in err
    assert "--help`" in err


def test_spec_errors_from_flags_exit_2_before_contacting_the_master(capsys):
    """A submit without --iterations fails locally (no master is running here)."""
    assert main(["--master", "127.0.0.1:1", "submit", "--workload", "resnet"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "iterations: required" in err
    assert main(["--master", "127.0.0.1:1", "submit", "--script", "--iterations", "1"]) == 2
    assert "--script: needs the command" in capsys.readouterr().err


def test_no_command_prints_help_and_exits_2(capsys):
    """Bare `hctl` shows what it can do."""
    assert main([]) == ExitCode.USAGE
    assert "commands:" in capsys.readouterr().err


def test_every_command_has_help_with_an_example():
    """Each subcommand (nested ones too) shows at least one example in its --help."""
    parser = build_parser()
    for sub in all_parsers(parser):
        assert "example" in sub.format_help(), f"{sub.prog} --help shows no example"


def test_help_exits_0(capsys):
    """--help is success, on stdout."""
    assert main(["queue", "--help"]) == 0
    assert "NODE/REASON" not in capsys.readouterr().err


def test_only_the_selected_command_is_configured():
    """Other commands are listed but get no options, so their imports never run."""
    parser = build_parser("queue")
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "--watch" in subs.choices["queue"].format_help()
    assert "--gpu-memory" not in subs.choices["submit"].format_help()


def test_unreachable_master_is_exit_5_with_advice(capsys):
    """Nothing listens on port 1: one line saying so and what to try, exit 5."""
    assert main(["--master", "127.0.0.1:1", "--timeout", "2", "queue"]) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: cannot reach the master at 127.0.0.1:1 — is hadar-master running? "
        "try `hctl status --master HOST:PORT`"
    )


def test_broken_config_is_a_usage_error(capsys, tmp_path, monkeypatch):
    """A config file typo stops hctl with the file's name."""
    config = tmp_path / "config.toml"
    config.write_text("mastr = 1\n")
    monkeypatch.setenv("HADAR_CONFIG", str(config))
    assert main(["status"]) == ExitCode.USAGE
    assert "unknown key 'mastr'" in capsys.readouterr().err


def test_version_names_the_installed_distribution(capsys):
    """--version prints hctl and the package version, and exits 0."""
    import importlib.metadata

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"hctl {importlib.metadata.version('hadar')}\n"


def test_submit_retries_and_no_requeue_set_the_jobs_retry_limit():
    """--retries N asks for N retries, --no-requeue for none (as Slurm's), and leaving both
    out leaves the limit to the master; giving both is a usage error."""

    def limit(*flags: str) -> int | None:
        args = parse("submit", "--iterations", "5", *flags, "--", "ls")
        return build_spec(spec_values_from_flags(args)).max_retries

    assert limit("--retries", "1") == 1
    assert limit("--no-requeue") == 0
    assert limit() is None
    with pytest.raises(SystemExit):
        parse("submit", "--iterations", "5", "--retries", "2", "--no-requeue", "--", "ls")


def test_submit_priority_takes_both_ends_of_its_range():
    """--priority 0.001 and --priority 1000 are weights the master accepts; the default
    is 1."""

    def priority(*flags: str) -> float:
        args = parse("submit", "--iterations", "5", *flags, "--workload", "resnet")
        return build_spec(spec_values_from_flags(args)).priority

    assert priority("--priority", "0.001") == 0.001
    assert priority("--priority", "1e3") == 1000.0
    assert priority() == 1.0

"""What `hctl submit` sends of the submitting side: its directory and environment (sbatch's
--export forms), the optional amount of work of a command, and --signal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clients.cli.jobfile import SpecError, build_spec, normalize, resolve_locally
from clients.environment import ExportError, exported
from protos.warnsignal import format_signal, parse_signal

SHELL = {
    "PATH": "/home/alice/venv/bin:/usr/bin",
    "HOME": "/home/alice",
    "LR": "0.1",
    "HADAR_CONFIG": "/home/alice/.config/hadar/hctl.toml",
    "HADAR_ARRAY_INDEX": "3",
    "CUDA_VISIBLE_DEVICES": "0",
    "RANK": "0",
    "PWD": "/home/alice/proj",
    "SHLVL": "2",
    "BASH_FUNC_module%%": "() {  eval x\n}",
}


def test_all_sends_the_users_variables_and_none_of_the_runtimes() -> None:
    """ALL keeps what the user set and leaves out, silently, what the runtime sets for each
    job, hctl's own settings, shell bookkeeping and exported shell functions."""
    assert exported("ALL", SHELL) == {
        "PATH": "/home/alice/venv/bin:/usr/bin",
        "HOME": "/home/alice",
        "LR": "0.1",
    }


def test_none_and_lists_send_only_what_they_name() -> None:
    """NONE sends nothing; NAME takes the shell's value, NAME=VALUE its own; ALL,NAME=VALUE
    adds to everything."""
    assert exported("NONE", SHELL) == {}
    assert exported("none", SHELL) == {}
    assert exported("PATH,EPOCHS=3", SHELL) == {"PATH": SHELL["PATH"], "EPOCHS": "3"}
    with_all = exported("ALL,LR=0.5,EPOCHS=3", SHELL)
    assert with_all["LR"] == "0.5" and with_all["EPOCHS"] == "3" and "PATH" in with_all


@pytest.mark.parametrize(
    ("export", "words"),
    [
        ("NONE,PATH", "stands alone"),
        ("PATH,ALL", "ALL comes first"),
        ("PATH,,LR", "empty item"),
        ("", "empty item"),
        ("MISSING", "MISSING is not set in your environment"),
        ("CUDA_VISIBLE_DEVICES=1", "set by the worker to the GPUs"),
        ("ALL,RANK=1", "torchrun"),
        ("HADAR_JOB_ID=3", "HADAR_* variables are set by Hadar"),
        ("PWD", "--workdir"),
        ("9LIVES=1", "not a variable name"),
    ],
)
def test_bad_exports_say_what_is_wrong(export: str, words: str) -> None:
    """Each refused form names --export and the reason."""
    with pytest.raises(ExportError, match=r"^--export: ") as caught:
        exported(export, SHELL)
    assert words in str(caught.value)


def test_the_runtimes_settings_may_be_sent_explicitly() -> None:
    """HADAR_SEED and the other settings a job may choose pass; other HADAR_* names do not."""
    assert exported("HADAR_SEED=4,HADAR_DETERMINISTIC=1", {}) == {
        "HADAR_SEED": "4",
        "HADAR_DETERMINISTIC": "1",
    }


def local(values: dict[str, Any], cwd: Path, environ: dict[str, str]) -> dict[str, Any]:
    checked = normalize(values)
    resolve_locally(checked, cwd, environ)
    return checked


def test_a_command_runs_where_and_with_what_it_was_submitted(tmp_path: Path) -> None:
    """Without --workdir and --export a command gets the submitting directory and the whole
    environment, the explicit env on top; a relative workdir is resolved against it."""
    values = local({"command": "python train.py", "env": {"LR": "1"}}, tmp_path, SHELL)
    spec = build_spec(values)
    assert spec.workdir == str(tmp_path)
    assert spec.env["PATH"] == SHELL["PATH"] and spec.env["LR"] == "1"
    assert "HADAR_CONFIG" not in spec.env
    assert spec.iterations == 0
    relative = local({"command": "ls", "workdir": "../data/./run"}, tmp_path / "proj", SHELL)
    assert relative["workdir"] == str(tmp_path / "data" / "run")


def test_a_workload_keeps_the_workers_directory_and_environment(tmp_path: Path) -> None:
    """A built-in workload runs the worker's own Python: nothing of the shell goes with it
    unless asked, and it gets the worker's job directory."""
    values = local({"workload": "resnet", "iterations": 10}, tmp_path, SHELL)
    spec = build_spec(values)
    assert spec.workdir == "" and spec.env == {}
    asked = local({"workload": "resnet", "iterations": 10, "export": "LR"}, tmp_path, SHELL)
    assert asked["env"] == {"LR": "0.1"}


def test_an_environment_larger_than_the_master_takes_is_refused_before_sending(
    tmp_path: Path,
) -> None:
    """Over 64 KiB the error names --export and how to send less."""
    huge = {"BIG": "x" * (64 * 1024)}
    with pytest.raises(SpecError, match="--export NONE"):
        local({"command": "ls"}, tmp_path, huge)


def test_the_job_files_export_key_takes_a_list(tmp_path: Path) -> None:
    values = local({"command": "ls", "export": ["PATH", "X=1"]}, tmp_path, SHELL)
    assert values["env"] == {"PATH": SHELL["PATH"], "X": "1"}


def test_iterations_are_required_for_managed_programs_only() -> None:
    with pytest.raises(SpecError, match="required for a workload or script"):
        build_spec(normalize({"script": "python train.py"}))
    assert build_spec(normalize({"command": "ls", "iterations": 7})).iterations == 7


@pytest.mark.parametrize(
    ("text", "expected"),
    [("USR1@90", (10, 90)), ("SIGUSR2", (12, 60)), ("10@5", (10, 5)), ("term@600", (15, 600))],
)
def test_signal_takes_sbatchs_forms(text: str, expected: tuple[int, int]) -> None:
    """A name with or without SIG, or a number, and @SECONDS (default 60)."""
    assert parse_signal(text) == expected
    assert parse_signal(format_signal(*expected)) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("KILL@10", "cannot be caught"),
        ("STOP", "cannot be caught"),
        ("USR1@0", "1 to 600"),
        ("USR1@601", "1 to 600"),
        ("USR1@soon", "not a number of seconds"),
        ("NOPE", "not a signal name"),
        ("B:USR1@10", "prefixes are not supported"),
        ("@10", "names no signal"),
    ],
)
def test_bad_signals_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_signal(text)


def test_the_job_files_signal_key_sets_the_warning() -> None:
    spec = build_spec(normalize({"command": "ls", "signal": "USR1@30", "preemptible": True}))
    assert (spec.warn_signal, spec.warn_before_s, spec.preemptible) == (10, 30, True)


def test_a_current_directory_that_cannot_be_read_needs_an_absolute_workdir() -> None:
    """Without a readable current directory a command needs --workdir, absolute; with one
    it goes on."""
    with pytest.raises(SpecError, match="cannot be read"):
        resolve_locally(normalize({"command": "ls"}), None, {})
    with pytest.raises(SpecError, match="cannot be read"):
        resolve_locally(normalize({"command": "ls", "workdir": "data"}), None, {})
    values = normalize({"command": "ls", "workdir": "/data/run"})
    resolve_locally(values, None, {})
    assert values["workdir"] == "/data/run"

"""Job specs from TOML files and from submit's flags."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients.cli.command import ExitCode
from clients.cli.jobfile import (
    MAX_JOB_FILE_BYTES,
    SpecError,
    build_spec,
    load_job_file,
    normalize,
    parse_env_assignments,
    split_command,
)
from clients.cli.main import main
from clients.types import ProgramKind

FULL = """
name = "resnet-lr0.1"
gpus = 2
iterations = 5000
batch_size = 128
priority = 2
gpu_types = ["v100", "a100-40gb"]
preemptible = false
shareable = true
workdir = "/home/alice/proj"
checkpoint_dir = "/shared/ckpt"
job_type = "ResNet-18 (batch size 128)"
gpu_memory = "12GiB"
retries = 2
workload = "resnet"

[env]
LEARNING_RATE = "0.1"
SEED = 3
"""


def test_a_full_job_file_becomes_the_spec_it_describes(tmp_path):
    """Every documented key lands in its JobSpec field."""
    path = tmp_path / "job.toml"
    path.write_text(FULL)
    spec = build_spec(load_job_file(path))
    assert spec.name == "resnet-lr0.1"
    assert spec.num_gpus == 2
    assert spec.iterations == 5000
    assert spec.batch_size == 128
    assert spec.priority == 2.0
    assert spec.allowed_gpu_types == ("v100", "a100-40gb")
    assert spec.preemptible is False
    assert spec.shareable is True
    assert spec.workdir == "/home/alice/proj"
    assert spec.checkpoint_dir == "/shared/ckpt"
    assert spec.job_type == "ResNet-18 (batch size 128)"
    assert spec.gpu_memory_bytes == 12 * 1024**3
    assert spec.max_retries == 2
    assert spec.program.kind is ProgramKind.WORKLOAD
    assert spec.program.workload == "resnet"
    assert dict(spec.env) == {"LEARNING_RATE": "0.1", "SEED": "3"}


def test_command_strings_are_split_like_a_shell():
    """command = "bash run.sh 'a b'" is three arguments."""
    spec = build_spec(normalize({"command": "bash run.sh 'a b'", "iterations": 1}))
    assert spec.program.argv == ("bash", "run.sh", "a b")
    assert spec.program.kind is ProgramKind.COMMAND
    assert spec.name == "run"
    assert spec.preemptible is None


def test_script_name_defaults_to_the_script_file():
    """`python train.py` is named train."""
    spec = build_spec(normalize({"script": ["python", "train.py", "--lr", "1"], "iterations": 9}))
    assert spec.name == "train"
    assert spec.program.kind is ProgramKind.SCRIPT


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"iterations": 10}, "program", "say what to run"),
        ({"workload": "resnet", "command": "ls", "iterations": 1}, "program", "only one"),
        ({"workload": "resnet"}, "iterations", "required"),
        ({"workload": "resnet", "iterations": 0}, "iterations", r"0 is out of range: 1\.\."),
        ({"workload": "resnet", "iterations": 1, "gpus": 0}, "gpus", r"out of range: 1\.\."),
        ({"workload": "resnet", "iterations": 1, "priority": -1}, "priority", "0.001 to 1000"),
        ({"workload": "resnet", "iterations": 1, "priority": 5e-324}, "priority", "5e-324"),
        ({"workload": "resnet", "iterations": 1, "priority": 1e308}, "priority", "1e\\+308"),
        ({"workload": "resnet", "iterations": 1, "priority": float("nan")}, "priority", "nan"),
        ({"workload": "resnet", "iterations": 1, "name": "x" * 129}, "name", "128"),
        ({"workload": "resnet", "iterations": 1, "retries": -1}, "retries", r"0\.\.10"),
    ],
)
def test_incomplete_or_contradictory_specs_name_the_field(values, field, message):
    """Every refusal says which field and why."""
    with pytest.raises(SpecError, match=message) as caught:
        build_spec(normalize(values))
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"gpu": 2}, "unknown key"),
        ({"gpus": "two"}, "expected an integer, got str"),
        ({"gpus": True}, "got a boolean"),
        ({"shareable": "yes"}, "expected true or false"),
        ({"env": {"1BAD": "x"}}, "not a variable name"),
        ({"script": []}, "non-empty command line"),
        ({"gpu_memory": "lots"}, "not a size"),
        ({"hold": "yes"}, "expected true or false"),
    ],
)
def test_bad_file_values_are_rejected_with_the_key(data, message):
    """Typos and wrong types fail loudly instead of being ignored."""
    with pytest.raises(SpecError, match=message):
        normalize(data)


def test_missing_and_malformed_files_are_clear(tmp_path):
    """A missing file or broken TOML names the file."""
    with pytest.raises(SpecError, match="no such file"):
        load_job_file(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("gpus = \n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_job_file(bad)


def test_env_assignments_take_a_value_or_the_shells():
    """--env K=V keeps everything after the first '=', and later values win; --env NAME
    takes NAME's value from the submitting environment, and says so when it has none."""
    assert parse_env_assignments(["A=1", "B=x=y", "A=2"], {}) == {"A": "2", "B": "x=y"}
    assert parse_env_assignments(["PATH"], {"PATH": "/venv/bin:/usr/bin"}) == {
        "PATH": "/venv/bin:/usr/bin"
    }
    with pytest.raises(SpecError, match="JUSTNAME is not set in your environment"):
        parse_env_assignments(["JUSTNAME"], {})
    with pytest.raises(SpecError, match="not a variable name"):
        parse_env_assignments(["9X=1"], {})


@given(
    st.text(
        alphabet=st.sampled_from(["a", "b", " ", "\t", "\n", "\r", "'", '"', "\\", "$", "é", "#"]),
        max_size=24,
    )
)
def test_a_command_string_splits_as_shlex_splits_it(text: str) -> None:
    """The job file's `command = "..."` is split into the same words shlex.split gives (or
    refused where shlex refuses it)."""
    try:
        expected: list[str] | None = shlex.split(text)
    except ValueError:
        expected = None
    try:
        got: list[str] | None = split_command(text)
    except ValueError:
        got = None
    assert got == expected


@pytest.mark.timeout(60)
def test_a_megabyte_command_parses_in_linear_time(tmp_path: Path) -> None:
    """Parsing takes time linear in the file's size: a command of a megabyte (just under the
    cap), in one word and in many, quoted and escaped, is read in well under a second. (A
    parser that grows its words a character at a time takes minutes.)"""
    size = MAX_JOB_FILE_BYTES - 1024
    for command in (
        "echo " + "a" * size,
        "echo " + "ab " * (size // 3),
        "echo '" + "a" * size + "'",
        "echo " + "\\a" * (size // 3),
    ):
        path = tmp_path / "job.toml"
        path.write_text(f"iterations = 1\ncommand = {json.dumps(command)}\n")
        started = time.process_time()
        values = load_job_file(path)
        elapsed = time.process_time() - started
        assert values["command"][0] == "echo"
        assert elapsed < 2.0, f"{elapsed:.1f} s of CPU for {path.stat().st_size} bytes"


@pytest.mark.timeout(60)
def test_a_job_file_over_the_cap_is_refused_before_it_is_parsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 10 MB job file (a command the master would refuse anyway: it takes 64 KiB of
    command line) is refused at once, naming the file and the cap; hctl exits 2."""
    path = tmp_path / "job.toml"
    path.write_text(f'iterations = 1\ncommand = "echo {"a" * 10_000_000}"\n')
    started = time.process_time()
    with pytest.raises(SpecError, match="larger than 1024 KiB, the most a job file may be"):
        load_job_file(path)
    assert time.process_time() - started < 1.0
    assert main(["--master", "127.0.0.1:1", "submit", "-f", str(path)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: larger than 1024 KiB") and err.count("\n") == 1

"""Shell completion scripts generated from the parser actually complete."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clients.cli.completion import bash_script, command_tree, fish_script, zsh_script
from clients.cli.main import build_parser, main

BASH = shutil.which("bash")


def complete(script: str, words: list[str]) -> list[str]:
    """Runs the bash completion function for `words` (the last is being typed)."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _hctl; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    assert BASH is not None
    result = subprocess.run(
        [BASH, "--norc", "-c", program], capture_output=True, text=True, check=True
    )
    return [line for line in result.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def script() -> str:
    if BASH is None:
        pytest.fail("bash is needed to test bash completion")
    return bash_script(build_parser())


def test_command_names_complete(script):
    """`hctl qu<TAB>` offers queue; `hctl <TAB>` offers every command."""
    assert complete(script, ["hctl", "qu"]) == ["queue"]
    everything = complete(script, ["hctl", ""])
    assert {"submit", "queue", "show", "admin", "completion"} <= set(everything)
    assert "token" not in everything  # the unlisted short form of `admin token`


def test_options_of_the_current_command_complete_past_global_options(script):
    """Options complete for the command found after `--master VALUE`."""
    offered = complete(script, ["hctl", "--master", "m:1", "submit", "--gpu"])
    assert set(offered) == {"--gpus", "--gpu-type", "--gpu-memory"}


def test_nested_commands_and_values_complete(script):
    """`admin token cr` completes to create; `queue -t` offers the states; completion its
    shells."""
    assert complete(script, ["hctl", "admin", ""]) == ["token"]
    assert complete(script, ["hctl", "admin", "token", "cr"]) == ["create"]
    assert "--admin" in complete(script, ["hctl", "admin", "token", "create", "--ad"])
    assert "preempted" in complete(script, ["hctl", "queue", "-t", ""])
    assert complete(script, ["hctl", "completion", ""]) == ["bash", "fish", "zsh"]


def test_scripts_are_valid_shell_and_cover_every_command(capsys):
    """`hctl completion bash|zsh` print scripts naming every command; bash parses it."""
    assert main(["completion", "bash"]) == 0
    bash = capsys.readouterr().out
    assert BASH is not None
    subprocess.run([BASH, "-n"], input=bash, text=True, check=True)
    tree = command_tree(build_parser())
    zsh = zsh_script(build_parser())
    for name in tree.subcommands:
        assert name in bash and name in zsh
    assert zsh.startswith("#compdef hctl")
    zsh_binary = shutil.which("zsh")
    if zsh_binary:
        subprocess.run([zsh_binary, "-n"], input=zsh, text=True, check=True)


def stand_in(tmp_path: Path, answers: dict[str, str]) -> str:
    """A program answering `__complete KIND` as hctl would, from `answers`; it fails for any
    other kind, as hctl does when the master is down (printing to stderr only)."""
    program = tmp_path / "hctl"
    cases = "\n".join(
        f'  "__complete {kind}") printf "{words}" ;;' for kind, words in answers.items()
    )
    program.write_text(
        f'#!/bin/sh\ncase "$*" in\n{cases}\n  *) echo "master down" >&2; exit 9 ;;\nesac\n'
    )
    program.chmod(0o755)
    return str(program)


def test_job_ids_nodes_gpu_types_and_workloads_come_from_the_master(
    script: str, tmp_path: Path
) -> None:
    """`hctl cancel <TAB>` offers your job ids, `hctl drain <TAB>` the nodes, `--gpu-type`
    the cluster's GPU types and `--workload` its workloads, each asked of the hctl typed."""
    hctl = stand_in(
        tmp_path,
        {
            "jobs": "12\\n14_3\\n",
            "nodes": "gpu-01\\ngpu-02\\n",
            "gpu-types": "a100\\nv100\\n",
            "workloads": "lstm\\nresnet\\n",
        },
    )
    assert complete(script, [hctl, "cancel", ""]) == ["12", "14_3"]
    assert complete(script, [hctl, "show", "1"]) == ["12", "14_3"]
    assert complete(script, [hctl, "drain", "gpu-0"]) == ["gpu-01", "gpu-02"]
    assert complete(script, [hctl, "submit", "--gpu-type", ""]) == ["a100", "v100"]
    assert complete(script, [hctl, "submit", "--workload", "r"]) == ["resnet"]
    # Not asked where nothing live is completed.
    assert complete(script, [hctl, "queue", "-t", "pend"]) == ["pending"]


def test_a_master_that_does_not_answer_offers_nothing_and_prints_nothing(
    script: str, tmp_path: Path
) -> None:
    """A TAB with the master down leaves the command line as it was."""
    hctl = stand_in(tmp_path, {})
    assert complete(script, [hctl, "cancel", ""]) == []


def test_fish_script_walks_the_same_tree() -> None:
    """The fish script knows the commands, which options take values, their choices, and
    where to ask the master (`__complete` with the kind), from the same parser."""
    fish = fish_script(build_parser())
    assert "complete -c hctl -f -a '(__hctl_complete)'" in fish
    assert "        case 'admin token'\n            echo 'create list revoke'" in fish
    assert "        case 'queue|-t'\n" in fish
    assert "        case 'cancel|'\n            echo 'jobs'" in fish
    assert "        case 'submit|--gpu-type'\n            echo 'gpu-types'" in fish
    assert "$program __complete $kind 2>/dev/null" in fish

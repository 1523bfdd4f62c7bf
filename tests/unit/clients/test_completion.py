"""Shell completion scripts generated from the parser actually complete."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from clients.cli.completion import bash_script, command_tree, zsh_script
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
    assert complete(script, ["hctl", "completion", ""]) == ["bash", "zsh"]


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

"""Shell completion scripts generated from the parser actually complete, in bash, zsh and
fish themselves (`make shells` installs zsh and fish)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from clients.cli.completion import bash_script, command_tree, fish_script, zsh_script
from clients.cli.main import build_parser, main

SHELLS = ("bash", "zsh", "fish")

# zsh completes only inside its line editor: the script's function runs in a real zsh with
# the editor's parameters set (`words`, `CURRENT`, `PREFIX`) and its builtins that only the
# editor provides stood in for: `compadd` keeps the words that start with what is typed, as
# zsh's own does, and `_files` lists the files that do.
ZSH_EDITOR = """compdef() { :; }
compadd() {
    [[ $1 == -- ]] && shift
    local word
    for word in "$@"; do [[ $word == "$PREFIX"* ]] && print -r -- "$word"; done
    return 0
}
_files() { print -rl -- "$PREFIX"*(N); }
"""

Complete = Callable[[list[str]], list[str]]


def _shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is needed to test its completion: run `make shells`")
    return path


def _run(argv: list[str], cwd: Path) -> list[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    assert result.returncode == 0, f"{argv[0]} exited {result.returncode}: {result.stderr}"
    # fish prints "word<TAB>description" where a description is known.
    return [line.split("\t", 1)[0] for line in result.stdout.splitlines() if line]


def completer(shell: str, cwd: Path) -> Complete:
    """A function that completes `words` (the last is being typed) in `shell` running the
    script `hctl completion SHELL` prints, in `cwd` (where file names complete)."""
    script = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[shell](build_parser())
    binary = _shell(shell)

    def complete(words: list[str]) -> list[str]:
        quoted = " ".join(f"'{w}'" for w in words)
        if shell == "bash":
            program = (
                f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _hctl; "
                'printf "%s\\n" "${COMPREPLY[@]}"'
            )
            return _run([binary, "--norc", "-c", program], cwd)
        if shell == "zsh":
            program = (
                f"{ZSH_EDITOR}{script}\nwords=({quoted}); CURRENT={len(words)}; "
                f"PREFIX='{words[-1]}'; _hctl"
            )
            return _run([binary, "-f", "-c", program], cwd)
        line = " ".join(words).replace("\\", "\\\\").replace("'", "\\'")
        program = f"{script}\ncomplete -C '{line}'"
        return _run([binary, "--no-config", "-c", program], cwd)

    return complete


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with no files: a completion that falls back to file names offers none."""
    return tmp_path_factory.mktemp("nothing-here")


@pytest.fixture(scope="module", params=SHELLS)
def complete(request: pytest.FixtureRequest, empty_dir: Path) -> Complete:
    return completer(request.param, empty_dir)


def test_command_names_complete(complete: Complete) -> None:
    """`hctl qu<TAB>` offers queue; `hctl <TAB>` offers every command."""
    assert complete(["hctl", "qu"]) == ["queue"]
    everything = complete(["hctl", ""])
    assert {"submit", "queue", "show", "admin", "completion"} <= set(everything)
    assert "token" not in everything  # the unlisted short form of `admin token`


def test_options_of_the_current_command_complete_past_global_options(complete: Complete) -> None:
    """Options complete for the command found after `--master VALUE`."""
    offered = complete(["hctl", "--master", "m:1", "submit", "--gpu"])
    assert set(offered) == {"--gpus", "--gpu-type", "--gpu-memory"}


def test_nested_commands_and_values_complete(complete: Complete) -> None:
    """`admin token cr` completes to create; `queue -t` offers the states; completion its
    shells."""
    assert complete(["hctl", "admin", ""]) == ["token"]
    assert complete(["hctl", "admin", "token", "cr"]) == ["create"]
    assert "--admin" in complete(["hctl", "admin", "token", "create", "--ad"])
    assert "preempted" in complete(["hctl", "queue", "-t", ""])
    assert sorted(complete(["hctl", "completion", ""])) == ["bash", "fish", "zsh"]


def test_scripts_are_valid_shell_and_cover_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`hctl completion bash|zsh|fish` print scripts naming every command, which each
    shell parses."""
    tree = command_tree(build_parser())
    for shell, check in (("bash", ["-n"]), ("zsh", ["-n"]), ("fish", ["--no-execute"])):
        assert main(["completion", shell]) == 0
        script = capsys.readouterr().out
        subprocess.run([_shell(shell), *check], input=script, text=True, check=True)
        for name in tree.subcommands:
            assert name in script
    assert zsh_script(build_parser()).startswith("#compdef hctl")


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
    complete: Complete, tmp_path: Path
) -> None:
    """`hctl cancel <TAB>` offers your active job ids, `hctl requeue`, `hctl logs` and
    `hctl show` your recent ended ones too, `hctl drain <TAB>` the nodes, `--gpu-type` the
    cluster's GPU types and `--workload` its workloads, each asked of the hctl typed."""
    hctl = stand_in(
        tmp_path,
        {
            "jobs": "12\\n14_3\\n",
            "recent-jobs": "12\\n14_3\\n9\\n",
            "nodes": "gpu-01\\ngpu-02\\n",
            "gpu-types": "a100\\nv100\\n",
            "workloads": "lstm\\nresnet\\n",
        },
    )
    assert sorted(complete([hctl, "cancel", ""])) == ["12", "14_3"]
    assert sorted(complete([hctl, "hold", "1"])) == ["12", "14_3"]
    for command in ("requeue", "logs", "show"):
        assert sorted(complete([hctl, command, ""])) == ["12", "14_3", "9"], command
    assert sorted(complete([hctl, "show", "1"])) == ["12", "14_3"]
    assert sorted(complete([hctl, "drain", "gpu-0"])) == ["gpu-01", "gpu-02"]
    assert sorted(complete([hctl, "submit", "--gpu-type", ""])) == ["a100", "v100"]
    assert complete([hctl, "submit", "--workload", "r"]) == ["resnet"]
    # Not asked where nothing live is completed.
    assert complete([hctl, "queue", "-t", "pend"]) == ["pending"]


def test_a_master_that_does_not_answer_offers_nothing_and_prints_nothing(
    complete: Complete, tmp_path: Path
) -> None:
    """A TAB with the master down leaves the command line as it was."""
    hctl = stand_in(tmp_path, {})
    assert complete([hctl, "cancel", ""]) == []
    assert complete([hctl, "requeue", ""]) == []


def test_the_job_argument_of_each_command_asks_for_the_jobs_it_acts_on() -> None:
    """Commands that act on ended jobs (requeue, logs, show) ask for recent ones too; the
    others for active jobs only."""
    tree = command_tree(build_parser())
    kinds = {name: node.positional_live for name, node in tree.subcommands.items()}
    assert {kinds[c] for c in ("requeue", "logs", "show")} == {"recent-jobs"}
    assert {kinds[c] for c in ("cancel", "hold", "release", "update", "wait")} == {"jobs"}

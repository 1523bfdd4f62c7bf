"""``hctl completion bash|zsh``: shell completion scripts generated from the parser itself.

The script knows every listed subcommand (nested ones such as ``admin token create`` too),
their options, which options take a value, and the values some of them accept, so it cannot go
stale: it is regenerated from whatever ``hctl`` is installed.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field

from clients.cli.command import Command, Context, ExitCode

CHOICES_ATTRIBUTE = "hctl_completion_choices"


def offer(action: argparse.Action, values: Iterable[str]) -> argparse.Action:
    """Marks the values shell completion offers for an option that takes free text."""
    setattr(action, CHOICES_ATTRIBUTE, tuple(values))
    return action


@dataclass
class CommandNode:
    """One level of the command tree, as completion needs it."""

    subcommands: dict[str, CommandNode] = field(default_factory=dict)
    options: list[str] = field(default_factory=list)
    # Options that consume the next word, with the words to offer for it (may be empty).
    value_options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Words to offer for positional arguments.
    positional_choices: list[str] = field(default_factory=list)


def command_tree(parser: argparse.ArgumentParser) -> CommandNode:
    node = CommandNode()
    # argparse has no public way to walk its actions; _actions is stable since Python 3.2.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                command = sub.get_default("_command")
                if isinstance(command, Command) and not command.listed:
                    continue
                node.subcommands[name] = command_tree(sub)
            continue
        choices = tuple(str(c) for c in (action.choices or ()))
        choices = choices or getattr(action, CHOICES_ATTRIBUTE, ())
        if action.option_strings:
            node.options.extend(action.option_strings)
            if action.nargs != 0:
                for option in action.option_strings:
                    node.value_options[option] = choices
        else:
            node.positional_choices.extend(choices)
    return node


def _paths(node: CommandNode, prefix: str = "") -> Iterable[tuple[str, CommandNode]]:
    yield prefix, node
    for name, sub in node.subcommands.items():
        yield from _paths(sub, f"{prefix} {name}".strip())


def _words(items: Iterable[str]) -> str:
    return " ".join(items)


def _helpers(tree: CommandNode, prefix: str) -> str:
    """Shell functions shared by the bash and zsh scripts (plain POSIX `case`)."""
    subcommands, options, takes_value, choices = [], [], [], []
    for path, node in _paths(tree):
        if node.subcommands:
            subcommands.append(f'        "{path}") echo "{_words(node.subcommands)}" ;;')
        options.append(f'        "{path}") echo "{_words(node.options)}" ;;')
        for option, values in node.value_options.items():
            takes_value.append(f'"{path}|{option}"')
            if values:
                choices.append(f'        "{path}|{option}") echo "{_words(values)}" ;;')
        if node.positional_choices:
            choices.append(f'        "{path}|") echo "{_words(node.positional_choices)}" ;;')
    return "\n".join(
        [
            f"{prefix}_subcommands() {{",
            '    case "$1" in',
            *subcommands,
            "    esac",
            "}",
            f"{prefix}_options() {{",
            '    case "$1" in',
            *options,
            "    esac",
            "}",
            f"{prefix}_takes_value() {{",
            '    case "$1|$2" in',
            f"        {'|'.join(takes_value) or '__none__'}) return 0 ;;",
            "    esac",
            "    return 1",
            "}",
            f"{prefix}_choices() {{",
            '    case "$1|$2" in',
            *choices,
            "    esac",
            "}",
        ]
    )


def _command_path_loop(*, words: str, first: int, current: str) -> str:
    """The loop both scripts start with (bash and zsh differ only in how they name the words
    and where they start counting): walks the words before the cursor, setting ``cmdpath`` to
    the subcommands typed so far and ``skip`` when the last word is an option that wants a
    value."""
    return f"""    for ((i = {first}; i < {current}; i++)); do
        word="${{{words}[i]}}"
        if ((skip)); then skip=0; continue; fi
        if [[ "$word" == -* ]]; then
            _hctl_takes_value "$cmdpath" "$word" && skip=1
            continue
        fi
        subs=" $(_hctl_subcommands "$cmdpath") "
        if [[ "$subs" == *" $word "* ]]; then cmdpath="${{cmdpath:+$cmdpath }}$word"; fi
    done"""


def bash_script(parser: argparse.ArgumentParser) -> str:
    tree = command_tree(parser)
    return f"""# bash completion for hctl; generated by `hctl completion bash`.
# Install: hctl completion bash > ~/.local/share/bash-completion/completions/hctl
{_helpers(tree, "_hctl")}
_hctl() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local cmdpath="" word i skip=0 subs
{_command_path_loop(words="COMP_WORDS", first=1, current="COMP_CWORD")}
    if ((skip)); then
        COMPREPLY=($(compgen -W "$(_hctl_choices "$cmdpath" "$prev")" -- "$cur"))
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_hctl_options "$cmdpath")" -- "$cur"))
        return 0
    fi
    COMPREPLY=($(compgen -W "$(_hctl_subcommands "$cmdpath") $(_hctl_choices "$cmdpath" "")" \\
        -- "$cur"))
}}
complete -o default -F _hctl hctl
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    tree = command_tree(parser)
    return f"""#compdef hctl
# zsh completion for hctl; generated by `hctl completion zsh`.
# Install: hctl completion zsh > "${{fpath[1]}}/_hctl"   (then restart zsh)
{_helpers(tree, "_hctl")}
_hctl() {{
    local cmdpath="" word i skip=0 subs
    local cur="${{words[CURRENT]}}" prev="${{words[CURRENT-1]}}"
    local -a offered
{_command_path_loop(words="words", first=2, current="CURRENT")}
    if ((skip)); then
        offered=(${{=$(_hctl_choices "$cmdpath" "$prev")}})
    elif [[ "$cur" == -* ]]; then
        offered=(${{=$(_hctl_options "$cmdpath")}})
    else
        offered=(${{=$(_hctl_subcommands "$cmdpath")}} ${{=$(_hctl_choices "$cmdpath" "")}})
    fi
    if ((${{#offered}})); then
        compadd -- $offered
    else
        _files
    fi
}}
compdef _hctl hctl
"""


SHELLS = {"bash": bash_script, "zsh": zsh_script}


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=sorted(SHELLS), help="shell to generate for")


def _run(args: argparse.Namespace, ctx: Context) -> int:
    from clients.cli.main import build_parser

    script = SHELLS[args.shell](build_parser())
    ctx.out.file.write(script)
    ctx.out.file.flush()
    return ExitCode.OK


COMMANDS = [
    Command(
        "completion",
        "Print a shell completion script (bash or zsh)",
        _configure,
        _run,
        epilog="examples:\n"
        "  hctl completion bash > ~/.local/share/bash-completion/completions/hctl\n"
        '  hctl completion zsh > "${fpath[1]}/_hctl"\n'
        "  source <(hctl completion bash)   # this shell only",
        uses_master=False,
    ),
]

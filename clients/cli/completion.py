"""``hctl completion bash|zsh|fish``: shell completion scripts generated from the parser.

The script knows every listed subcommand (nested ones such as ``admin token create`` too),
their options, which options take a value, and the values some of them accept, so it cannot go
stale: it is regenerated from whatever ``hctl`` is installed. What only the cluster knows
(your job ids, recent ended ones where a command acts on them too, node names, GPU types,
workloads) the script asks for as you press TAB, with
``hctl __complete KIND``: one short call to the master, printing nothing when it is not there.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field

from clients.cli.command import Command, Context, ExitCode

CHOICES_ATTRIBUTE = "hctl_completion_choices"

# What the master is asked for, by the argument it completes: positionals by their metavar
# (every command names a job JOB and a node NODE), options by their name. Commands that act
# on ended jobs too (a requeue, the logs, a job's details) are offered recent ended jobs as
# well as active ones.
LIVE_KINDS = ("jobs", "recent-jobs", "nodes", "gpu-types", "workloads")
LIVE_BY_METAVAR = {"JOB": "jobs", "NODE": "nodes"}
LIVE_BY_COMMAND = {"requeue": "recent-jobs", "logs": "recent-jobs", "show": "recent-jobs"}
LIVE_BY_OPTION = {"--gpu-type": "gpu-types", "--workload": "workloads"}
# How many of the caller's ended jobs, the newest, `recent-jobs` offers: enough for a week's
# work, few enough for one short call.
RECENT_ENDED = 50
# A TAB must not hang on a master that does not answer.
LIVE_TIMEOUT_S = 2.0


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
    # What to ask the master for: option -> kind, and the positionals' kind ("" for none).
    value_live: dict[str, str] = field(default_factory=dict)
    positional_live: str = ""


def command_tree(parser: argparse.ArgumentParser, name: str = "") -> CommandNode:
    """The tree of `parser`'s commands; `name` is the command `parser` parses (empty at
    the top)."""
    node = CommandNode()
    # argparse has no public way to walk its actions; _actions is stable since Python 3.2.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                command = sub.get_default("_command")
                if isinstance(command, Command) and not command.listed:
                    continue
                node.subcommands[sub_name] = command_tree(sub, sub_name)
            continue
        choices = tuple(str(c) for c in (action.choices or ()))
        choices = choices or getattr(action, CHOICES_ATTRIBUTE, ())
        if action.option_strings:
            node.options.extend(action.option_strings)
            if action.nargs != 0:
                for option in action.option_strings:
                    node.value_options[option] = choices
                    if option in LIVE_BY_OPTION:
                        node.value_live[option] = LIVE_BY_OPTION[option]
        else:
            node.positional_choices.extend(choices)
            if isinstance(action.metavar, str) and action.metavar in LIVE_BY_METAVAR:
                node.positional_live = LIVE_BY_METAVAR[action.metavar]
                if action.metavar == "JOB":
                    node.positional_live = LIVE_BY_COMMAND.get(name, node.positional_live)
    return node


def _paths(node: CommandNode, prefix: str = "") -> Iterable[tuple[str, CommandNode]]:
    yield prefix, node
    for name, sub in node.subcommands.items():
        yield from _paths(sub, f"{prefix} {name}".strip())


def _words(items: Iterable[str]) -> str:
    return " ".join(items)


def _helpers(tree: CommandNode, prefix: str) -> str:
    """Shell functions shared by the bash and zsh scripts (plain POSIX `case`)."""
    subcommands, options, takes_value, choices, live = [], [], [], [], []
    for path, node in _paths(tree):
        for option, kind in node.value_live.items():
            live.append(f'        "{path}|{option}") kind={kind} ;;')
        if node.positional_live:
            live.append(f'        "{path}|") kind={node.positional_live} ;;')
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
            # The words only the master knows: `hctl __complete KIND`, run as the user typed
            # hctl ($3), so the script works for an hctl that is not on PATH too.
            f"{prefix}_live() {{",
            "    local kind",
            '    case "$1|$2" in',
            *live,
            "        *) return 0 ;;",
            "    esac",
            '    "$3" __complete "$kind" 2>/dev/null',
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
        COMPREPLY=($(compgen -W "$(_hctl_choices "$cmdpath" "$prev") \\
            $(_hctl_live "$cmdpath" "$prev" "${{COMP_WORDS[0]}}")" -- "$cur"))
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_hctl_options "$cmdpath")" -- "$cur"))
        return 0
    fi
    COMPREPLY=($(compgen -W "$(_hctl_subcommands "$cmdpath") $(_hctl_choices "$cmdpath" "") \\
        $(_hctl_live "$cmdpath" "" "${{COMP_WORDS[0]}}")" -- "$cur"))
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
        offered=(${{=$(_hctl_choices "$cmdpath" "$prev")}}
            ${{=$(_hctl_live "$cmdpath" "$prev" "${{words[1]}}")}})
    elif [[ "$cur" == -* ]]; then
        offered=(${{=$(_hctl_options "$cmdpath")}})
    else
        offered=(${{=$(_hctl_subcommands "$cmdpath")}} ${{=$(_hctl_choices "$cmdpath" "")}}
            ${{=$(_hctl_live "$cmdpath" "" "${{words[1]}}")}})
    fi
    if ((${{#offered}})); then
        compadd -- $offered
    else
        _files
    fi
}}
compdef _hctl hctl
"""


def _fish_switch(name: str, cases: list[tuple[str, str]], *, test: str) -> list[str]:
    """A fish function that echoes the words of the case its arguments match."""
    lines = [f"function {name}", f"    switch {test}"]
    for case, words in cases:
        lines += [f"        case {_fish_quote(case)}", f"            echo {_fish_quote(words)}"]
    return [*lines, "    end", "end"]


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_script(parser: argparse.ArgumentParser) -> str:
    tree = command_tree(parser)
    subcommands, options, choices, live, takes_value = [], [], [], [], []
    for path, node in _paths(tree):
        if node.subcommands:
            subcommands.append((path, _words(node.subcommands)))
        options.append((path, _words(node.options)))
        for option, values in node.value_options.items():
            takes_value.append((f"{path}|{option}", "yes"))
            if values:
                choices.append((f"{path}|{option}", _words(values)))
        if node.positional_choices:
            choices.append((f"{path}|", _words(node.positional_choices)))
        live += [(f"{path}|{option}", kind) for option, kind in node.value_live.items()]
        if node.positional_live:
            live.append((f"{path}|", node.positional_live))
    functions = [
        *_fish_switch("__hctl_subcommands", subcommands, test="$argv[1]"),
        *_fish_switch("__hctl_options", options, test="$argv[1]"),
        *_fish_switch("__hctl_takes_value", takes_value, test='"$argv[1]|$argv[2]"'),
        *_fish_switch("__hctl_choices", choices, test='"$argv[1]|$argv[2]"'),
        *_fish_switch("__hctl_live_kind", live, test='"$argv[1]|$argv[2]"'),
    ]
    body = "\n".join(functions)
    return f"""# fish completion for hctl; generated by `hctl completion fish`.
# Install: hctl completion fish > ~/.config/fish/completions/hctl.fish
{body}
function __hctl_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l program $words[1]
    set -e words[1]
    set -l cmdpath ''
    set -l skip 0
    set -l prev ''
    for word in $words
        set prev $word
        if test $skip -eq 1
            set skip 0
            continue
        end
        if string match -q -- '-*' $word
            test -n "$(__hctl_takes_value "$cmdpath" $word)"; and set skip 1
            continue
        end
        if contains -- $word (string split ' ' -- (__hctl_subcommands "$cmdpath"))
            set cmdpath (string trim -- "$cmdpath $word")
        end
    end
    set -l kind
    set -l offered
    if test $skip -eq 1
        set offered (string split -n ' ' -- (__hctl_choices "$cmdpath" $prev))
        set kind (__hctl_live_kind "$cmdpath" $prev)
    else if string match -q -- '-*' $cur
        string split -n ' ' -- (__hctl_options "$cmdpath")
        return
    else
        set offered (string split -n ' ' -- (__hctl_subcommands "$cmdpath") \\
            (__hctl_choices "$cmdpath" ''))
        set kind (__hctl_live_kind "$cmdpath" '')
    end
    if test -n "$kind"
        # The words only the master knows, from the hctl the user typed.
        string join \\n -- $offered ($program __complete $kind 2>/dev/null)
    else if set -q offered[1]
        string join \\n -- $offered
    else
        __fish_complete_path $cur
    end
end
complete -c hctl -f -a '(__hctl_complete)'
"""


SHELLS = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}


def live_words(kind: str, ctx: Context) -> list[str]:
    """What `hctl __complete KIND` prints: the caller's active job ids (array elements as
    12_3; `recent-jobs` adds their newest ended ones, at most RECENT_ENDED, newest first),
    node names, GPU types or workloads, as the master knows them now."""
    client = ctx.client()
    if kind in ("jobs", "recent-jobs"):
        from clients.cli.arrays import display_id
        from clients.types import JobState

        me = client.whoami(timeout=LIVE_TIMEOUT_S).user
        active = (JobState.PENDING, JobState.RUNNING, JobState.PREEMPTED)
        jobs = client.list_jobs(user=me, states=active, timeout=LIVE_TIMEOUT_S)
        words = [display_id(job) for job in jobs]
        if kind == "recent-jobs":
            ended = client.job_history(user=me, limit=RECENT_ENDED, timeout=LIVE_TIMEOUT_S)
            words += [display_id(record.job) for record in ended]
        return list(dict.fromkeys(words))
    if kind == "nodes":
        return [node.name for node in client.list_nodes(timeout=LIVE_TIMEOUT_S)]
    if kind == "gpu-types":
        nodes = client.list_nodes(timeout=LIVE_TIMEOUT_S)
        return sorted({gpu.type for node in nodes for gpu in node.gpus})
    return sorted(w.name for w in client.list_workloads(timeout=LIVE_TIMEOUT_S))


def _configure_live(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=LIVE_KINDS)


def _run_live(args: argparse.Namespace, ctx: Context) -> int:
    try:
        words = live_words(args.kind, ctx)
    except Exception:
        # A TAB against a master that is down or refuses: nothing to offer, and nothing to
        # print over the user's command line.
        return ExitCode.OK
    ctx.out.file.write("".join(f"{word}\n" for word in words))
    ctx.out.file.flush()
    return ExitCode.OK


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
        "Print a shell completion script (bash, zsh or fish)",
        _configure,
        _run,
        epilog="examples:\n"
        "  hctl completion bash > ~/.local/share/bash-completion/completions/hctl\n"
        '  hctl completion zsh > "${fpath[1]}/_hctl"\n'
        "  hctl completion fish > ~/.config/fish/completions/hctl.fish\n"
        "  source <(hctl completion bash)   # this shell only",
        uses_master=False,
    ),
    Command(
        "__complete",
        "Print words for shell completion: your job ids, nodes, GPU types or workloads",
        _configure_live,
        _run_live,
        epilog="example (what a completion script runs as you press TAB):\n  hctl __complete jobs",
        listed=False,
    ),
]

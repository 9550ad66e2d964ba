"""Shell completion scripts generated from the `kit` argparse tree, so that they never drift
from the commands (no completion library: argparse already knows every word)."""

from __future__ import annotations

import argparse
import shlex

from kit.site.load import available_sites

FUNCTION = "_kit_complete"
SHELLS = ("bash", "zsh")


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings]


def _case(key: str, **lists: list[str]) -> str:
    """One `case` branch setting shell variables; every word is quoted, and compgen -W sees only
    names the kit itself defines (site names are checked against NAME_RE)."""
    sets = " ".join(f"{var}={shlex.quote(' '.join(words))}" for var, words in lists.items())
    return f"    {shlex.quote(key)}) {sets} ;;"


def bash_script(parser: argparse.ArgumentParser) -> str:
    """A `complete -F` function: it walks the typed words down the tree of subcommands, then offers
    the node's subcommands (options after a '-'), an option's choices, the known site names after
    --site; where none fits it offers nothing and `-o default` lets bash complete file names."""
    steps, nodes, values = [], [], []
    sites = available_sites()
    pending = [("kit", parser)]
    while pending:
        node, p = pending.pop(0)
        children = _children(p)
        for name, child in children.items():
            steps.append(
                f"    {shlex.quote(f'{node}:{name}')}) node={shlex.quote(f'{node} {name}')} ;;"
            )
            pending.append((f"{node} {name}", child))
        positional = [
            str(c)
            for a in p._actions
            if not a.option_strings and a.choices and not isinstance(a, argparse._SubParsersAction)
            for c in a.choices
        ]
        nodes.append(
            _case(
                node,
                subs=list(children) + positional,
                opts=[flag for a in _options(p) for flag in a.option_strings],
            )
        )
        for action in _options(p):
            if action.nargs == 0:
                continue
            for flag in action.option_strings:
                if flag == "--site":
                    values.append(_case(f"{node}:{flag}", words=sites))
                elif action.choices:
                    values.append(_case(f"{node}:{flag}", words=[str(c) for c in action.choices]))
                else:  # a path or a free value: the shell's file names
                    values.append(_case(f"{node}:{flag}", words=[]) + "  # files")
    return "\n".join(
        [
            "# bash completion for kit (secure-site-kit), written by `kit completion bash`",
            f"{FUNCTION}() {{",
            '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="" node=kit words=- subs="" opts="" i',
            '  (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
            "  for (( i = 1; i < COMP_CWORD; i++ )); do",
            '    case "$node:${COMP_WORDS[i]}" in',
            *steps,
            "    esac",
            "  done",
            '  case "$node:$prev" in',
            *values,
            "  esac",
            '  if [[ "$words" == - ]]; then',
            '    case "$node" in',
            *nodes,
            "    esac",
            '    if [[ "$cur" == -* ]]; then words="$opts"; else words="$subs"; fi',
            "  fi",
            '  COMPREPLY=( $(compgen -W "$words" -- "$cur") )',
            "  return 0  # no match is no failure",
            "}",
            f"complete -o default -F {FUNCTION} kit",
            "",
        ]
    )


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """zsh runs the bash function through its bashcompinit layer."""
    text = bash_script(parser)
    if shell == "zsh":
        text = "autoload -U +X bashcompinit && bashcompinit\n" + text
    return text

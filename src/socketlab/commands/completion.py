"""`orchestrate completion bash|zsh|tcsh`: print a shell completion script for every command
and flag (shtab reads the same parser `orchestrate` uses, so it is never out of date)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or tcsh)",
        description="Print a completion script for SHELL. bash: "
        "`orchestrate completion bash > ~/.local/share/bash-completion/completions/orchestrate`; "
        "zsh: `orchestrate completion zsh > ~/.zfunc/_orchestrate` (with ~/.zfunc on fpath).",
    )
    parser.add_argument("shell", choices=["bash", "zsh", "tcsh"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shtab

    # cli.build_parser sets root_parser: commands/ never imports the cli that discovers it
    print(shtab.complete(args.root_parser, shell=args.shell))
    return 0

"""`orchestrate`: the command line. It parses arguments and calls library functions, nothing more.

Each subcommand lives in ``socketlab.commands.<name>`` and provides ``register(subparsers)``,
which adds its parser and sets ``func``. Modules are discovered, so adding a command is adding
a file.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from socketlab import __version__, commands
from socketlab.errors import SocketlabError


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; users get the one line that names the mistake."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="orchestrate",
        description="Run declarative experiments on isolated CPU sockets and compare them "
        "with published values.",
    )
    parser.add_argument("--version", action="version", version=f"socketlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except SocketlabError as exc:
        print(f"orchestrate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("orchestrate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`orchestrate report X | head`): not an error worth a traceback.
        # Point stdout at devnull so the interpreter's final flush doesn't raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
